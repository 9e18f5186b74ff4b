"""Settings shared by every kip process (env prefix ``KIP_``; each default documented).

Each process has one settings class that extends ``KipSettings`` (``PipelineSettings``,
``WorkerSettings``, ``DevSettings``); every ``KIP_`` variable is a field of one of them
and a row of the README's configuration table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kip.runtime import keys
from kip.schemas.pseudonyms import PseudonymKey
from kip.schemas.stamps import StampKeys
from kip.transport.clients import KafkaConnection, SaslMechanism, SecurityProtocol
from kip.topics.catalogue import Replication
from kip.topics.names import TopicNames
from kip.transport.outputs import Sealing

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class KipSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KIP_", extra="ignore")

    home: Path = Field(Path(".kip"), description="local state: broker data, registry, "
                       "access file, logs")
    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    topic_prefix: str = Field("kip", description="first part of every topic name")
    replication_factor: int | None = Field(
        None, ge=1, description="copies of each partition of every topic kip creates "
        "(faust's included); unset: 3, or the number of brokers where fewer")
    min_insync_replicas: int | None = Field(
        None, ge=1, description="copies that must hold a record before it counts as "
        "written; unset: one less than the replication factor, at most 2")
    registry_dir: Path = Field(None, description="model registry root (default "
                               "$KIP_HOME/registry)", validate_default=False)
    model_store: str | None = Field(
        None, description="the authoritative model store (models/store.py): file://, "
        "s3://, gs:// or https:// URL; s3:// reads its endpoint and keys from the AWS_* "
        "variables, as every S3 client does")
    model_cache_bytes: int = Field(
        0, ge=0, description="bound on the versions a host keeps staged from the model "
        "store; the oldest no release names are evicted first (0: no bound)")
    model_store_timeout_s: float = Field(
        2.0, gt=0, description="a serving process gives the model store this long to "
        "connect, once, before a stage fails MODEL_UNAVAILABLE (the CLI retries as its "
        "backend does)")
    metrics_port: int = Field(0, description="Prometheus port; 0 = do not serve")
    metrics_host: str = Field("127.0.0.1", description="address /metrics listens on "
                              "(0.0.0.0: every interface, for a scraper on another host)")
    stamp_keys_file: Path = Field(None, description="work-item stamp key ring, shared by "
                                  "pipeline and workers (default $KIP_HOME/keys/"
                                  "stamp-keys.json)", validate_default=False)
    result_signing_key_file: Path = Field(
        None, description="Ed25519 key that signs every result (default $KIP_HOME/keys/"
        "result-signing.json)", validate_default=False)
    result_public_keys_file: Path = Field(
        None, description="public keys clients check results with (default "
        "$KIP_HOME/keys/result-public.json)", validate_default=False)
    model_public_keys_file: Path = Field(
        None, description="public keys of who may sign model versions (default "
        "$KIP_HOME/keys/model-public.json)", validate_default=False)
    model_signing_key_file: Path = Field(
        None, description="the key `kip models sign` signs with: a release engineer's, "
        "not a server's (default $KIP_HOME/keys/model-signing.json)", validate_default=False)
    require_signed_models: bool = Field(False, description="route to and load only model "
                                        "versions a trusted model key signed")
    deadletter_payloads: bool = Field(False, description="dead letters keep the first 64 KiB "
                                      "of the payload (else only its size and sha256)")
    audit_pseudonym_key_file: Path | None = Field(
        None, description="key of the pseudonyms audit records give tenants and key ids "
        "(a keyed hash; unset: their names)")
    log_level: LogLevel = Field("WARNING", description="log level of every process")
    debug: bool = Field(False, description="the CLI shows tracebacks instead of one line")
    profile_dir: Path | None = Field(None, description="developers: the CLI writes a "
                                     "cProfile of its command here")

    @model_validator(mode="after")
    def _under_home(self) -> KipSettings:
        """Paths left unset live under ``home``."""
        if self.registry_dir is None:
            self.registry_dir = self.home / "registry"
        keys = self.home / "keys"
        for name, default in (("stamp_keys_file", "stamp-keys.json"),
                              ("result_signing_key_file", "result-signing.json"),
                              ("result_public_keys_file", "result-public.json"),
                              ("model_public_keys_file", "model-public.json"),
                              ("model_signing_key_file", "model-signing.json")):
            if getattr(self, name) is None:
                setattr(self, name, keys / default)
        return self

    def sealing(self) -> Sealing:
        """How this process's outputs become records (signed results, dead letters)."""
        return Sealing(keys.signing_key(self.result_signing_key_file).signer(),
                       self.deadletter_payloads, self.pseudonym_key())

    def pseudonym_key(self) -> PseudonymKey | None:
        if self.audit_pseudonym_key_file is None:
            return None
        return keys.pseudonym_key(self.audit_pseudonym_key_file)

    def stamp_keys(self) -> StampKeys:
        return keys.stamp_keys(self.stamp_keys_file)

    def ensure_keys(self) -> list[Path]:
        """Make the deployment key files that are missing (``kip keys init``), a model
        signing key and its public file included (for one machine: elsewhere the
        signing key belongs with whoever releases models)."""
        return (keys.ensure_keys(self.stamp_keys_file, self.result_signing_key_file,
                                 self.result_public_keys_file)
                + keys.ensure_model_keys(self.model_signing_key_file,
                                         self.model_public_keys_file))

    def replication(self, brokers: int) -> Replication:
        """How kip's topics are replicated on a cluster of ``brokers``."""
        return Replication.for_cluster(brokers, self.replication_factor,
                                       self.min_insync_replicas)

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    @property
    def kafka(self) -> KafkaConnection:
        """How every client of this process reaches Kafka: ``KafkaSettings`` (a client
        config file, then ``KIP_KAFKA_`` variables), with ``KIP_BOOTSTRAP`` where set."""
        explicit = {"bootstrap": self.bootstrap} if "bootstrap" in self.model_fields_set else {}
        return KafkaSettings().connection({"bootstrap": self.bootstrap}, explicit)


