"""Settings shared by every kip process (env prefix ``KIP_``; each default documented)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from topics.names import TopicNames


def kip_home() -> Path:
    """Where local state lives: $KIP_HOME, default ./.kip."""
    return Path(os.environ.get("KIP_HOME", ".kip"))


class KipSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KIP_", extra="ignore")

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    topic_prefix: str = Field("kip", description="first part of every topic name")
    registry_dir: Path = Field(default_factory=lambda: kip_home() / "registry",
                               description="model registry root (default $KIP_HOME/registry)")
    metrics_port: int = Field(0, description="Prometheus port; 0 = do not serve")

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.topic_prefix)
