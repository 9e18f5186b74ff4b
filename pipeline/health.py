"""The release health gate: a canary that does worse than its stable version is rolled back
by the pipeline itself, and the release record says why.

Workers report, per version, the requests it ran over their health window, how many
failed (INFERENCE_FAILED) and the p99 of their inference time (workers/health.py, in
telemetry). While an alias's latest release splits it (a canary), the pipeline sums the
live workers' reports for the canary and for the stable version; once the canary has run
``min_requests``, it is rolled back when:
- its failure rate exceeds ``max_error_rate`` and the stable version's by more than
  ``max_error_rate`` too; or
- its p99 inference time exceeds ``max_p99_ratio`` times the stable version's.

The rollback is a ``Release`` with action ``health-rollback``: the stable version's
routes at 100%, by ``pipeline health gate``, with the figures in its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from kip.pipeline.capacity import CapacityView, live
from kip.schemas.releases import Release, Releases, WeightedVersion
from kip.schemas.messages import VersionHealth

GATE = "pipeline health gate"


class HealthLimits(BaseModel):
    """``KIP_HEALTH_GATE``, JSON: when a canary is rolled back by itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_error_rate: float = Field(0.05, ge=0, le=1)
    max_p99_ratio: float = Field(3.0, gt=1)
    min_requests: int = Field(20, ge=1)


@dataclass(frozen=True)
class Totals:
    requests: int
    failed: int
    p99_inference_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0


def rollbacks(releases: Releases, capacity: CapacityView, limits: HealthLimits,
              now_ms: int) -> list[Release]:
    """The health rollbacks due now, one per alias whose canary fails the limits."""
    due = []
    for release in releases.latest.values():
        canary = release.canary
        if canary is None:
            continue
        stable = release.stable
        reason = verdict(_totals(capacity, canary, now_ms), _totals(capacity, stable, now_ms),
                         canary, stable, limits)
        if reason is not None:
            due.append(_rollback(release, stable, reason, now_ms))
    return due


def verdict(canary: Totals, stable: Totals, c: WeightedVersion, s: WeightedVersion,
            limits: HealthLimits) -> str | None:
    """Why the canary must go, or None."""
    if canary.requests < limits.min_requests:
        return None
    rate, base = canary.error_rate, stable.error_rate
    if rate > limits.max_error_rate and rate > base + limits.max_error_rate:
        return (f"health gate: canary {c.version} failed {canary.failed} of "
                f"{canary.requests} requests ({rate:.1%}), stable {s.version} "
                f"{stable.failed} of {stable.requests} ({base:.1%}); the limit is "
                f"{limits.max_error_rate:.1%} and {limits.max_error_rate:.1%} over stable")
    if canary.p99_inference_ms is not None and stable.p99_inference_ms and \
            canary.p99_inference_ms > limits.max_p99_ratio * stable.p99_inference_ms:
        return (f"health gate: canary {c.version} p99 inference "
                f"{canary.p99_inference_ms:.1f} ms, stable {s.version} "
                f"{stable.p99_inference_ms:.1f} ms; the limit is {limits.max_p99_ratio:g}x")
    return None


def _totals(capacity: CapacityView, route: WeightedVersion, now_ms: int) -> Totals:
    """The live workers' reports for ``route``'s version, summed (p99: the worst)."""
    name, _, version = route.version.partition("@")
    found: list[VersionHealth] = [
        t.health[version] for t in capacity.workers.values()
        if t.model == name and live(t, now_ms) and version in t.health]
    p99s = [h.p99_inference_ms for h in found if h.p99_inference_ms is not None]
    return Totals(sum(h.requests for h in found), sum(h.failed for h in found),
                  max(p99s) if p99s else None)


def _rollback(release: Release, stable: WeightedVersion, reason: str, now_ms: int) -> Release:
    return Release(alias=release.alias, revision=release.revision + 1,
                   action="health-rollback", routes=[stable.model_copy(update={"weight": 100.0})],
                   pins=release.pins, by=GATE, at_ms=now_ms, reason=reason)
