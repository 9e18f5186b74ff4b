"""Signed results: every result kip writes carries an Ed25519 signature, so a client can
tell kip's answer from one written by anybody else who can write its reply topic.

The signature is over ``b"kip-result-v1\\n"`` followed by the record's value bytes, as
they are on the wire, and travels in the header

    kip-signature: ed25519:<key id>:<hex signature, 128 characters>

Clients hold the deployment's public keys (``ResultKeys``); the private key
(``ResultSigningKey``) stays with the pipeline and the workers. A result also names the
sha256 of the request message it answers (``request_sha256``), so a valid signature on
a result for some other message (a replay, or kip's rejection of a forgery that reused
a request id) answers nothing the client sent. docs/protocol.md shows both checks.

Why Ed25519 and not an HMAC per tenant: a client can verify without being able to sign,
the workers never hold tenants' secrets, and one key covers results of messages that
named no real tenant. It costs ~20 µs to sign and ~60 µs to verify (docs/benchmarks.md).

The same key seals the audit chains (schemas/audit_chain.py), under a scheme line of
their own.
"""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from schemas.messages import ID_PATTERN

SIGNATURE_HEADER = "kip-signature"
RESULT_SCHEME = b"kip-result-v1\n"
_HEX64 = r"^[0-9a-f]{64}$"


def request_sha256(payload: bytes) -> str:
    """The digest a result names: sha256 of the request message's value bytes."""
    return hashlib.sha256(payload).hexdigest()


class ResultSigningKey(BaseModel):
    """``{"key_id": "r1", "private_key": "<hex of the 32-byte Ed25519 seed>"}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    key_id: str = Field(pattern=ID_PATTERN)
    private_key: SecretStr

    @classmethod
    def generate(cls, key_id: str = "r1") -> ResultSigningKey:
        seed = Ed25519PrivateKey.generate().private_bytes_raw().hex()
        return cls(key_id=key_id, private_key=seed)

    def signer(self) -> ResultSigner:
        seed = bytes.fromhex(self.private_key.get_secret_value())
        return ResultSigner(self.key_id, Ed25519PrivateKey.from_private_bytes(seed))

    def public(self) -> str:
        return self.signer().public_hex


class ResultSigner:
    def __init__(self, key_id: str, key: Ed25519PrivateKey) -> None:
        self.key_id = key_id
        self._key = key
        self._prefix = f"ed25519:{key_id}:"

    @property
    def public_hex(self) -> str:
        return self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def header(self, value: bytes) -> tuple[str, bytes]:
        """The signature header of a result record with ``value``."""
        return SIGNATURE_HEADER, self.signature(RESULT_SCHEME + value).encode()

    def signature(self, message: bytes) -> str:
        """``ed25519:<key id>:<hex signature of message>``. Every message this key signs
        starts with its scheme's line (``kip-result-v1``, ``kip-audit-seal-v1``), so a
        signature made for one use is never valid for another."""
        return self._prefix + self._key.sign(message).hex()


class ResultKeys(BaseModel):
    """The public keys a client trusts: ``{"keys": {"<key id>": "<hex public key>"}}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    keys: dict[str, str] = Field(min_length=1)

    def verifier(self) -> ResultVerifier:
        return ResultVerifier({kid: Ed25519PublicKey.from_public_bytes(bytes.fromhex(pub))
                               for kid, pub in self.keys.items()})


class ResultVerifier:
    def __init__(self, keys: dict[str, Ed25519PublicKey]) -> None:
        self._keys = keys

    def valid(self, value: bytes, headers) -> bool:
        """Whether ``headers`` hold a signature of ``value`` by a trusted key."""
        found = [v for k, v in headers or () if k == SIGNATURE_HEADER]
        return len(found) == 1 and self.verified(found[0].decode("ascii", "replace"),
                                                 RESULT_SCHEME + value)

    def verified(self, signature: str, message: bytes) -> bool:
        """Whether ``signature`` (as ``ResultSigner.signature`` writes it) is a trusted
        key's signature of ``message``."""
        scheme, _, rest = signature.partition(":")
        key_id, _, hex_signature = rest.partition(":")
        key = self._keys.get(key_id)
        if scheme != "ed25519" or key is None:
            return False
        try:
            key.verify(bytes.fromhex(hex_signature), message)
        except (InvalidSignature, ValueError):
            return False
        return True
