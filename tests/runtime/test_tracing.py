"""Tracing through OpenTelemetry's SDK and OTLP/HTTP exporter to a real receiver: off
unless the OTEL_* variables ask; spans joined by traceparent, linked, with attributes."""

import pytest

from kip.devkit.otlp_receiver import OtlpReceiver
from kip.runtime import tracing

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-11111111111111111111111111111111-2222222222222222-01"


@pytest.mark.parametrize("env, on", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
])
def test_tracing_is_off_unless_the_environment_asks(env, on):
    assert tracing.wanted(env) is on


def test_spans_reach_an_otlp_receiver_joined_and_linked(monkeypatch):
    receiver = OtlpReceiver().start()
    for name, value in receiver.env().items():
        monkeypatch.setenv(name, value)
    try:
        assert tracing.configure("kip-test")
        child_tp = tracing.record("process kip.requests.interactive", 1000, 1002,
                                  tracing.messaging("process", "kip.requests.interactive", 3,
                                                    41, "kip-pipeline"), parent=PARENT,
                                  kind="consumer")
        assert child_tp.split("-")[1] == PARENT.split("-")[1]   # the same trace
        batch = tracing.start("process kip.work.digits.interactive", 1003, {"kip.model": "d"},
                              links=[child_tp, OTHER, None], kind="consumer")
        tracing.child(batch, "inference digits", 1004, 1005, {"kip.batch_rows": 2})
        tracing.end(batch, 1006)
        tracing.flush()
    finally:
        tracing.shutdown()
        receiver.stop()
    spans = {s.name: s for s in receiver.received()}
    admission = spans["process kip.requests.interactive"]
    assert admission.parent_span_id == PARENT.split("-")[2]
    assert admission.attributes["messaging.kafka.offset"] == 41
    assert admission.attributes["messaging.consumer.group.name"] == "kip-pipeline"
    assert admission.service == "kip-test" and admission.kind == 5   # SPAN_KIND_CONSUMER
    assert (admission.end_ns - admission.start_ns) == 2_000_000
    batch = spans["process kip.work.digits.interactive"]
    assert set(batch.links) == {(admission.trace_id, admission.span_id),
                                (OTHER.split("-")[1], OTHER.split("-")[2])}
    assert spans["inference digits"].parent_span_id == batch.span_id
    assert tracing.ENABLED is False and tracing.start("x", 0, {}) is None
