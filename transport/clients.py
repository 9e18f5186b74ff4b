"""The one place that builds Kafka clients: every producer, consumer and admin client in
kip, and the faust app's broker settings, come from a ``KafkaConnection``.

Callers say what the client is for (a transactional id, a consumer group, a linger);
the connection adds where the cluster is and how to reach it: TLS (a CA, and a client
certificate for mTLS) and SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN over TLS, or
OAUTHBEARER with a token read from a file). Secrets are ``SecretStr``: never in a repr,
a log line or an error.

Defaults are the safe ones, not aiokafka's (DESIGN.md, known traps): producers wait
for every in-sync replica and are idempotent; consumers never auto-commit and read
only committed records. Sizes follow the catalogue's ``MAX_MESSAGE_BYTES``; so does the
bound on what a consumer inflates of a compressed batch (transport/inflation.py), which
every consumer made here installs in its process unless one is installed already.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from kip.transport import inflation
from kip.topics.catalogue import MAX_MESSAGE_BYTES

# A fetch must hold at least one whole record of the largest size, plus its batch header.
FETCH_HEADROOM_BYTES = 1024 * 1024

# A producer's record batches hold up to 1 MiB per partition. With aiokafka's 16 KiB,
# each full batch woke the sender: a 32-row request went in a produce request of its
# own, whatever the linger, and the broker spends more per produce request than
# per record. A batch holds at least one record, so bigger records still go.
BATCH_BYTES = 1024 * 1024

# How old a client's cluster metadata may grow before it asks again (aiokafka and faust:
# 5 minutes). A consumer that resets a partition with no committed offset sends
# ListOffsets to the leader its metadata names, and on NOT_LEADER retries the same node
# without refreshing (aiokafka 0.14's Fetcher._update_fetch_positions): after a leader
# moved, a worker rebalancing onto such a partition waited out the metadata age, and
# with it every interactive request it held (kip faults --cluster, a broker paused:
# 184 s without a result). A refresh is one small request a client per interval.
METADATA_MAX_AGE_MS = 5_000
PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all", "enable_idempotence": True, "max_request_size": MAX_MESSAGE_BYTES,
    "max_batch_size": BATCH_BYTES, "metadata_max_age_ms": METADATA_MAX_AGE_MS}
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable_auto_commit": False, "isolation_level": "read_committed",
    "max_partition_fetch_bytes": MAX_MESSAGE_BYTES + FETCH_HEADROOM_BYTES,
    "metadata_max_age_ms": METADATA_MAX_AGE_MS}

# How long the broker may hold a fetch of request, work or reply topics waiting for data
# (aiokafka: 500 ms; faust: 1,500 ms). aiokafka keeps one fetch in flight per broker and
# leaves out of it the partitions whose fetched records the reader has not taken yet:
# under load the fetch in flight often covers only idle partitions, and records that
# arrive on the busy ones wait for it to time out. Those readers fetch with this wait:
# shorter cost unloaded interactive latency, longer cost burst latency. A fetch that
# leaves no partition out waits longer (transport/fetch_waits.py), so an idle reader
# does not pay a fetch every wait.
HOT_PATH_FETCH_MAX_WAIT_MS = 50

# What one fetch of a partition may inflate of compressed batches: two of the largest
# records. Uncompressed, a fetch holds about one (``max_partition_fetch_bytes``).
INFLATION_BUDGET_BYTES = 2 * MAX_MESSAGE_BYTES

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"]


class KafkaConnection(BaseModel):
    """How to reach the Kafka cluster, and as whom."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL (TLS; mTLS with a client certificate), "
        "SASL_SSL, or SASL_PLAINTEXT (no TLS: SCRAM only)")
    ssl_cafile: Path | None = Field(None, description="PEM file of the CA that signed the "
                                    "brokers' certificates (default: the system's CAs)")
    ssl_certfile: Path | None = Field(None, description="PEM client certificate (mTLS)")
    ssl_keyfile: Path | None = Field(None, description="PEM private key of ssl_certfile")
    ssl_key_password: SecretStr | None = Field(None, description="ssl_keyfile's password")
    sasl_mechanism: SaslMechanism | None = Field(None, description="with SASL_*")
    sasl_username: str | None = Field(None, description="SCRAM or PLAIN user")
    sasl_password: SecretStr | None = Field(None, description="SCRAM or PLAIN password")
    sasl_oauth_token_file: Path | None = Field(
        None, description="OAUTHBEARER: a file holding the current token, read at each "
        "(re)authentication, so a sidecar can refresh it")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl != (self.sasl_mechanism is not None):
            raise ValueError("sasl_mechanism goes with a SASL_* security_protocol, and only "
                             "with one")
        if self.sasl_mechanism == "OAUTHBEARER" and self.sasl_oauth_token_file is None:
            raise ValueError("OAUTHBEARER needs sasl_oauth_token_file")
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
                self.sasl_username and self.sasl_password):
            raise ValueError(f"{self.sasl_mechanism} needs sasl_username and sasl_password")
        if self.sasl_mechanism == "PLAIN" and self.security_protocol != "SASL_SSL":
            raise ValueError("PLAIN sends the password as it is: use it over SASL_SSL only")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")
        return self

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def producer(self, **options: Any) -> AIOKafkaProducer:
        """A producer (not started): acks=all and idempotent unless ``options`` say else."""
        return AIOKafkaProducer(**self.aiokafka(), **(PRODUCER_DEFAULTS | options))

    def consumer(self, *topics: str, **options: Any) -> AIOKafkaConsumer:
        """A consumer (not started) that reads committed records and never auto-commits.
        Without ``group_id`` it has no group: assign its partitions yourself."""
        if inflation.installed() is None:
            bound_default_inflation()
        return AIOKafkaConsumer(*topics, **self.aiokafka(), **(CONSUMER_DEFAULTS | options))

    def admin(self, **options: Any) -> AIOKafkaAdminClient:
        """An admin client (not started)."""
        return AIOKafkaAdminClient(**self.aiokafka(), **options)

    def faust_broker(self) -> dict[str, Any]:
        """The faust ``App`` settings that say where the cluster is and how to reach it."""
        import faust   # only the pipeline needs faust

        settings: dict[str, Any] = {"broker": f"kafka://{self.bootstrap}"}
        context = self.ssl_context()
        if self.sasl_mechanism == "OAUTHBEARER":
            settings["broker_credentials"] = faust.OAuthCredentials(
                oauth_cb=TokenFile(self.sasl_oauth_token_file), ssl_context=context)
        elif self.sasl_mechanism is not None:
            settings["broker_credentials"] = faust.SASLCredentials(
                username=self.sasl_username, password=self.sasl_password.get_secret_value(),
                ssl_context=context, mechanism=self.sasl_mechanism)
        elif context is not None:
            settings["broker_credentials"] = faust.SSLCredentials(context)
        return settings

    def aiokafka(self) -> dict[str, Any]:
        """The connection and security arguments of every aiokafka client."""
        args: dict[str, Any] = {"bootstrap_servers": self.bootstrap,
                                "security_protocol": self.security_protocol}
        if self.uses_tls:
            args["ssl_context"] = self.ssl_context()
        if self.sasl_mechanism is not None:
            args["sasl_mechanism"] = self.sasl_mechanism
        if self.sasl_mechanism == "OAUTHBEARER":
            args["sasl_oauth_token_provider"] = TokenFile(self.sasl_oauth_token_file)
        elif self.sasl_mechanism is not None:
            args["sasl_plain_username"] = self.sasl_username
            args["sasl_plain_password"] = self.sasl_password.get_secret_value()
        return args

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (one per distinct file set), or None without TLS."""
        if not self.uses_tls:
            return None
        password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
        return _ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile, password)


@lru_cache(maxsize=16)
def _ssl_context(cafile: Path | None, certfile: Path | None, keyfile: Path | None,
                 password: str | None) -> ssl.SSLContext:
    return create_ssl_context(cafile=cafile, certfile=certfile, keyfile=keyfile,
                              password=password)


class TokenFile(AbstractTokenProvider):
    """An OAUTHBEARER token read from a file at each (re)authentication."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def token(self) -> str:
        return self.path.read_text().strip()


def bound_default_inflation() -> None:
    """What a consumer of this process inflates of a compressed batch: records of up to
    ``MAX_MESSAGE_BYTES`` on every topic (transport/inflation.py)."""
    inflation.bound_inflation(lambda topic: MAX_MESSAGE_BYTES, INFLATION_BUDGET_BYTES)
