"""``kip audit``'s words for a trail, its filters and its time ranges (no Kafka; the
e2e tests read real trails)."""

from __future__ import annotations

import pytest

from kip.audit.command import since_ms
from kip.audit.reading import Filter, explain
from kip.pipeline.decide import route_reason
from kip.schemas.messages import AuditRecord, InferenceRequest, Route, Timings

BASE = dict(request_id="r1", tenant="acme", key_id="acme-k1", priority="standard",
            model="minilm", payload_bytes=10, request_sha256="ab" * 32)


def _record(**fields) -> AuditRecord:
    return AuditRecord(**(BASE | fields))


def test_an_ok_trail_names_route_version_and_timings():
    lines = explain([
        _record(stage="pipeline", decision="routed", final=False, at_ms=1_000,
                reason="minilm routed to minilm@v1", model_name="minilm",
                model_version="v1", artifact_sha256="cd" * 32),
        _record(stage="worker", decision="ok", final=True, at_ms=1_020, model_name="minilm",
                model_version="v1", artifact_sha256="cd" * 32,
                timings=Timings(queue_ms=4.0, inference_ms=3.5, total_ms=20.0))])
    assert lines[0].startswith("request r1: tenant acme (key acme-k1), class standard")
    assert "routed | minilm routed to minilm@v1 | version minilm@v1" in lines[1]
    assert "ok (final)" in lines[2] and "inference 3.5 ms" in lines[2]


def test_a_degraded_request_says_which_model_could_not_serve():
    route = Route(alias="minilm", model_name="digits", model_version="v2",
                  artifact_sha256="ef" * 32, fallback_from="minilm")
    request = InferenceRequest.model_construct(model="minilm")
    reason = route_reason(request, route)
    lines = explain([_record(stage="pipeline", decision="degraded", final=False,
                             at_ms=1, reason=reason, fallback_from="minilm")])
    assert "minilm could not serve in time" in lines[1] and "fallback digits@v2" in lines[1]
    assert lines[-1] == "no final record yet: the request has not ended"


def test_filters_and_times():
    quota = _record(stage="pipeline", decision="rejected", final=True, at_ms=1,
                    error_code="QUOTA_EXCEEDED")
    assert Filter(tenant="acme", code="QUOTA_EXCEEDED")(quota)
    assert not Filter(decision="ok")(quota)
    assert since_ms("2h", 10_000_000) == 10_000_000 - 7_200_000
    assert since_ms("1700000000000", 0) == 1_700_000_000_000
    with pytest.raises(ValueError, match="an age like"):
        since_ms("yesterday", 0)
