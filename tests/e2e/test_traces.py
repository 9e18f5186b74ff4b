"""One interactive request is one trace across the client, the pipeline and the worker,
exported over OTLP/HTTP to a receiver this test starts (devkit/otlp_receiver.py): its
hops as spans joined by the traceparent kip carries, the batch that served it linking
it, each with the messaging conventions' attributes and kip's own."""

import asyncio
import time

import numpy as np

from kip.devkit.http_probe import until_ready as _until_ready
from kip.devkit.otlp_receiver import OtlpReceiver, tree
from kip.runtime import tracing
from kip.schemas import Status
from tests.e2e.conftest import client_for

PIPELINE, DIGITS = 0, 2   # the stack's services: the pipeline, minilm's worker, digits'
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def test_one_interactive_request_is_one_trace_across_every_hop(plain_stack, monkeypatch):
    s = plain_stack
    receiver = OtlpReceiver().start()
    _restart_with(s, receiver.env())
    try:
        with monkeypatch.context() as env:   # this process's client traces too
            for name, value in receiver.env().items():
                env.setenv(name, value)
            result = asyncio.run(_served(s))
        tracing.flush()
        trace = _trace_of(receiver, result.request_id)
        spans = _until_complete(receiver, trace)
    finally:
        tracing.shutdown()
        receiver.stop()
        _restart_with(s, {})
        asyncio.run(_served(s))
    print("\n" + "\n".join(tree(receiver.received(), trace)))
    _check_hops(spans, trace, s.prefix)


def _restart_with(s, env: dict) -> None:
    """The pipeline and the digits worker restarted with ``env`` added, and ready."""
    shared = s.worker_env
    s.worker_env = shared | env
    try:
        for index in (PIPELINE, DIGITS):
            s.restart(index)
    finally:
        s.worker_env = shared
    for index in (PIPELINE, DIGITS):
        _until_ready(s.metrics_port(index))


async def _served(s):
    async with client_for(s) as kip:
        result = await kip.infer("digits", PIXELS, priority="interactive", timeout_s=30,
                                 retry_s=90)
    assert result.status == Status.OK, result
    return result


def _trace_of(receiver: OtlpReceiver, request_id: str) -> str:
    (send,) = [span for span in receiver.received() if span.name.startswith("send ")
               and span.attributes.get("kip.request_id") == request_id]
    return send.trace_id


def _until_complete(receiver: OtlpReceiver, trace: str, timeout_s: float = 20.0) -> dict:
    """The request's spans by name, and the batch span linking it, once all arrived."""
    give_up = time.monotonic() + timeout_s
    while True:
        spans = receiver.received()
        mine = {span.name.split(" ")[0]: span for span in spans if span.trace_id == trace}
        batches = [span for span in spans if any(t == trace for t, _ in span.links)]
        children = [span for span in spans if batches
                    and span.parent_span_id == batches[0].span_id]
        if {"send", "process", "wait"} <= set(mine) and batches and len(children) >= 2:
            return mine | {"batch": batches[0]} | {c.name.split(" ")[0]: c for c in children}
        if time.monotonic() > give_up:
            raise AssertionError(f"incomplete trace {trace}: {sorted(mine)}, "
                                 f"{len(batches)} linking batches")
        time.sleep(0.2)


def _check_hops(spans: dict, trace: str, prefix: str) -> None:
    send, admission, wait, batch = (spans[k] for k in ("send", "process", "wait", "batch"))
    assert send.service == "kip-client" and admission.service == "kip-pipeline"
    assert wait.service == batch.service == "kip-worker-digits"
    assert admission.name == f"process {prefix}.requests.interactive"
    assert admission.parent_span_id == send.span_id and wait.parent_span_id == admission.span_id
    assert {"messaging.system": "kafka", "messaging.operation.type": "process",
            "messaging.destination.name": f"{prefix}.requests.interactive",
            "kip.decision": "routed", "kip.model": "digits",
            "kip.priority": "interactive"}.items() <= admission.attributes.items()
    for span in (admission, wait):
        assert {"messaging.destination.partition.id", "messaging.kafka.offset",
                "messaging.consumer.group.name", "kip.model_version",
                "kip.artifact_sha256"} <= set(span.attributes)
    assert wait.name == f"wait {prefix}.work.digits.interactive"
    assert batch.name == f"process {prefix}.work.digits.interactive"
    assert (trace, admission.span_id) in batch.links
    assert batch.attributes["messaging.batch.message_count"] >= 1
    assert spans["inference"].attributes["kip.batch_rows"] >= 1
    assert spans["commit"].name == f"commit {prefix}.work.digits.interactive"
