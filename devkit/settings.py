"""Settings of the developer tools (env prefix ``KIP_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from kip.runtime.settings import KipSettings


class DevSettings(KipSettings):
    cache_dir: Path = Field(Path.home() / ".cache" / "kip",
                            description="where `kip kafka` caches the broker jars")
