"""``kip batch``'s settings: what every kip client reads, and the API key's secret."""

from __future__ import annotations

from pydantic import Field, SecretStr

from kip.runtime.settings import KipSettings


class BatchSettings(KipSettings):
    api_secret: SecretStr | None = Field(
        None, description="the secret of the API key `--key-id` names (never on the "
        "command line)")
