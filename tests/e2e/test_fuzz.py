"""The fuzz suite: malformed messages of every kind (devkit/fuzz.py) onto the request
topics and the work topics of a running kip. Every message ends in exactly one terminal
result and final audit record, none INTERNAL; both stages keep serving; and a second
pass leaves the pipeline's memory where the first did."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer

from kip.devkit.fuzz import Fuzzed, messages
from kip.schemas import AuditRecord, InferenceResult, Status, decode, encode
from kip.schemas.messages import PRIORITIES
from tests.e2e.conftest import TENANT_OF, client_for, outputs_of, read_topic

PASS_SIZE = 1500
CLASSES = [p for p in PRIORITIES]


def _topic(stack, m: Fuzzed, n: int) -> str:
    if m.stage == "worker":
        return stack.names.work("digits", CLASSES[n % 2])
    return stack.names.requests("interactive" if m.oversized else CLASSES[n % 3])


async def _send_pass(stack, seed: int, prefix: str) -> dict[str, Fuzzed]:
    """Send one pass; returns each message by the request id its result must carry."""
    async with client_for(stack) as kip:
        sent = []
        for n, m in enumerate(messages(seed, PASS_SIZE, prefix)):
            sent.append((m, await kip.send_raw(_topic(stack, m, n), m.value, key=m.key,
                                               headers=m.sent_headers(),
                                               sealed=m.sealable)))
        expected = {}
        for m, delivery in sent:
            meta = await delivery
            expected[m.expected_id(meta.topic, meta.partition, meta.offset, m.sealable)] = m
    assert len(expected) == PASS_SIZE
    return expected


async def _endings(stack, ids: set[str], timeout_s: float = 120) -> tuple[dict, dict]:
    """Results and final audit records of ``ids``, once every id has a final record."""
    names = stack.names
    reply_topics = [names.results] + [names.reply_topic(t) for t in set(TENANT_OF.values())]
    deadline = time.monotonic() + timeout_s
    while True:
        finals: dict[str, list[AuditRecord]] = {}
        for record in await read_topic(stack.kafka, names.audit):
            audit = decode(AuditRecord, record.value)
            if audit.final and audit.request_id in ids:
                finals.setdefault(audit.request_id, []).append(audit)
        if len(finals) == len(ids) or time.monotonic() > deadline:
            break
        await asyncio.sleep(2)
    await asyncio.sleep(1)   # results commit in the same transactions as the audit
    results: dict[str, list[InferenceResult]] = {}
    for topic in reply_topics:
        for record in await read_topic(stack.kafka, topic):
            result = decode(InferenceResult, record.value)
            if result.request_id in ids:
                results.setdefault(result.request_id, []).append(result)
    return results, finals


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _check_pass(stack, seed: int, prefix: str) -> None:
    expected = asyncio.run(_send_pass(stack, seed, prefix))
    results, finals = asyncio.run(_endings(stack, set(expected)))
    missing = [(i, expected[i].case) for i in expected if len(finals.get(i, [])) != 1]
    assert not missing, f"{len(missing)} without exactly one final audit: {missing[:5]}"
    unanswered = [(i, expected[i].case) for i in expected if len(results.get(i, [])) != 1]
    assert not unanswered, f"{len(unanswered)} without exactly one result: {unanswered[:5]}"
    internal = [(i, expected[i].case, r.error.message) for i, rs in results.items()
                for r in rs if r.error and r.error.code == "INTERNAL"]
    assert not internal, internal[:5]
    assert all(r.status != Status.OK for rs in results.values() for r in rs)


def _both_stages_serve(stack) -> None:
    async def go():
        async with client_for(stack) as kip:
            return [await kip.infer("digits", {"pixels": np.zeros((1, 64), np.float32)}),
                    await kip.infer("minilm", {"text": ["still here"]})]
    assert [r.status for r in asyncio.run(go())] == [Status.OK, Status.OK]


def test_every_malformed_message_ends_once_and_memory_stays_flat(plain_stack):
    stack = plain_stack
    pipeline = stack.procs[0].pid
    _check_pass(stack, seed=1, prefix="fuzz1")
    _both_stages_serve(stack)
    after_first = _rss_bytes(pipeline)
    _check_pass(stack, seed=2, prefix="fuzz2")
    _both_stages_serve(stack)
    after_second = _rss_bytes(pipeline)
    print(f"pipeline RSS after pass 1: {after_first / 2**20:.1f} MiB, "
          f"after pass 2: {after_second / 2**20:.1f} MiB")
    assert after_second <= 1.10 * after_first, (after_first, after_second)


def _peak_reset(pid: int) -> bool:
    """Reset the process's peak RSS (VmHWM) where this user may (root, or its owner)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


