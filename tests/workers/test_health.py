"""A worker's health window: per version, the requests it ran, those that failed
INFERENCE_FAILED, and the p99 of inference time, over the last window only."""

from __future__ import annotations

import numpy as np

from kip.schemas.messages import ErrorInfo, InferenceResult, Status, Timings
from kip.workers.health import HealthWindow
from kip.workers.endings import Ended


def _result(version: str, status: Status = Status.OK, code: str | None = None,
            inference_ms: float | None = 2.0) -> Ended:
    return Ended.of_result(InferenceResult(
        request_id="r", status=status, model_version=version,
        error=code and ErrorInfo(code=code, message="m"),
        timings=Timings(total_ms=5.0, inference_ms=inference_ms), produced_at_ms=1))


def test_failures_and_p99_per_version_over_the_window():
    window = HealthWindow(window_s=30)
    for i in range(10):
        window.observe(_result("v1", inference_ms=float(i)), now_s=100)
    window.observe(_result("v2", Status.FAILED, "INFERENCE_FAILED", None), now_s=100)
    window.observe(_result("v2"), now_s=100)
    window.observe(_result("v2", Status.FAILED, "INVALID_REQUEST"), now_s=100)   # not the model's
    window.observe(_result("v2", Status.EXPIRED, "DEADLINE_EXCEEDED"), now_s=100)
    health = window.snapshot(now_s=110)
    assert (health["v1"].requests, health["v1"].failed) == (10, 0)
    assert 8.9 < health["v1"].p99_inference_ms <= 9.0
    assert (health["v2"].requests, health["v2"].failed) == (2, 1)
    assert window.snapshot(now_s=131) == {}


def test_a_long_window_slides_as_a_naive_count_over_every_result_would():
    """Past the arrays' compaction, and growing again after each report."""
    window = HealthWindow(window_s=30)
    observed: list[tuple[float, bool, float]] = []   # (at, failed, ms)
    for i in range(20_000):
        at, failed = i * 0.005, i % 7 == 0
        ms = float(i % 101)
        window.observe(_result("v1", Status.FAILED, "INFERENCE_FAILED", None) if failed
                       else _result("v1", inference_ms=ms), now_s=at)
        observed.append((at, failed, ms))
        if i % 2_500 == 2_499:
            kept = [o for o in observed if o[0] >= at - 30]
            health = window.snapshot(now_s=at)["v1"]
            assert health.requests == len(kept)
            assert health.failed == sum(failed for _, failed, _ in kept)
            assert health.p99_inference_ms == float(np.percentile(
                [ms for _, failed, ms in kept if not failed], 99))
