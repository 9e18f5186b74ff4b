"""Releases: which versions an alias serves, with what weights, as records on Kafka.

Every change of an alias's routes is a ``Release`` on the releases topic (keyed by
alias, never compacted or expired): its revision, the versions with their weights and
artifact digests, per-tenant pins, who made it, when and why. The topic's history is the
release record that operators and governance share; the pipeline follows it and routes
each request by the alias's latest revision (``kip rollout``, kip/rollout.py), and
workers follow it to load a released version before its first request
(workers/preload.py).

A request goes to a version by a stable hash of its request id: the same id always lands
on the same version of a revision, so a split is reproducible and a retry under the same
id sees the same model. An alias without a release routes by the registry's aliases.json.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BUCKETS = 10_000   # weights are percent with two decimals
ALIAS = r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$"
_VERSION = r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}@[0-9a-f]{1,64}$"


class WeightedVersion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str = Field(pattern=_VERSION, description="name@version")
    weight: float = Field(ge=0, le=100, description="percent of the alias's requests")
    artifact_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Release(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    alias: str = Field(pattern=ALIAS)
    revision: int = Field(ge=1)
    action: Literal["start", "promote", "rollback", "health-rollback", "pin", "unpin"]
    routes: list[WeightedVersion] = Field(min_length=1, max_length=2, description=(
        "the stable version first; a second is the canary"))
    pins: dict[str, str] = Field(default_factory=dict, description="tenant -> name@version")
    by: str = Field(max_length=200)
    at_ms: int
    reason: str = Field("", max_length=2000)

    @model_validator(mode="after")
    def _weights_add_up(self) -> Release:
        if abs(sum(r.weight for r in self.routes) - 100) > 1e-6:
            raise ValueError("the weights of a release add up to 100")
        return self

    def choose(self, request_id: str, tenant: str) -> WeightedVersion | str:
        """The version this request goes to: a tenant's pin (``name@version``), else by
        the hash of its request id over the weights."""
        pinned = self.pins.get(tenant)
        if pinned is not None:
            return pinned
        bucket = bucket_of(request_id)
        edge = 0.0
        for route in self.routes:
            edge += route.weight * BUCKETS / 100
            if bucket < edge:
                return route
        return self.routes[-1]

    @property
    def stable(self) -> WeightedVersion:
        """The first route: the version a split started from."""
        return self.routes[0]

    @property
    def canary(self) -> WeightedVersion | None:
        """The second route, while a split is on."""
        return self.routes[1] if len(self.routes) > 1 else None


def bucket_of(request_id: str) -> int:
    digest = hashlib.sha256(request_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


class Releases:
    """Every alias's latest release, as followed from the releases topic."""

    def __init__(self) -> None:
        self.latest: dict[str, Release] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if not value:
            return   # releases are never removed: a tombstone changes nothing
        release = Release.model_validate_json(value)
        current = self.latest.get(release.alias)
        if current is None or release.revision > current.revision:
            self.latest[release.alias] = release

    def targets(self) -> set[str]:
        """Every ``name@version`` a latest release routes to (safe from another thread:
        it reads a copy)."""
        return {route.version for release in self.latest.copy().values()
                for route in release.routes}
