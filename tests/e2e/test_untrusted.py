"""Nothing trusted unchecked: each attack of issue 13, tried on a running kip.

These run on the plain broker, where anyone may write any topic: the attacks reach kip's
stages instead of being stopped by ACLs, so what is tested is that each stage checks
what it reads.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import numpy as np
import orjson
import pytest

from kip.schemas import InferenceResult, Status, Tensor, encode
from kip.schemas.codec import headers, now_ms
from kip.schemas.messages import Timings, WorkerTelemetry
from kip.schemas.stamps import StampKeys, stamped
from tests.e2e.conftest import client_for, outputs_of, publish_as, read_topic, work_item

PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def _still_serving(stack) -> None:
    async def go():
        async with client_for(stack) as kip:
            return await kip.infer("digits", PIXELS, priority="interactive")
    assert asyncio.run(go()).status == Status.OK


async def _outputs(stack, request_id: str, results: int = 1) -> dict:
    """The outputs of ``request_id`` once ``results`` results are there (30 s at most)."""
    for _ in range(30):
        seen = await outputs_of(stack, request_id, settle_s=1)
        if len(seen["results"]) >= results:
            return seen
    return seen


def _bad_inputs(case: str, kip):
    """A request whose inputs are wrong for digits in one way."""
    if case == "scalar shape":
        tensors = [Tensor(name="pixels", datatype="FP32", shape=[], data=[0.5])]
    elif case == "wrong datatype":
        tensors = [Tensor.from_array("pixels", np.zeros((1, 64), np.float64))]
    else:   # too many rows: digits takes 256 per request
        tensors = [Tensor.from_array("pixels", np.zeros((257, 64), np.float32))]
    return kip.request("digits", tensors)


@pytest.mark.parametrize("case", ["scalar shape", "wrong datatype", "too many rows",
                                  "reply_to outside the results namespace"])
def test_a_bad_work_item_fails_once_with_a_dead_letter_and_the_worker_keeps_serving(
        plain_stack, case):
    stack = plain_stack

    async def go():
        async with client_for(stack) as kip:
            if case.startswith("reply_to"):
                item = work_item(stack, kip.request("digits", PIXELS), reply_to=stack.names.control)
            else:
                item = work_item(stack, _bad_inputs(case, kip))
            meta = await publish_as(stack, "pipeline", stack.names.work("digits", "standard"),
                                    encode(item), key=item.request.request_id.encode(),
                                    partition=0)
            return item, meta, await _outputs(stack, item.request.request_id)
    item, meta, seen = asyncio.run(go())
    [result] = seen["results"]
    assert result.status == Status.FAILED and result.error.code == "INVALID_REQUEST"
    assert result.request_sha256 == item.request_sha256   # stamped: it answers the request
    [dead] = seen["deadletter"]
    assert (dead.origin_topic, dead.origin_offset) == (meta.topic, meta.offset)
    assert [a.decision for a in seen["audit"]] == ["failed"]
    _still_serving(stack)


@pytest.mark.parametrize("stamp", ["none", "another key", "altered after stamping"])
def test_a_work_item_without_a_valid_stamp_is_refused_and_dead_lettered(plain_stack, stamp):
    stack = plain_stack

    async def go():
        async with client_for(stack) as kip:
            request = kip.request("digits", PIXELS)
            if stamp == "none":
                item = work_item(stack, request, stamp=False)
            elif stamp == "another key":
                item = stamped(work_item(stack, request, stamp=False), StampKeys.generate("s1"))
            else:
                item = work_item(stack, request).model_copy(
                    update={"reply_to": stack.names.results})
            meta = await publish_as(stack, "pipeline", stack.names.work("digits", "interactive"),
                                    encode(item), key=request.request_id.encode(),
                                    partition=0)
            coordinates = f"undecodable.{meta.topic}.{meta.partition}.{meta.offset}"
            return await _outputs(stack, coordinates), await outputs_of(stack,
                                                                        request.request_id)
    seen, under_its_id = asyncio.run(go())
    [result] = seen["results"]   # under its coordinates: it ends no request it names
    assert result.status == Status.FAILED and result.error.code == "UNAUTHENTICATED"
    assert result.request_sha256 is None and result.timings.inference_ms is None
    assert under_its_id["results"] == [] and under_its_id["audit"] == []
    assert len(under_its_id["deadletter"]) == 1   # the id it names, kept for the operator
    _still_serving(stack)


def test_forged_telemetry_changes_no_admission_decision(plain_stack):
    """A busy worker's telemetry makes digits OVERLOADED (test_admission.py); the same
    from ten years ahead, or with absurd values, changes nothing."""
    stack = plain_stack
    future = WorkerTelemetry(worker_id="forged-future", model="digits", versions=["x"],
                             provider="cpu", requests_per_s=1.0, backlog={"interactive": 10**6},
                             memory_rss_bytes=1, at_ms=now_ms() + 10 * 365 * 86_400_000)
    absurd = orjson.dumps(future.model_dump(mode="json") | {
        "worker_id": "forged-absurd", "at_ms": now_ms(), "requests_per_s": 1e18,
        "backlog": {"interactive": 10**12}})

    async def go():
        for key, value in ((b"forged-future", encode(future)), (b"forged-absurd", absurd)):
            await publish_as(stack, "worker-digits", stack.names.telemetry, value, key=key,
                             headers=headers(future))
        await asyncio.sleep(1.5)
        async with client_for(stack) as kip:
            return [await kip.infer("digits", PIXELS, priority="interactive")
                    for _ in range(5)]
    results = asyncio.run(go())
    assert [r.status for r in results] == [Status.OK] * 5, [r.error for r in results]


def test_a_replay_is_a_duplicate_and_runs_once_also_after_a_pipeline_restart(plain_stack):
    stack = plain_stack

    async def send_copies(body: bytes, copies: int, request_id: str, first=None):
        async with client_for(stack) as kip:
            answer = kip.expect(request_id, body) if first else None
            for _ in range(copies):   # copies of the record, its envelope too
                await kip.publish_raw(kip.names.requests("standard"), body, key=b"acme",
                                      headers=_id_header(request_id), sealed=True)
            return await asyncio.wait_for(answer, 30) if answer else None

    async def build():
        async with client_for(stack) as kip:
            request = kip.request("digits", PIXELS)
            return request.request_id, encode(request)
    request_id, body = asyncio.run(build())
    first = asyncio.run(send_copies(body, 3, request_id, first=True))
    assert first.status == Status.OK
    seen = asyncio.run(_outputs(stack, request_id, results=3))
    codes = sorted((r.error.code if r.error else "ok") for r in seen["results"])
    assert codes == ["DUPLICATE_REQUEST", "DUPLICATE_REQUEST", "ok"]
    assert all(r.request_sha256 is None for r in seen["results"] if r.error)
    assert [a.stage for a in seen["audit"]].count("worker") == 1   # one inference

    stack.restart(0)
    asyncio.run(send_copies(body, 1, request_id))
    seen = asyncio.run(_outputs(stack, request_id, results=4))
    codes = sorted((r.error.code if r.error else "ok") for r in seen["results"])
    assert codes == ["DUPLICATE_REQUEST"] * 3 + ["ok"]
    assert [a.stage for a in seen["audit"]].count("worker") == 1
    _still_serving(stack)


def test_a_reply_topic_of_another_tenant_is_forbidden(plain_stack):
    stack = plain_stack
    bobs = stack.names.reply_topic("limited")

    async def go():
        async with client_for(stack) as kip, client_for(stack, reply_to=bobs) as rogue:
            request = rogue.request("digits", PIXELS)
            answer = kip.expect(request.request_id, encode(request))   # acme's own topic
            await kip.publish_raw(kip.names.requests("standard"), encode(request),
                                  key=b"acme", headers=headers(request), sealed=True)
            return await asyncio.wait_for(answer, 30)
    result = asyncio.run(go())
    assert result.status == Status.REJECTED and result.error.code == "FORBIDDEN"


def test_forged_results_and_kips_rejection_of_a_reused_id_never_answer_the_victim(
        plain_stack):
    stack = plain_stack

    async def go():
        async with client_for(stack) as victim:
            request = victim.request("digits", PIXELS)
            answer = victim.expect(request.request_id, encode(request))
            rid, topic = request.request_id, victim.listening_on
            forged = InferenceResult(request_id=rid, status=Status.OK, produced_at_ms=1,
                                     request_sha256="0" * 64, timings=Timings(total_ms=1))
            await victim.publish_raw(topic, encode(forged), key=rid.encode())
            junk = await victim.publish_raw(   # no envelope: kip answers it on the shared
                victim.names.requests("standard"),   # topic, under its coordinates
                orjson.dumps({"request_id": rid, "reply_to": topic}), key=b"acme",
                headers=_id_header(rid))
            seen = await _outputs(stack, rid, results=1)
            coordinates = f"undecodable.{junk.topic}.{junk.partition}.{junk.offset}"
            rejected = await _outputs(stack, coordinates, results=1)
            refused_before = victim.refused
            await victim.publish_raw(victim.names.requests("standard"), encode(request),
                                     key=b"acme", headers=headers(request), sealed=True)
            return seen, rejected, refused_before, await asyncio.wait_for(answer, 30)
    seen, rejected, refused, result = asyncio.run(go())
    assert [r.status for r in seen["results"]] == [Status.OK]   # the forgery alone
    [unsigned] = rejected["results"]
    assert unsigned.error.code == "UNAUTHENTICATED" and unsigned.tenant is None
    assert refused == 1 and result.status == Status.OK and result.outputs


def _label_values(url: str, metric: str, label: str) -> set[str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    pattern = re.compile(rf'^{metric}\{{[^}}]*{label}="([^"]*)"', re.M)
    return set(pattern.findall(text))


def test_bogus_model_names_add_at_most_one_label_value(plain_stack):
    stack = plain_stack
    url = f"http://127.0.0.1:{stack.metrics_base_port}/metrics"
    before = _label_values(url, "kip_requests_total", "model")

    async def go():
        async with client_for(stack) as kip:
            futures = [await kip.submit(kip.request(f"bogus-{i}", PIXELS, priority="batch"))
                       for i in range(3000)]
            return await asyncio.wait_for(asyncio.gather(*futures), 120)
    results = asyncio.run(go())
    assert {r.error.code for r in results} == {"MODEL_NOT_FOUND"}
    added = _label_values(url, "kip_requests_total", "model") - before
    assert added <= {"unknown"}, added


def test_a_replay_is_a_duplicate_after_its_partition_moves_to_another_pipeline(plain_stack):
    """Two pipeline processes share the request partitions. Each of them in turn stops,
    so that every partition moves to the other, live, process; a copy of a request admitted
    before the moves is still a duplicate after each, and runs once."""
    stack = plain_stack
    request_id, body = asyncio.run(_signed_request(stack))
    assert asyncio.run(_send_and_wait(stack, body, request_id)).status == Status.OK
    second = stack.spawn(["pipeline"], log=lambda *_: None)
    try:
        time.sleep(12)   # the second process joins the group and takes its partitions
        stack.restart(0)   # the first leaves: every partition moves to the second
        asyncio.run(_send_copy(stack, body))
        second.terminate()   # the second leaves: every partition moves to the first
        second.wait(30)
        asyncio.run(_send_copy(stack, body))
        seen = asyncio.run(_outputs(stack, request_id, results=3))
    finally:
        if second.poll() is None:
            second.kill()
    codes = sorted((r.error.code if r.error else "ok") for r in seen["results"])
    assert codes == ["DUPLICATE_REQUEST"] * 2 + ["ok"]
    assert [a.stage for a in seen["audit"]].count("worker") == 1
    _still_serving(stack)


async def _signed_request(stack) -> tuple[str, bytes]:
    async with client_for(stack) as kip:
        request = kip.request("digits", PIXELS)
        return request.request_id, encode(request)


async def _send_and_wait(stack, body: bytes, request_id: str):
    async with client_for(stack) as kip:
        answer = kip.expect(request_id, body)
        await kip.publish_raw(kip.names.requests("standard"), body, key=b"acme",
                              headers=_id_header(request_id), sealed=True)
        return await asyncio.wait_for(answer, 30)


async def _send_copy(stack, body: bytes) -> None:
    """A copy of the record, its envelope too (as anyone who can read it can make)."""
    async with client_for(stack) as kip:
        await kip.publish_raw(kip.names.requests("standard"), body, key=b"acme",
                              headers=_id_header(orjson.loads(body)["request_id"]),
                              sealed=True)


def _id_header(request_id: str) -> list:
    return [("kip-request-id", request_id.encode())]


def test_a_work_item_copied_back_six_times_is_not_run_again(plain_stack):
    """On a plain bus anyone may copy a work item the pipeline wrote: six copies on its
    partition and one elsewhere get no inference, no result and no final audit record;
    each a refusal (a non-final record) and a dead letter."""
    stack = plain_stack

    async def go():
        async with client_for(stack) as kip:
            result = await kip.infer("digits", PIXELS, priority="interactive")
        topic = stack.names.work("digits", "interactive")
        [original] = [r for r in await read_topic(stack.kafka, topic)
                      if r.key == result.request_id.encode()]
        for _ in range(6):
            await publish_as(stack, "pipeline", topic, original.value, key=original.key,
                             headers=list(original.headers), partition=original.partition)
        elsewhere = (original.partition + 1) % 3
        await publish_as(stack, "pipeline", topic, original.value, key=original.key,
                         partition=elsewhere)
        for _ in range(30):
            seen = await outputs_of(stack, result.request_id, settle_s=1)
            if sum(a.decision == "refused" for a in seen["audit"]) >= 7:
                break
        return result, seen
    result, seen = asyncio.run(go())
    assert result.status == Status.OK
    assert [r.status for r in seen["results"]] == [Status.OK]
    assert [(a.stage, a.decision) for a in seen["audit"] if a.final] == [("worker", "ok")]
    refused = [a for a in seen["audit"] if a.decision == "refused"]
    assert len(refused) == 7 and not any(a.final for a in refused)
    assert sorted(a.error_code for a in refused) == ["DUPLICATE_REQUEST"] * 6 + \
        ["INVALID_REQUEST"]
    assert len(seen["deadletter"]) == 7
    _still_serving(stack)
