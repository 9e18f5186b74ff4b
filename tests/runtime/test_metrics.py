from prometheus_client import REGISTRY

from runtime import metrics
from schemas.messages import AuditRecord


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
