"""Pseudonyms for identities in audit records: a keyed hash in place of a tenant or key id.

Where the operator sets a pseudonym key (``KIP_AUDIT_PSEUDONYM_KEY_FILE``), every audit
record names ``ps.<key id>.<24 hex>`` instead of the tenant and the API key id: the first
96 bits of HMAC-SHA256 under the key, over the kind of identity and its value. The same
tenant always gets the same pseudonym, so an audit consumer can still count, join and
follow one tenant; only a holder of the key can tell which tenant it is
(``kip audit pseudonym acme``). The key id is part of the pseudonym, so a rotated key
shows as a new series rather than as different tenants under the old name.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from kip.schemas.messages import ID_PATTERN

KINDS = ("tenant", "key_id")


class PseudonymKey(BaseModel):
    """``{"key_id": "p1", "secret": "<hex of 32 random bytes>"}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    key_id: str = Field(pattern=ID_PATTERN)
    secret: SecretStr

    @classmethod
    def generate(cls, key_id: str = "p1") -> PseudonymKey:
        return cls(key_id=key_id, secret=secrets.token_hex(32))

    def of(self, kind: str, value: str) -> str:
        """The pseudonym of ``value``, a ``kind`` of identity (``KINDS``)."""
        if kind not in KINDS:
            raise ValueError(f"kind is one of {KINDS}, not {kind!r}")
        digest = hmac.new(bytes.fromhex(self.secret.get_secret_value()),
                          f"{kind}\n{value}".encode(), hashlib.sha256).hexdigest()
        return f"ps.{self.key_id}.{digest[:24]}"
