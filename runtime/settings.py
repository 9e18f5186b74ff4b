"""Settings shared by every kip process (env prefix ``KIP_``; each default documented).

Each process has one settings class that extends ``KipSettings`` (``PipelineSettings``,
``WorkerSettings``, ``DevSettings``); every ``KIP_`` variable is a field of one of them
and a row of the README's configuration table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from topics.clients import KafkaConnection
from topics.names import TopicNames

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class KipSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KIP_", extra="ignore")

    home: Path = Field(Path(".kip"), description="local state: broker data, registry, "
                       "access file, logs")
    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    topic_prefix: str = Field("kip", description="first part of every topic name")
    registry_dir: Path = Field(None, description="model registry root (default "
                               "$KIP_HOME/registry)", validate_default=False)
    metrics_port: int = Field(0, description="Prometheus port; 0 = do not serve")
    log_level: LogLevel = Field("WARNING", description="log level of every process")
    debug: bool = Field(False, description="the CLI shows tracebacks instead of one line")
    profile_dir: Path | None = Field(None, description="developers: the CLI writes a "
                                     "cProfile of its command here")

    @model_validator(mode="after")
    def _under_home(self) -> KipSettings:
        """Paths left unset live under ``home``."""
        if self.registry_dir is None:
            self.registry_dir = self.home / "registry"
        return self

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    @property
    def kafka(self) -> KafkaConnection:
        """How every client of this process reaches Kafka."""
        return KafkaConnection(bootstrap=self.bootstrap)
