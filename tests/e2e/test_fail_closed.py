"""Fail closed: with no live worker of a model its requests end MODEL_UNAVAILABLE at once
(retriable) instead of waiting in a topic nobody reads; its first worker reopens it. The
probes on the metrics ports say what each process is waiting for."""

import asyncio
import time

import numpy as np
import orjson

from kip.devkit.http_probe import probe as _probe, until_ready as _until_ready
from kip.schemas import Status
from tests.e2e.conftest import client_for

PIPELINE, DIGITS = 0, 2   # the stack's services: the pipeline, minilm's worker, digits'
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def test_no_live_worker_fails_fast_and_the_first_worker_reopens(plain_stack):
    s = plain_stack
    for index in (PIPELINE, DIGITS):
        status, body = _probe(s.metrics_port(index), "/readyz")
        assert status == 200, body
        assert _probe(s.metrics_port(index), "/healthz")[0] == 200
    assert orjson.loads(_probe(s.metrics_port(DIGITS), "/readyz")[1])["conditions"]["model"][
        "ok"] is True
    s.stop_service(DIGITS)
    try:
        latencies = asyncio.run(_unavailable(s, 100))
    finally:
        s.start_service(DIGITS)
    p99 = sorted(latencies)[98]
    print(f"\nno live digits worker: 100 interactive requests, MODEL_UNAVAILABLE p50 "
          f"{sorted(latencies)[49] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    assert p99 < 0.050
    ready_at = _until_ready(s.metrics_port(DIGITS))
    ok_after_s = asyncio.run(_until_ok(s)) - ready_at
    print(f"a worker started: its /readyz answered 200, the first ok {ok_after_s:.2f} s later")
    assert ok_after_s < 5.0
    s.check_services()


async def _unavailable(s, count: int) -> list[float]:
    """Seconds from sending to the result of each of ``count`` interactive requests, sent
    one after another once the pipeline has seen the workers go; each must end
    MODEL_UNAVAILABLE, retriable, with a retry_after_ms."""
    async with client_for(s) as kip:
        for _ in range(100):   # a request in flight as the worker stopped may be run
            result = await kip.infer("digits", PIXELS, priority="interactive")
            if result.status == Status.REJECTED:
                break
            await asyncio.sleep(0.2)
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            result = await kip.infer("digits", PIXELS, priority="interactive")
            latencies.append(time.perf_counter() - started)
            assert result.status == Status.REJECTED, result
            assert result.error.code == "MODEL_UNAVAILABLE", result.error
            assert "no live worker of digits" in result.error.message
            assert result.error.retry_after_ms == 1000
    return latencies


async def _until_ok(s, timeout_s: float = 60.0) -> float:
    """When the first interactive digits request came back ok (monotonic time)."""
    give_up = time.monotonic() + timeout_s
    async with client_for(s) as kip:
        while time.monotonic() < give_up:
            result = await kip.infer("digits", PIXELS, priority="interactive")
            if result.status == Status.OK:
                return time.monotonic()
            assert result.error.code in ("MODEL_UNAVAILABLE", "DEADLINE_EXCEEDED"), result
            await asyncio.sleep(0.05)
    raise TimeoutError(f"no ok result within {timeout_s} s of the worker's start")
