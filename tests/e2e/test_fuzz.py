"""The fuzz suite: malformed messages of every kind (devkit/fuzz.py) onto the request
topics and the work topics of a running kip. Every message ends in exactly one terminal
result and final audit record, none INTERNAL; both stages keep serving; and a second
pass leaves the pipeline's memory where the first did."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from devkit.fuzz import Fuzzed, messages
from schemas import AuditRecord, InferenceResult, Status, decode
from schemas.messages import PRIORITIES
from tests.e2e.conftest import TENANT_OF, client_for, read_topic

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
                                               headers=m.headers)))
        expected = {}
        for m, delivery in sent:
            meta = await delivery
            expected[m.expected_id(meta.topic, meta.partition, meta.offset)] = m
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
