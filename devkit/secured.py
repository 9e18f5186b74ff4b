"""What makes a local broker secured: TLS material, SCRAM users, listeners, the authorizer,
and a client config per user for the other commands to read.

Listeners (all on loopback):

- ``SASL_SSL`` (the bootstrap port): SCRAM-SHA-512, SCRAM-SHA-256, and PLAIN over TLS;
- ``MTLS`` (``mtls_port``): TLS with a required client certificate, whose CN is the
  principal;
- ``CONTROLLER``: KRaft's own, SASL PLAIN with a password only the broker knows (KRaft
  controllers cannot use SCRAM: its credentials live in the metadata they serve).

The StandardAuthorizer denies what no ACL allows (``allow.everyone.if.no.acl.found=
false``); ``admin`` (topics, ACLs, users) and the broker's own ``controller`` are super
users. Every other user may do only what ``kip acls apply`` grants it.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from devkit.certs import CertificateAuthority, Issued, write_private

ADMIN, CONTROLLER = "admin", "controller"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
CLIENT_MECHANISM = "SCRAM-SHA-512"


class Security:
    """The security of one local broker, kept in ``folder``: ``tls/`` (CA, certificates),
    ``users.json`` (passwords, 0600) and ``clients/<user>.json`` (client configs)."""

    def __init__(self, folder: Path, users: list[str]) -> None:
        self.folder = folder
        self.users = sorted({ADMIN, *users})
        folder.mkdir(parents=True, exist_ok=True)
        self.ca = CertificateAuthority(folder / "tls")
        self.passwords = self._passwords()

    def _passwords(self) -> dict[str, str]:
        path = self.folder / "users.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        wanted = [*self.users, CONTROLLER]
        passwords = {u: known.get(u) or secrets.token_urlsafe(24) for u in wanted}
        if passwords != known:
            write_private(path, json.dumps(passwords, indent=2).encode())
        return passwords

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that create every SCRAM user."""
        args = []
        for user in self.users:
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram",
                         f"{mechanism}=[name={user},password={self.passwords[user]}]"]
        return args

    def server_properties(self, port: int, mtls_port: int, controller_port: int) -> list[str]:
        server = self.ca.issue("localhost", server=True)
        return [
            f"listeners=SASL_SSL://127.0.0.1:{port},MTLS://127.0.0.1:{mtls_port},"
            f"CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=SASL_SSL://127.0.0.1:{port},MTLS://127.0.0.1:{mtls_port}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,"
            "CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name=SASL_SSL",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            *self._jaas(),
            "ssl.keystore.type=PEM", f"ssl.keystore.location={server.keystore}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={self.ca.cert_path}",
            "listener.name.mtls.ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            f"super.users=User:{ADMIN};User:{CONTROLLER}",
        ]

    def _jaas(self) -> list[str]:
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
        admin, controller = self.passwords[ADMIN], self.passwords[CONTROLLER]
        users = " ".join(f'user_{u}="{self.passwords[u]}"' for u in self.users)
        return [
            f'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram} '
            f'username="{ADMIN}" password="{admin}";',
            f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram};",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={plain} {users};",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            f'listener.name.controller.plain.sasl.jaas.config={plain} '
            f'username="{CONTROLLER}" password="{controller}" user_{CONTROLLER}="{controller}";',
        ]

    def client(self, user: str, bootstrap: str, mechanism: str = CLIENT_MECHANISM) -> dict:
        """The client settings of ``user`` over SASL_SSL (``KafkaConnection`` fields)."""
        return {"bootstrap": bootstrap, "security_protocol": "SASL_SSL",
                "ssl_cafile": str(self.ca.cert_path), "sasl_mechanism": mechanism,
                "sasl_username": user, "sasl_password": self.passwords[user]}

    def mtls_client(self, user: str, bootstrap: str) -> dict:
        """The client settings of ``user`` over mTLS, with a certificate issued for it."""
        issued: Issued = self.ca.issue(user)
        return {"bootstrap": bootstrap, "security_protocol": "SSL",
                "ssl_cafile": str(self.ca.cert_path), "ssl_certfile": str(issued.cert),
                "ssl_keyfile": str(issued.key)}

    def write_client_configs(self, bootstrap: str) -> Path:
        """``clients/<user>.json`` for every user (0600): what ``KIP_KAFKA_CONFIG`` names."""
        folder = self.folder / "clients"
        folder.mkdir(exist_ok=True)
        for user in self.users:
            write_private(folder / f"{user}.json",
                          json.dumps(self.client(user, bootstrap), indent=2).encode())
        return folder
