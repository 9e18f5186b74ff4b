"""What makes a Kafka broker secured for kip: TLS material, a user per role, listeners, the
authorizer, and a client config per user for kip's processes to read
(``KIP_KAFKA_CONFIG``). Used by the local broker (``kip kafka start --secure``) and by
``kip security init`` (docker-compose's init service).

Listeners:

- ``SASL_SSL`` (the bootstrap port): SCRAM-SHA-512 and SCRAM-SHA-256 where the users
  are created when storage is formatted (the local broker), and PLAIN over TLS, whose
  users are listed in the broker's own configuration (compose, whose broker image
  cannot add SCRAM users at format time);
- ``MTLS``: TLS with a required client certificate, whose CN is the principal;
- ``CONTROLLER``: KRaft's own, SASL PLAIN with a password only the broker knows (KRaft
  controllers cannot use SCRAM: its credentials live in the metadata they serve).

The StandardAuthorizer denies what no ACL allows (``allow.everyone.if.no.acl.found=
false``); ``admin`` (topics, ACLs, users) and the broker's own ``controller`` are super
users. Every other user may do only what ``kip acls apply`` grants it.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from kip.certs import CertificateAuthority, Issued
from kip.runtime.files import private_dir, write_private
from kip.pipeline.access import AccessConfig, ApiKey, TenantPolicy
from kip.topics.catalogue import Replication

ADMIN, CONTROLLER = "admin", "controller"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
CLIENT_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Listeners:
    """Where the broker listens and what it advertises."""

    port: int
    mtls_port: int
    controller_port: int
    bind: str = "127.0.0.1"
    advertised: str = "127.0.0.1"
    scram: bool = True      # SCRAM users exist (created at format time)


class Security:
    """The security of one broker, kept in ``folder``: ``tls/`` (CA, certificates),
    ``users.json`` (passwords, 0600) and ``clients/<user>.json`` (client configs).

    ``seen_as``: where ``folder`` is mounted for the broker and for kip's processes, when
    they read it at another path (containers); by default where it is."""

    def __init__(self, folder: Path, users: list[str], hostnames: tuple[str, ...] = (),
                 seen_as: Path | None = None) -> None:
        self.folder = folder
        self.users = sorted({ADMIN, *users})
        self.seen_as = seen_as or folder
        private_dir(folder)
        self.ca = CertificateAuthority(folder / "tls")
        self.hostnames = hostnames
        self.passwords = self._passwords()

    def _passwords(self) -> dict[str, str]:
        path = self.folder / "users.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        wanted = [*self.users, CONTROLLER]
        passwords = {u: known.get(u) or secrets.token_urlsafe(24) for u in wanted}
        if passwords != known:
            write_private(path, json.dumps(passwords, indent=2).encode())
        return passwords

    def _seen(self, path: Path) -> str:
        return str(self.seen_as / path.relative_to(self.folder))

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that create every SCRAM user."""
        args = []
        for user in self.users:
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram",
                         f"{mechanism}=[name={user},password={self.passwords[user]}]"]
        return args

    def server_properties(self, at: Listeners) -> list[str]:
        server = self.ca.issue("broker", server=True, hostnames=self.hostnames)
        mechanisms = [*SCRAM_MECHANISMS, "PLAIN"] if at.scram else ["PLAIN"]
        return [
            f"listeners=SASL_SSL://{at.bind}:{at.port},MTLS://{at.bind}:{at.mtls_port},"
            f"CONTROLLER://{at.bind}:{at.controller_port}",
            f"advertised.listeners=SASL_SSL://{at.advertised}:{at.port},"
            f"MTLS://{at.advertised}:{at.mtls_port}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,"
            "CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name=SASL_SSL",
            f"sasl.mechanism.inter.broker.protocol={mechanisms[0]}",
            "sasl.mechanism.controller.protocol=PLAIN",
            f"listener.name.sasl_ssl.sasl.enabled.mechanisms={','.join(mechanisms)}",
            *self._jaas(at.scram),
            "ssl.keystore.type=PEM", f"ssl.keystore.location={self._seen(server.keystore)}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={self._seen(self.ca.cert_path)}",
            "listener.name.mtls.ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            f"super.users=User:{ADMIN};User:{CONTROLLER}",
            *QUOTA_WINDOW,
        ]

    def _jaas(self, scram: bool) -> list[str]:
        scram_module = "org.apache.kafka.common.security.scram.ScramLoginModule required"
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
        admin, controller = self.passwords[ADMIN], self.passwords[CONTROLLER]
        users = " ".join(f'user_{u}="{self.passwords[u]}"' for u in self.users)
        lines = [f'listener.name.sasl_ssl.plain.sasl.jaas.config={plain} username="{ADMIN}" '
                 f'password="{admin}" {users};']
        if scram:
            lines += [f'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram_module} '
                      f'username="{ADMIN}" password="{admin}";',
                      f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram_module};"]
        return lines + [
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            f'listener.name.controller.plain.sasl.jaas.config={plain} '
            f'username="{CONTROLLER}" password="{controller}" user_{CONTROLLER}="{controller}";',
        ]

    def client(self, user: str, bootstrap: str, mechanism: str = CLIENT_MECHANISM) -> dict:
        """The client settings of ``user`` over SASL_SSL (``KafkaConnection`` fields)."""
        return {"bootstrap": bootstrap, "security_protocol": "SASL_SSL",
                "ssl_cafile": self._seen(self.ca.cert_path), "sasl_mechanism": mechanism,
                "sasl_username": user, "sasl_password": self.passwords[user]}

    def mtls_client(self, user: str, bootstrap: str) -> dict:
        """The client settings of ``user`` over mTLS, with a certificate issued for it."""
        issued: Issued = self.ca.issue(user)
        return {"bootstrap": bootstrap, "security_protocol": "SSL",
                "ssl_cafile": self._seen(self.ca.cert_path),
                "ssl_certfile": self._seen(issued.cert), "ssl_keyfile": self._seen(issued.key)}

    def java_properties(self, user: str) -> str:
        """Client properties of ``user`` for Kafka's own command-line tools (PLAIN)."""
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
        return "\n".join([
            "security.protocol=SASL_SSL", "sasl.mechanism=PLAIN",
            f'sasl.jaas.config={plain} username="{user}" password="{self.passwords[user]}";',
            "ssl.truststore.type=PEM", f"ssl.truststore.location={self._seen(self.ca.cert_path)}",
        ]) + "\n"

    def write_client_configs(self, bootstrap: str, mechanism: str = CLIENT_MECHANISM,
                             mtls_bootstrap: str | None = None) -> Path:
        """``clients/<user>.json`` for every user (0600): what ``KIP_KAFKA_CONFIG`` names;
        with ``mtls_bootstrap`` also ``clients/<user>.mtls.json``, its certificate's."""
        folder = self.folder / "clients"
        private_dir(folder)
        for user in self.users:
            configs = {f"{user}.json": self.client(user, bootstrap, mechanism)}
            if mtls_bootstrap:
                configs[f"{user}.mtls.json"] = self.mtls_client(user, mtls_bootstrap)
            for name, config in configs.items():
                write_private(folder / name, json.dumps(config, indent=2).encode())
        return folder


