"""An open-loop load generator: a fixed offered rate per class, whatever the system does.

Arrivals are Poisson (seeded), each request carries an explicit deadline, and nothing
waits for a result before the next send, so overload shows up as rejections and
latency rather than as a slower generator. ``ClassStats`` counts what came back.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from kip.client import KipClient
from kip.schemas.codec import now_ms
from kip.schemas.messages import InferenceResult, Priority, Status

SUBJECTS = ["A man", "The woman", "A child", "The old dog", "A young engineer", "Two friends",
            "The orchestra", "A cyclist", "The committee", "A small bird"]
VERBS = ["is eating", "is repairing", "watches", "carries", "is painting", "describes",
         "is walking past", "photographs", "is reading about", "remembers"]
OBJECTS = ["a piece of bread", "the broken bicycle", "a quiet lake at dawn",
           "the results of the experiment", "a red umbrella in the rain",
           "an old map of the city", "the last train home", "a bowl of hot soup",
           "the noisy crowd outside the stadium", "a letter from a distant friend"]


def sentences(n: int, seed: int = 1) -> list[str]:
    """``n`` varied English sentences, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."
            for _ in range(n)]


@dataclass
class ClassStats:
    offered: int = 0
    results: list[InferenceResult] = field(default_factory=list)
    unanswered: int = 0
    late_inferences: int = 0     # ok results whose inference started after the deadline

    def codes(self) -> Counter:
        return Counter(r.error.code for r in self.results if r.status == Status.REJECTED)

    def ok(self) -> list[InferenceResult]:
        return [r for r in self.results if r.status == Status.OK]

    def latencies(self) -> np.ndarray:
        return np.array([r.timings.total_ms for r in self.ok()] or [np.nan])

    def count(self, status: Status) -> int:
        return sum(r.status == status for r in self.results)


@dataclass
class LoadReport:
    duration_s: float
    classes: dict[Priority, ClassStats]
    started_ms: int = 0
    duplicates: int = 0

    def merge(self, other: LoadReport) -> LoadReport:
        """This report and ``other`` (other classes, offered over the same window)."""
        return LoadReport(self.duration_s, self.classes | other.classes,
                          min(self.started_ms, other.started_ms),
                          self.duplicates + other.duplicates)

    def goodput(self, priority: Priority) -> float:
        """ok results produced while load was offered, per second (the drain after the
        window does not count: a queue must not pass for throughput)."""
        end = self.started_ms + self.duration_s * 1000
        done = [r for r in self.classes[priority].ok()
                if self.started_ms <= r.produced_at_ms <= end]
        return len(done) / self.duration_s


async def run_load(client: KipClient, model: str, rates: dict[Priority, float],
                   duration_s: float, deadlines_ms: dict[Priority, int], seed: int = 1,
                   inputs=None, drain_s: float | None = None,
                   start_at_ms: int | None = None) -> LoadReport:
    """Offer ``rates`` (requests/s per class) for ``duration_s``; collect every result.
    ``start_at_ms`` (Unix ms): begin then, so load offered from two processes lines up.
    The report's ``duplicates`` counts the results the client could not match meanwhile:
    a second result for a request, or another client's on the same reply topic."""
    texts = sentences(4096, seed)
    inputs = inputs or (lambda i: {"text": [texts[i % len(texts)]]})
    stats = {p: ClassStats() for p in rates}
    pending: dict[str, tuple[Priority, int, asyncio.Future]] = {}
    if start_at_ms is not None:
        await asyncio.sleep(max(0.0, (start_at_ms - now_ms()) / 1000))
    unmatched_before = client.unmatched
    started_ms = now_ms()
    senders = [_send_class(client, model, p, rate, duration_s, deadlines_ms[p], seed + i,
                           inputs, stats[p], pending)
               for i, (p, rate) in enumerate(rates.items()) if rate > 0]
    await asyncio.gather(*senders)
    drain = drain_s if drain_s is not None else max(deadlines_ms.values()) / 1000 + 10
    await asyncio.wait([f for _, _, f in pending.values()] or [_done()], timeout=drain)
    for priority, deadline, fut in pending.values():
        _collect(stats[priority], deadline, fut)
    return LoadReport(duration_s, stats, started_ms, client.unmatched - unmatched_before)


async def _send_class(client: KipClient, model: str, priority: Priority, rate: float,
                      duration_s: float, deadline_ms: int, seed: int, inputs,
                      stats: ClassStats, pending: dict) -> None:
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    due = 0.0
    i = 0
    while due < duration_s:
        delay = start + due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        deadline = now_ms() + deadline_ms
        request = client.request(model, inputs(i), priority=priority, deadline_ms=deadline)
        pending[request.request_id] = (priority, deadline, await client.submit(request))
        stats.offered += 1
        i += 1
        due += rng.exponential(1 / rate)


def _collect(stats: ClassStats, deadline_ms: int, fut: asyncio.Future) -> None:
    if not fut.done() or fut.cancelled() or fut.exception() is not None:
        stats.unanswered += 1
        return
    result = fut.result()
    stats.results.append(result)
    started = result.timings.inference_started_at_ms
    # An ok result that does not say when its inference started cannot show it was in time.
    if result.status == Status.OK and (started is None or started >= deadline_ms):
        stats.late_inferences += 1


async def _done():
    return None


async def closed_loop_capacity(client: KipClient, model: str, priority: Priority,
                               concurrency: int, duration_s: float) -> float:
    """ok results/s with ``concurrency`` requests always in flight (no overload)."""
    texts = sentences(1024, 99)
    done = 0
    stop_at = time.monotonic() + duration_s

    async def lane(k: int) -> None:
        nonlocal done
        i = k
        while time.monotonic() < stop_at:
            result = await client.infer(model, {"text": [texts[i % len(texts)]]},
                                        priority=priority, timeout_s=60)
            done += result.status == Status.OK
            i += concurrency
    started = time.monotonic()
    await asyncio.gather(*(lane(k) for k in range(concurrency)))
    return done / (time.monotonic() - started)
