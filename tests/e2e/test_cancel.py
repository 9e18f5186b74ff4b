"""Cancellation on a running kip: requests cancelled while they wait behind a backlog
are never run and end ``cancelled`` exactly once, the audit trail naming who cancelled;
a cancel from another tenant is refused; a cancel after the result changes nothing."""

import asyncio
import os
import signal
from collections import Counter

import numpy as np

from kip.schemas import AuditRecord, InferenceResult, Status, decode
from tests.e2e.conftest import client_for, read_topic

DIGITS = 2   # the stack's services: the pipeline, minilm's worker, digits'
PIXELS = {"pixels": np.zeros((8, 64), np.float32)}
BACKLOG, CANCELLED = 300, 1000


def test_requests_cancelled_while_queued_end_cancelled_once_and_never_run(plain_stack):
    s = plain_stack
    out = asyncio.run(_cancel_while_queued(s, s.procs[DIGITS].pid))
    cancelled, backlog, refused, late = (out[k] for k in ("cancelled", "backlog", "refused",
                                                         "late"))
    assert Counter(r.status for r in cancelled) == {Status.CANCELLED: CANCELLED}
    assert all(r.error.code == "CANCELLED" and r.timings.inference_ms is None
               and r.batch_size is None for r in cancelled)   # none ran
    assert all(r.status == Status.OK for r in backlog)
    assert refused.status == Status.REJECTED and refused.error.code == "FORBIDDEN"
    assert late.status == Status.OK   # accepted, and too late to change anything
    ids = {r.request_id for r in cancelled}
    endings = asyncio.run(_endings(s, ids | {backlog[0].request_id, backlog[1].request_id}))
    assert all(len(endings["results"][i]) == 1 for i in ids)           # exactly once
    assert [r.status for r in endings["results"][backlog[0].request_id]] == [Status.OK]
    assert [r.status for r in endings["results"][backlog[1].request_id]] == [Status.OK]
    finals = [a for i in ids for a in endings["audit"][i] if a.final]
    assert len(finals) == CANCELLED and all(
        a.decision == "cancelled" and "cancelled by tenant acme (key acme-k1" in a.reason
        for a in finals)
    print(f"\n{CANCELLED} standard requests cancelled behind {BACKLOG}: "
          f"{len(finals)} ended cancelled once, none ran; another tenant's cancel: "
          f"{refused.error.code}; a cancel after the result: nothing changed")


async def _cancel_while_queued(s, worker_pid: int) -> dict:
    """With the digits worker held still (SIGSTOP) while they are sent: a backlog, then
    the requests to cancel, their cancels, and another tenant's cancel of the backlog's
    first; then the worker goes on, and a cancel of an answered request follows."""
    async with client_for(s) as kip, client_for(s, key_id="lim-k1") as other:
        os.kill(worker_pid, signal.SIGSTOP)
        try:
            ahead = [kip.request("digits", PIXELS) for _ in range(BACKLOG)]
            backlog = [await kip.submit(r) for r in ahead]
            requests = [kip.request("digits", PIXELS) for _ in range(CANCELLED)]
            futures = [await kip.submit(r) for r in requests]
            acks = await asyncio.gather(*(kip.cancel(r.request_id) for r in requests))
            refused = await other.cancel(ahead[0].request_id, priority="standard",
                                         request_tenant="acme")
        finally:
            os.kill(worker_pid, signal.SIGCONT)
        assert all(a.status == Status.OK for a in acks), [a for a in acks if a.status != "ok"]
        backlog_results = await asyncio.wait_for(asyncio.gather(*backlog), 120)
        cancelled = await asyncio.wait_for(asyncio.gather(*futures), 120)
        late = await kip.cancel(backlog_results[1].request_id, priority="standard")
        await asyncio.sleep(2)   # a worker would answer a second time by now
    return {"cancelled": cancelled, "backlog": backlog_results, "refused": refused,
            "late": late}


async def _endings(s, ids: set[str]) -> dict:
    results: dict = {i: [] for i in ids}
    audit: dict = {i: [] for i in ids}
    for record in await read_topic(s.kafka, s.names.reply_topic("acme")) + \
            await read_topic(s.kafka, s.names.results):
        result = decode(InferenceResult, record.value)
        if result.request_id in ids:
            results[result.request_id].append(result)
    for record in await read_topic(s.kafka, s.names.audit):
        record_ = decode(AuditRecord, record.value)
        if record_.request_id in ids:
            audit[record_.request_id].append(record_)
    return {"results": results, "audit": audit}