# Kafka measures a client's rate over quota.window.num windows and, until it has seen
# them all, as if it had: a new (or long idle) principal may send that many windows
# less one of its quota at once before it is throttled: ten seconds' worth at the
# default, 11; about two at 2 (kip bench flood; docs/security.md).
QUOTA_WINDOW = ["quota.window.num=2", "quota.window.size.seconds=1"]


# What a single-node KRaft broker in a container needs besides its security.
CONTAINER_BROKER = [
    "process.roles=broker,controller", "node.id=1", "controller.listener.names=CONTROLLER",
    *Replication().broker_properties(),
    "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false",
]


def init_deployment(folder: Path, users: list[str], host: str, broker_config: Path,
                    max_message_bytes: int, owner: int | None = None,
                    at: Listeners | None = None, kip_owner: int | None = None,
                    log_dir: str = "/var/lib/kafka/data") -> list[Path]:
    """Everything a secured single-broker deployment needs, in ``folder`` (mounted at the
    same path in the broker's and kip's containers): TLS material, passwords, the
    broker's ``server.properties`` (at ``broker_config``) and a client config per user
    (PLAIN over TLS: the broker image cannot create SCRAM users). Kept across runs:
    passwords and certificates are made once. ``owner``: the uid the broker runs as,
    given the files it reads; ``kip_owner``: the uid kip's processes run as, given the
    rest (``hand_over``)."""
    security = Security(folder, users, hostnames=(host,))
    at = at or Listeners(9092, 9094, 9093, bind="", advertised=host, scram=False)
    private_dir(broker_config.parent)
    write_private(broker_config, "\n".join(
        [*CONTAINER_BROKER, f"controller.quorum.voters=1@{host}:{at.controller_port}",
         f"log.dirs={log_dir}", f"message.max.bytes={max_message_bytes}",
         *security.server_properties(at)]).encode() + b"\n")
    clients = security.write_client_configs(f"{host}:{at.port}", mechanism="PLAIN")
    admin_properties = clients / "admin.properties"   # Kafka's own tools (healthcheck)
    write_private(admin_properties, security.java_properties(ADMIN).encode())
    readable_by_broker = [broker_config, security.ca.cert_path, admin_properties,
                          security.ca.issue("broker", server=True).keystore]
    os.chmod(security.ca.cert_path, 0o644)   # a CA certificate is public: every role reads it
    if owner is not None:
        for path in readable_by_broker:
            os.chown(path, owner, owner)
    if kip_owner is not None:
        hand_over(folder, kip_owner, set(readable_by_broker))
    return [*readable_by_broker, clients]


def hand_over(folder: Path, kip_uid: int, broker_files: set[Path]) -> None:
    """Give kip's account (``kip_uid``, the image's non-root user) every file under
    ``folder`` that is not the broker's, when init runs as root: folders become 0711
    (each account reaches its own files by name and lists nothing), files stay 0600."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            os.chmod(path, 0o711)
        elif path not in broker_files:
            os.chown(path, kip_uid, kip_uid)


def ensure_access_file(path: Path, tenant: str, key_id: str) -> AccessConfig:
    """The access file at ``path``; made with one tenant (allowed every model) and a fresh
    random secret for ``key_id`` when there is none, readable by its owner only."""
    if path.exists():
        return AccessConfig.from_file(path)
    access = AccessConfig(keys={key_id: ApiKey(tenant=tenant, secret=secrets.token_hex(32))},
                          tenants={tenant: TenantPolicy(models=["*"])})
    private_dir(path.parent)
    write_private(path, access.to_json().encode())
    return access
