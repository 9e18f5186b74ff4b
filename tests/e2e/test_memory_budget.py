"""A worker's memory budget on a running kip: a worker of digits-mem with a 64 MiB budget
serves a version estimated at 8 MiB, and refuses one estimated at 1 GiB: requests for it
end MODEL_UNAVAILABLE at once (from the worker, then from admission once its telemetry
says so), while the other version goes on serving."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from kip.schemas import Status
from tests.e2e.conftest import client_for, publish_variant
from tests.e2e.test_fallback import _served
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue

pytestmark = pytest.mark.broker
MODEL = "digits-mem"
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def _publish(s, tmp_path, tag: str, estimate: int, model: str = MODEL) -> str:
    """digits' graph under the doc string ``tag``, published as ``model`` with a memory
    estimate of ``estimate`` bytes, and signed."""
    return publish_variant(s, tmp_path, "digits", tag, model, memory_estimate_bytes=estimate)


def test_a_version_over_the_budget_is_refused_at_once_and_the_other_serves(plain_stack,
                                                                            tmp_path):
    s = plain_stack
    small = _publish(s, tmp_path, "small", 8 * 2**20)
    big = _publish(s, tmp_path, "big", 2**30)
    s.registry.set_alias(MODEL, small)
    asyncio.run(apply(s.kafka, [t for t in catalogue(s.names, [MODEL]) if MODEL in t.name]))
    shared = s.worker_env   # the budget is this worker's alone
    s.worker_env = shared | {"KIP_MEMORY_BUDGET_BYTES": str(64 * 2**20)}
    try:
        s.procs.append(s.spawn(["worker", "--model", MODEL], log=lambda *_: None))
    finally:
        s.worker_env = shared
    asyncio.run(_served(s, MODEL))

    async def ask(target: str):
        async with client_for(s) as kip:
            started = time.monotonic()
            result = await kip.infer(target, PIXELS, timeout_s=30)
            return result, time.monotonic() - started
    (first, first_s), (ok, _) = asyncio.run(ask(big)), asyncio.run(ask(small))
    assert (first.status, first.error.code) == (Status.FAILED, "MODEL_UNAVAILABLE")
    assert "needs an estimated 1024 MiB; this worker's budget is 64 MiB" in first.error.message
    assert first_s < 5 and ok.status == Status.OK
    time.sleep(2)   # the worker's telemetry reports the refusal
    later, _ = asyncio.run(ask(big))
    assert (later.status, later.error.code) == (Status.REJECTED, "MODEL_UNAVAILABLE")
    assert f"no worker of {MODEL} can load it" in later.error.message
    s.check_services()