async def _compressed(stack, codec: str, value: bytes, request_id: str):
    """``value`` as one record of its own batch, compressed with ``codec``, on the
    interactive request topic (a producer that compresses, as any Kafka client may);
    returns the record's metadata."""
    producer = AIOKafkaProducer(bootstrap_servers=stack.client_bootstrap,
                                compression_type=codec, max_request_size=len(value) + 2**20,
                                max_batch_size=len(value) + 2**20, acks="all")
    await producer.start()
    try:
        return await producer.send_and_wait(
            stack.names.requests("interactive"), value, key=b"acme",
            headers=[("kip-request-id", request_id.encode())])
    finally:
        await producer.stop()


async def _unread_outputs(stack, meta) -> dict:
    """The outputs of a record nothing of which was read, its envelope and id header
    included: no tenant's, under its coordinates (docs/protocol.md)."""
    coordinates = f"undecodable.{meta.topic}.{meta.partition}.{meta.offset}"
    for _ in range(60):
        seen = await outputs_of(stack, coordinates, settle_s=1)
        if seen["results"]:
            break
    return seen


def test_a_256_mib_gzip_request_is_refused_without_inflating_it(plain_stack):
    """~256 KB on the wire, 256 MiB inflated: PAYLOAD_TOO_LARGE, and the pipeline's peak
    RSS stays within 64 MiB of where it was."""
    stack = plain_stack
    pipeline = stack.procs[0].pid
    value = b'{"request_id":"bomb","pad":"' + b" " * (256 * 2**20) + b'"}'
    before = _rss_bytes(pipeline)
    exact = _peak_reset(pipeline)

    async def go():
        return await _unread_outputs(stack, await _compressed(stack, "gzip", value,
                                                              "bomb-256"))
    seen = asyncio.run(go())
    [result] = seen["results"]
    assert result.status == Status.REJECTED and result.error.code == "PAYLOAD_TOO_LARGE"
    assert f"inflates to {len(value)} bytes" in result.error.message
    peak = _peak_bytes(pipeline) if exact else _rss_bytes(pipeline)
    print(f"pipeline RSS before: {before / 2**20:.1f} MiB, peak after the bomb: "
          f"{peak / 2**20:.1f} MiB ({'VmHWM' if exact else 'VmRSS'})")
    assert peak < before + 64 * 2**20, (before, peak)
    _both_stages_serve(stack)


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy"])
def test_a_request_in_a_codec_kip_cannot_bound_is_refused_and_the_pipeline_serves_on(
        plain_stack, codec):
    stack = plain_stack

    async def go():
        async with client_for(stack) as kip:
            request = kip.request("digits", {"pixels": np.zeros((1, 64), np.float32)},
                                  priority="interactive")
        return await _unread_outputs(stack, await _compressed(
            stack, codec, encode(request) + b" " * 4096, request.request_id))
    [result] = asyncio.run(go())["results"]
    assert result.error.code == "INVALID_REQUEST"
    assert f"compression codec {codec} is not accepted" in result.error.message
    _both_stages_serve(stack)
