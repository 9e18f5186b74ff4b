"""Offered load from a process of its own, at a lower OS priority.

``kip bench load`` runs everything on one machine. Its batch traffic stands in for
offline jobs on other hosts. Offered from the bench's own process, it would take the
CPU that the broker and admission share, at their priority: the interactive requests it
is there to disturb through the broker and the workers would also wait for its CPU time.
Here it runs in a child process at ``nice``, with a reply topic of its own, so neither
client reads the other's results (docs/architecture.md, "The local broker and the benches").
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from kip.devkit.loadgen import LoadReport, run_load
from kip.devkit.stack import ClientSpec
from kip.runtime import collector
from kip.schemas.codec import now_ms
from kip.schemas.messages import Priority


async def offer_from_child(spec: ClientSpec, nice: int, model: str,
                           rates: dict[Priority, float], duration_s: float,
                           deadlines_ms: dict[Priority, int], seed: int,
                           start_at_ms: int) -> LoadReport:
    """``run_load`` in a fresh process at ``nice``, starting at ``start_at_ms`` (Unix ms)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return await asyncio.get_running_loop().run_in_executor(
            pool, _offer, spec, nice, model, rates, duration_s, deadlines_ms, seed,
            start_at_ms)


def _offer(spec: ClientSpec, nice: int, model: str, rates: dict[Priority, float],
           duration_s: float, deadlines_ms: dict[Priority, int], seed: int,
           start_at_ms: int) -> LoadReport:
    os.nice(nice)   # before any thread starts: threads inherit their creator's nice value
    collector.settle()   # thousands of requests in flight (runtime/collector.py)
    return asyncio.run(_offer_async(spec, model, rates, duration_s, deadlines_ms, seed,
                                    start_at_ms))


async def _offer_async(spec: ClientSpec, model: str, rates: dict[Priority, float],
                       duration_s: float, deadlines_ms: dict[Priority, int], seed: int,
                       start_at_ms: int) -> LoadReport:
    async with spec.client() as client:
        late_s = (now_ms() - start_at_ms) / 1000
        if late_s > 1:
            print(f"the batch load starts {late_s:.1f}s after the other classes "
                  f"(its process was slow to start)", flush=True)
        return await run_load(client, model, rates, duration_s, deadlines_ms, seed,
                              start_at_ms=start_at_ms)