class KafkaSettings(BaseSettings):
    """Kafka security, env prefix ``KIP_KAFKA_``. A client config file
    (``KIP_KAFKA_CONFIG``: JSON with these fields and ``bootstrap``, as ``kip kafka start
    --secure`` writes one per role) comes first; variables set here override it."""

    model_config = SettingsConfigDict(env_prefix="KIP_KAFKA_", extra="ignore")

    config: Path | None = Field(None, description="client config file (JSON) to start from")
    security_protocol: SecurityProtocol | None = Field(
        None, description="PLAINTEXT (default), SSL, SASL_SSL or SASL_PLAINTEXT")
    ssl_cafile: Path | None = Field(None, description="PEM CA of the brokers' certificates")
    ssl_certfile: Path | None = Field(None, description="PEM client certificate (mTLS)")
    ssl_keyfile: Path | None = Field(None, description="PEM key of the client certificate")
    ssl_key_password: SecretStr | None = Field(None, description="password of ssl_keyfile")
    sasl_mechanism: SaslMechanism | None = Field(
        None, description="SCRAM-SHA-512, SCRAM-SHA-256, PLAIN (TLS only) or OAUTHBEARER")
    sasl_username: str | None = Field(None, description="SCRAM or PLAIN user")
    sasl_password: SecretStr | None = Field(None, description="SCRAM or PLAIN password")
    sasl_oauth_token_file: Path | None = Field(None, description="OAUTHBEARER token file")

    def connection(self, defaults: dict, overrides: dict) -> KafkaConnection:
        """``defaults``, then the config file, then the variables set, then ``overrides``."""
        from_file = json.loads(self.config.read_text()) if self.config else {}
        given = {name: getattr(self, name) for name in self.model_fields_set
                 if name != "config"}
        return KafkaConnection(**(defaults | from_file | given | overrides))
