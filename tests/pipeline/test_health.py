"""The release health gate: a canary failing or slow against its stable version, on the
workers' reports, is rolled back to the stable version, with the figures as its reason;
a healthy canary, or one that has not run enough yet, is left alone."""

from __future__ import annotations

from kip.pipeline.capacity import CapacityView
from kip.pipeline.health import GATE, HealthLimits, rollbacks
from kip.schemas.releases import Release, Releases, WeightedVersion
from kip.schemas.messages import VersionHealth, WorkerTelemetry

NOW = 1_000_000
LIMITS = HealthLimits(max_error_rate=0.05, max_p99_ratio=3.0, min_requests=20)


def _releases(canary_weight: float = 10) -> Releases:
    releases = Releases()
    releases.latest["digits"] = Release(
        alias="digits", revision=4, action="start", by="ops", at_ms=1, routes=[
            WeightedVersion(version="digits@aaaa", weight=100 - canary_weight,
                            artifact_sha256="a" * 64),
            WeightedVersion(version="digits@bbbb", weight=canary_weight,
                            artifact_sha256="b" * 64)])
    return releases


def _capacity(**health: tuple[int, int, float | None]) -> CapacityView:
    view = CapacityView()
    for i, (version, (requests, failed, p99)) in enumerate(health.items()):
        view.update(f"w{i}", WorkerTelemetry(
            worker_id=f"w{i}", model="digits", versions=[version], provider="cpu",
            requests_per_s=10, backlog={}, memory_rss_bytes=1, at_ms=NOW,
            health={version: VersionHealth(requests=requests, failed=failed,
                                           p99_inference_ms=p99)}))
    return view


def test_a_failing_canary_is_rolled_back_to_stable_with_the_figures():
    [rollback] = rollbacks(_releases(), _capacity(aaaa=(180, 0, 2.0), bbbb=(20, 4, 2.0)),
                           LIMITS, NOW)
    assert (rollback.revision, rollback.action, rollback.by) == (5, "health-rollback", GATE)
    assert [(r.version, r.weight) for r in rollback.routes] == [("digits@aaaa", 100.0)]
    assert "failed 4 of 20 requests (20.0%)" in rollback.reason
    [even] = rollbacks(_releases(50), _capacity(aaaa=(100, 0, 2.0), bbbb=(100, 20, 2.0)),
                       LIMITS, NOW)   # a 50/50 split: the canary is still the second route
    assert even.routes[0].version == "digits@aaaa"


def test_a_slow_canary_is_rolled_back_and_a_healthy_or_young_one_is_not():
    [slow] = rollbacks(_releases(), _capacity(aaaa=(180, 0, 2.0), bbbb=(30, 0, 9.0)),
                       LIMITS, NOW)
    assert "p99 inference 9.0 ms" in slow.reason
    assert rollbacks(_releases(), _capacity(aaaa=(180, 0, 2.0), bbbb=(30, 1, 3.0)),
                     LIMITS, NOW) == []
    assert rollbacks(_releases(), _capacity(aaaa=(180, 0, 2.0), bbbb=(10, 5, 2.0)),
                     LIMITS, NOW) == []
