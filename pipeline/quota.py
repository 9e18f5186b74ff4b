"""Token-bucket quotas per tenant, and per tenant x model where configured.

A quota limits requests/s and payload bytes/s, each with a burst. Quotas are set through
the control topic (``kip tenants set``); bucket levels are written to the compacted
``quota-levels`` topic with each round's outputs and read back at start, so a restart
does not hand a tenant a fresh budget (docs/architecture.md says why not a faust Table).

``Ledger`` is the pure part: it holds bucket levels, takes tokens for one request and
remembers which tenants changed so the adapter can write their levels to the
quota-levels topic.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import orjson

from pydantic import BaseModel, ConfigDict, Field

from kip.schemas.errors import QuotaExceeded


SKEW_MS = 2_000   # how far ahead of this clock another pipeline's clock may run


class Limit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    requests_per_s: float | None = Field(None, gt=0, description="refill rate; None = unlimited")
    burst_requests: float | None = Field(None, gt=0, description="bucket size (default 1 s)")
    bytes_per_s: float | None = Field(None, gt=0)
    burst_bytes: float | None = Field(None, gt=0)


class TenantQuota(Limit):
    """The control-topic record ``quota:<tenant>``: a tenant-wide limit plus per-model ones."""

    tenant: str
    models: dict[str, Limit] = Field(default_factory=dict)


@dataclass
class Bucket:
    tokens: float
    at_ms: int

    def take(self, cost: float, rate_per_s: float, burst: float, now_ms: int) -> int:
        """Refill, then take ``cost``; return 0 on success or the ms to wait for it."""
        elapsed_s = max(0, now_ms - self.at_ms) / 1000
        self.tokens = min(burst, self.tokens + elapsed_s * rate_per_s)
        self.at_ms = now_ms
        if self.tokens >= cost:
            self.tokens -= cost
            return 0
        if cost > burst:
            return -1
        return math.ceil((cost - self.tokens) / rate_per_s * 1000)


# One tenant's buckets: scope ("" tenant-wide, or a model name) -> kind -> Bucket.
TenantBuckets = dict[str, dict[str, Bucket]]


class Ledger:
    def __init__(self, quotas: dict[str, TenantQuota] | None = None,
                 levels: dict[str, TenantBuckets] | None = None) -> None:
        self.quotas = quotas if quotas is not None else {}   # shared with the control view
        self.levels = levels if levels is not None else {}
        self.dirty: set[str] = set()

    def take(self, tenant: str, model: str | None, payload_bytes: int, now_ms: int) -> None:
        """Charge one request to ``tenant``'s limit and to its limit on ``model``, where
        one is set; raise ``QuotaExceeded`` (nothing charged) if any limit bites."""
        self._take(tenant, model, payload_bytes, now_ms, tenant_wide=True)

    def take_model(self, tenant: str, model: str, payload_bytes: int, now_ms: int) -> None:
        """Charge one request to ``tenant``'s limit on ``model`` alone: the pipeline
        charges the tenant-wide limit before it parses a message (pipeline/intake.py)."""
        self._take(tenant, model, payload_bytes, now_ms, tenant_wide=False)

    def _take(self, tenant: str, model: str | None, payload_bytes: int, now_ms: int,
              tenant_wide: bool) -> None:
        quota = self.quotas.get(tenant)
        if quota is None:
            return
        scopes = ([("", quota)] if tenant_wide else []) + (
            [(model, quota.models[model])] if model in quota.models else [])
        if not scopes:
            return
        buckets = self.levels.setdefault(tenant, {})
        saved = {scope: {k: Bucket(b.tokens, b.at_ms) for k, b in buckets.get(scope, {}).items()}
                 for scope, _ in scopes}
        for scope, limit in scopes:
            for kind, cost, rate, burst in _charges(limit, payload_bytes):
                bucket = buckets.setdefault(scope, {}).setdefault(kind, Bucket(burst, now_ms))
                wait_ms = bucket.take(cost, rate, burst, now_ms)
                if wait_ms:
                    level = bucket.tokens
                    buckets.update(saved)   # all or nothing
                    raise _exceeded(tenant, scope, kind, wait_ms,
                                    f"{level:.1f} of {burst:g} left, {cost:g} needed, "
                                    f"refilling {rate:g}/s")
        self.dirty.add(tenant)


def _charges(limit: Limit, payload_bytes: int):
    if limit.requests_per_s:
        yield "requests", 1, limit.requests_per_s, limit.burst_requests or limit.requests_per_s
    if limit.bytes_per_s:
        yield "bytes", payload_bytes, limit.bytes_per_s, limit.burst_bytes or limit.bytes_per_s


def _exceeded(tenant: str, scope: str, kind: str, wait_ms: int, level: str
              ) -> QuotaExceeded:
    """The rejection, naming the bucket and the level seen (the audit record's reason)."""
    where = f"tenant '{tenant}'" + (f" on model '{scope}'" if scope else "")
    if wait_ms < 0:
        return QuotaExceeded(f"the request is larger than the {kind} burst of {where}; "
                             f"it can never pass ({level})")
    return QuotaExceeded(f"{where} is over its {kind} quota ({level})",
                         retry_after_ms=wait_ms)


def newest_ms(buckets: TenantBuckets) -> int:
    return max((b.at_ms for kinds in buckets.values() for b in kinds.values()), default=-1)


def apply_levels(ledger: Ledger, clock=None):
    """Follower callback for the quota-levels topic: keep whichever copy is newer (this
    process's own records come back too, and must not roll a bucket back). Levels dated
    ahead of the clock, or not finite and non-negative, raise ``ValueError``."""
    def apply(key: bytes | None, value: bytes | None) -> None:
        if not key or not value:
            return
        tenant, levels = key.decode(), load_levels(orjson.loads(value))
        now = (clock or _now_ms)()
        if any(not (math.isfinite(b.tokens) and b.tokens >= 0) or b.at_ms > now + SKEW_MS
               for kinds in levels.values() for b in kinds.values()):
            raise ValueError(f"bucket levels of {tenant[:64]} are out of bounds")
        current = ledger.levels.get(tenant)
        if current is None or newest_ms(levels) > newest_ms(current):
            ledger.levels[tenant] = levels
    return apply


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def dump_levels(buckets: TenantBuckets) -> dict:
    """JSON-ready form of one tenant's buckets (a quota-levels record's value)."""
    return {scope: {kind: [b.tokens, b.at_ms] for kind, b in kinds.items()}
            for scope, kinds in buckets.items()}


def load_levels(value: dict) -> TenantBuckets:
    return {scope: {kind: Bucket(float(t), int(at)) for kind, (t, at) in kinds.items()}
            for scope, kinds in value.items()}
