"""Admission on the real pipeline: quotas, payload limits, deadlines, overload."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import numpy as np
import pytest

from kip.tenants import set_quota
from kip.pipeline.app import GIVE_BACK_EVERY_S
from kip.schemas import Status, encode
from kip.schemas.codec import headers, now_ms
from tests.e2e.conftest import client_for, explained, overloaded, publish_as, work_item

pytestmark = pytest.mark.broker
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def _set_quota(stack, tenant: str, limit: dict) -> None:
    """As the operator, the one role that writes control records."""
    asyncio.run(set_quota(stack.connection("operator"), stack.names, tenant, None, limit))


async def _burst(stack, key_id: str, n: int, model: str = "digits", **kw) -> list:
    async with client_for(stack, key_id=key_id) as kip:
        futures = [await kip.submit(kip.request(model, PIXELS, **kw)) for _ in range(n)]
        return await asyncio.wait_for(asyncio.gather(*futures), 60)


def _codes(results) -> list[str]:
    return [r.error.code if r.error else r.status.value for r in results]


def test_a_tenant_over_quota_is_limited_while_another_is_not(stack):
    _set_quota(stack, "greedy", {"requests_per_s": 0.5, "burst_requests": 5})
    asyncio.run(asyncio.sleep(1))   # the pipeline follows the control topic

    async def both():
        return await asyncio.gather(_burst(stack, "greedy-k1", 20),
                                    _burst(stack, "modest-k1", 20))
    greedy, modest = asyncio.run(both())
    assert _codes(greedy).count("ok") == 5
    refused = [r for r in greedy if r.status == Status.REJECTED]
    assert len(refused) == 15 and {r.error.code for r in refused} == {"QUOTA_EXCEEDED"}
    assert all(r.error.retry_after_ms > 0 for r in refused)
    assert _codes(modest) == ["ok"] * 20
    words = explained(stack, refused[0].request_id)
    assert "rejected QUOTA_EXCEEDED (final) | tenant 'greedy' is over its requests quota (" \
        in words and "of 5 left, 1 needed, refilling 0.5/s)" in words


def test_quota_state_survives_a_pipeline_restart(stack):
    _set_quota(stack, "restart", {"requests_per_s": 0.01, "burst_requests": 3})
    asyncio.run(asyncio.sleep(1))
    before = _codes(asyncio.run(_burst(stack, "restart-k1", 4)))
    assert sorted(before) == ["QUOTA_EXCEEDED", "ok", "ok", "ok"]
    asyncio.run(asyncio.sleep(1))   # the table's changelog write is sent in the background
    stopped_s = stack.restart(0)
    t = time.monotonic()
    after = asyncio.run(_burst(stack, "restart-k1", 1))
    print(f"pipeline stopped in {stopped_s:.1f}s; first result after restart in "
          f"{time.monotonic() - t:.1f}s")
    assert _codes(after) == ["QUOTA_EXCEEDED"]
    assert _codes(asyncio.run(_burst(stack, "modest-k1", 1))) == ["ok"]


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _settled_rss_bytes(pid: int, below: int, within_s: float) -> int:
    """The resident size once it is under ``below``, or the last read at ``within_s``:
    the pipeline gives freed heap back every ``GIVE_BACK_EVERY_S``."""
    deadline = time.monotonic() + within_s
    while (rss := _rss_bytes(pid)) >= below and time.monotonic() < deadline:
        time.sleep(0.1)
    return rss


def test_oversized_payloads_are_rejected_unparsed_and_memory_stays_flat(stack):
    pipeline_pid = stack.procs[0].pid
    payload = b"\xff" * (1024 * 1024 + 1024)     # not JSON: a parse would fail differently

    async def flood(n: int) -> list:
        async with client_for(stack) as kip:
            topic = kip.names.requests("interactive")
            futures = []
            for i in range(n):
                rid = f"big-{n}-{i}"
                futures.append(kip.expect(rid, payload))
                await kip.send_raw(topic, payload, key=b"acme", sealed=True,
                                   headers=[("kip-request-id", rid.encode())])
            return await asyncio.wait_for(asyncio.gather(*futures), 300)
    asyncio.run(flood(100))      # warm up buffers before measuring
    rss_before = _rss_bytes(pipeline_pid)
    results = asyncio.run(flood(1000))
    rss_after = _settled_rss_bytes(pipeline_pid, rss_before + 32 * 2**20,
                                   3 * GIVE_BACK_EVERY_S)
    assert _codes(results) == ["PAYLOAD_TOO_LARGE"] * 1000
    print(f"pipeline RSS before {rss_before / 2**20:.1f} MiB, after 1000 oversized "
          f"messages {rss_after / 2**20:.1f} MiB")
    assert rss_after - rss_before < 32 * 2**20, (rss_before, rss_after)


def _digits_rows_inferred(stack) -> float:
    url = f"http://127.0.0.1:{stack.metrics_base_port + 2}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith('kip_batch_rows_sum{model="digits"}'):
                return float(line.split()[-1])
    return 0.0


def test_a_request_that_expired_in_the_queue_is_not_inferred(stack):
    async def go():
        async with client_for(stack) as kip:
            request = kip.request("digits", PIXELS)
            item = work_item(stack, request, routed_at_ms=now_ms() - 5000,
                             deadline_ms=now_ms() - 1000, reply_to=kip.listening_on)
            fut = kip.expect(request.request_id, encode(request))
            await publish_as(stack, "pipeline", kip.names.work("digits", "standard"),
                             encode(item), key=request.request_id.encode(),
                             headers=headers(item), partition=0)
            return await asyncio.wait_for(fut, 30)
    before = _digits_rows_inferred(stack)
    result = asyncio.run(go())
    assert result.status == Status.EXPIRED and result.error.code == "DEADLINE_EXCEEDED"
    assert result.timings.inference_ms is None
    assert "worker   expired DEADLINE_EXCEEDED (final) | the deadline passed before " \
        "inference started" in explained(stack, result.request_id)
    assert _digits_rows_inferred(stack) == before


def test_an_overloaded_model_rejects_interactive_requests_with_retry_after(stack):
    with overloaded(stack, "digits"):
        [result] = asyncio.run(_burst(stack, "acme-k1", 1, priority="interactive"))
        assert result.error.code == "OVERLOADED" and result.error.retry_after_ms > 500
    asyncio.run(asyncio.sleep(1))
    assert _codes(asyncio.run(_burst(stack, "acme-k1", 1, priority="interactive"))) == ["ok"]

