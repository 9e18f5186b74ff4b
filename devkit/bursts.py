"""Traffic for the benches that measure interactive requests beside other work: bursts
of standard requests from a process of their own, and interactive requests at a steady
rate, their latencies kept by the phase they started in (``kip bench rollout``,
``kip bench burst``)."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np

from kip.devkit.stack import ClientSpec, DevStack, dev_spec
from kip.transport.admin import apply
from kip.topics.catalogue import reply_topic

INPUTS = {"digits": {"pixels": np.zeros((1, 64), np.float32)},
          "minilm": {"text": ["a sentence for the release bench"]}}
IN_FLIGHT = 500


async def bursts_reply_topic(stack: DevStack) -> str:
    """A reply topic of the bursts' own, so their results cost the measured client
    nothing."""
    spec = reply_topic(stack.names, f"{dev_spec(stack).tenant}.rollout-bursts",
                       purpose="the benches' bursts")
    await apply(stack.kafka, [spec])
    return spec.name


async def burst_from_child(spec: ClientSpec, model: str, inputs: dict, count: int,
                           digests: dict[str, str], in_flight: int = IN_FLIGHT) -> dict:
    """``burst`` in a process of its own at nice 10, with a reply topic of its own: the
    standard traffic of other producers, whose client work must not delay the
    interactive requests measured here (devkit/loadproc.py says more)."""
    pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"))
    try:
        return await asyncio.get_running_loop().run_in_executor(
            pool, _burst_in_child, spec, model, inputs, count, digests, in_flight)
    finally:   # the child's exit is waited for off the loop
        await asyncio.to_thread(pool.shutdown)


def _burst_in_child(spec: ClientSpec, model: str, inputs: dict, count: int,
                    digests: dict[str, str], in_flight: int) -> dict:
    os.nice(10)

    async def go() -> dict:
        async with spec.client() as kip:
            started = time.monotonic()
            outcome = await burst(kip, model, inputs, count, digests, in_flight)
            return outcome | {"seconds": time.monotonic() - started}
    return asyncio.run(go())


async def burst(kip, model: str, inputs: dict, count: int, digests: dict[str, str],
                in_flight: int = IN_FLIGHT) -> dict:
    """``count`` standard requests, ``in_flight`` at a time: served by version, failed
    (by code), lost, and results naming a digest other than their version's."""
    by_version, codes, misnamed, lost = Counter(), Counter(), 0, 0
    window = asyncio.Semaphore(in_flight)

    async def one() -> None:
        nonlocal misnamed, lost
        try:
            result = await asyncio.wait_for(await kip.submit(kip.request(model, inputs)), 120)
        except asyncio.TimeoutError:
            lost += 1
            return
        finally:
            window.release()
        if result.status != "ok":
            codes[result.error.code if result.error else result.status.value] += 1
            return
        by_version[result.model_version] += 1
        misnamed += result.artifact_sha256 != digests.get(result.model_version)
    tasks = []
    for _ in range(count):
        await window.acquire()
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    return {"by_version": dict(by_version), "failed": sum(codes.values()),
            "codes": dict(codes), "lost": lost, "misnamed": misnamed}


async def start_interactive(kip, rate: float, model: str, inputs: dict
                            ) -> tuple[Interactive, asyncio.Task]:
    """One request first (every stage warm), then interactive requests at ``rate`` in
    the background: the tracker, and the task to cancel when done."""
    await kip.infer(model, inputs, timeout_s=120)
    interactive = Interactive(kip, rate, model, inputs)
    return interactive, asyncio.create_task(interactive.run())


class Interactive:
    """Interactive requests at a steady rate; latencies, and the pipeline's share of them
    (``admission_ms``: issued to routed), by the phase they started in."""

    def __init__(self, kip, rate: float, model: str, inputs: dict) -> None:
        self.kip, self.rate, self.model, self.inputs = kip, rate, model, inputs
        self.phase = "steady"
        self.latencies: dict[str, list[float]] = {"steady": []}
        self.admission: dict[str, list[float]] = {"steady": []}
        self.failed = 0
        self.failures: Counter = Counter()   # by code (or the exception that ended it)
        self.tasks: set[asyncio.Task] = set()

    def mark(self, phase: str) -> None:
        self.phase = phase
        self.latencies[phase], self.admission[phase] = [], []

    async def run(self) -> None:
        while True:
            task = asyncio.create_task(self._one(self.phase, time.monotonic()))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            await asyncio.sleep(1 / self.rate)

    async def drain(self) -> None:
        """Every request sent so far answered (or failed)."""
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _one(self, phase: str, started: float) -> None:
        try:
            result = await self.kip.infer(self.model, self.inputs, priority="interactive",
                                          timeout_s=30)
        except (TimeoutError, ConnectionError) as err:   # no result: lost to it
            self.failed += 1
            self.failures[type(err).__name__] += 1
            return
        if result.status != "ok":
            self.failed += 1
            self.failures[result.error.code if result.error else result.status.value] += 1
            return
        self.latencies[phase].append((time.monotonic() - started) * 1000)
        if result.timings.admission_ms is not None:
            self.admission[phase].append(result.timings.admission_ms)
