from types import SimpleNamespace

from prometheus_client import REGISTRY

from kip.runtime import metrics
from kip.schemas.messages import AuditRecord


def _audit(decision: str, code: str | None = None, priority: str = "standard") -> AuditRecord:
    return AuditRecord(request_id="r", stage="pipeline", decision=decision, final=False,
                       priority=priority, error_code=code, payload_bytes=1, at_ms=1)


def _count(stage: str, outcome: str, code: str, priority: str, model: str) -> float:
    labels = {"stage": stage, "outcome": outcome, "code": code, "priority": priority,
              "model": model}
    return REGISTRY.get_sample_value("kip_requests_total", labels) or 0.0


def test_outcomes_are_counted_once_each_by_their_label_sets():
    labels = [("test-stage", "routed", "", "standard", "m1"),
              ("test-stage", "rejected", "QUOTA_EXCEEDED", "batch", "m1"),
              ("test-stage", "routed", "", "standard", "m2")]
    before = [_count(*l) for l in labels]
    metrics.count_outcomes("test-stage", [
        (_audit("routed"), "m1"), (_audit("routed"), "m1"),
        (_audit("rejected", "QUOTA_EXCEEDED", "batch"), "m1"), (_audit("routed"), "m2"),
        (_audit("routed"), "m1")])
    assert [_count(*l) - b for l, b in zip(labels, before)] == [3, 1, 1]


def test_no_decisions_count_nothing():
    before = _count("test-empty", "routed", "", "standard", "m1")
    metrics.count_outcomes("test-empty", [])
    assert _count("test-empty", "routed", "", "standard", "m1") == before


def _latency(kind: str, priority: str, model: str) -> tuple[float, float]:
    labels = {"kind": kind, "priority": priority, "model": model}
    return (REGISTRY.get_sample_value("kip_latency_seconds_count", labels) or 0.0,
            REGISTRY.get_sample_value("kip_latency_seconds_sum", labels) or 0.0)


def test_latencies_are_observed_per_result_under_each_results_class():
    def result(priority: str, queue_ms: float | None) -> SimpleNamespace:
        return SimpleNamespace(priority=priority, total_ms=20.0, queue_ms=queue_ms,
                               batch_wait_ms=None)
    keys = [(kind, priority, "m-lat") for kind in ("end_to_end", "queue")
            for priority in ("interactive", "batch")]
    before = [_latency(*k) for k in keys]
    metrics.observe_latencies([result("interactive", 4.0), result("batch", None),
                               result("batch", 6.0), result("interactive", None)], "m-lat")
    after = [(n - n0, round(s - s0, 6)) for (n, s), (n0, s0) in
             zip((_latency(*k) for k in keys), before)]
    assert after == [(2, 0.04), (2, 0.04), (1, 0.004), (1, 0.006)]
