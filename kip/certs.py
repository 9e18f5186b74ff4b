"""TLS material for a secured broker: a CA of its own, the broker's certificate and client
certificates for mTLS, as PEM files (Kafka reads PEM keystores and truststores
directly). Keys are EC P-256, unencrypted PKCS#8, written readable by their owner only.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kip.runtime.files import private_dir, write_private

VALID_DAYS = 825   # the longest a TLS leaf certificate may live for common clients


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, and the PEM file holding both (a Kafka keystore)."""

    cert: Path
    key: Path
    keystore: Path


class CertificateAuthority:
    """A CA kept in ``folder`` (``ca.pem``, ``ca-key.pem``); made on first use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cert_path = folder / "ca.pem"
        self.key_path = folder / "ca-key.pem"
        if not self.cert_path.exists():
            self._create()
        self._key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())

    def _create(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kip local CA")])
        cert = (_builder(name, name, key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=False, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        private_dir(self.folder)
        write_private(self.key_path, _key_pem(key))
        write_private(self.cert_path, cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, server: bool = False,
              hostnames: tuple[str, ...] = ()) -> Issued:
        """A certificate for ``common_name`` (its principal on kip's brokers): a server
        certificate for localhost, 127.0.0.1 and ``hostnames``, or a client one. Kept
        once made."""
        stem = self.folder / common_name
        issued = Issued(stem.with_suffix(".pem"), stem.with_suffix(".key"),
                        stem.with_suffix(".keystore.pem"))
        if issued.keystore.exists():
            return issued
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (_builder(subject, self._cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            names = [x509.DNSName(h) for h in ("localhost", *hostnames)]
            names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert_pem = builder.sign(self._key, hashes.SHA256()).public_bytes(
            serialization.Encoding.PEM)
        write_private(issued.key, _key_pem(key))
        write_private(issued.cert, cert_pem)
        write_private(issued.keystore, _key_pem(key) + cert_pem)
        return issued


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS)))


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


