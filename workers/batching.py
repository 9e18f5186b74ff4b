"""Micro-batching in one place: fetch a batch, group it, run it in chunks, isolate poison.

- ``next_batch``: up to ``max_batch`` records within ``max_delay_ms``. The clock starts
  at the first record; each further fetch waits only for the time left, so a batch never
  waits longer than ``max_delay_ms`` for company.
- ``by_class``, ``by_version``: a batch is answered class by class, highest first, and
  each class's requests run per model version.
- ``run_group``: a group runs in chunks (standard and batch requests in chunks of about
  ``background_call_ms`` of inference, sized by ``workers/pace.py``: one chunk is the
  longest an interactive request waits for the device), back to back in the inference
  thread, so the device goes from one chunk to the next without a round trip through
  the event loop, which is busy with fetches and commits under load. Where ``Stages``
  has a thread ``ahead``, the next chunk is prepared (tokenized) there while this one
  executes, so the device does not wait for the tokenizer either. Deadlines are checked
  right before each chunk, so a request that expires while earlier chunks run is not
  inferred. A chunk that fails is run again one request at a time, so only a poison
  request fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from kip.schemas.messages import Priority

log = logging.getLogger("kip.worker")
IDLE_POLL_MS = 200
P = TypeVar("P")   # whatever the caller pairs with each request


async def next_batch(consumer: AIOKafkaConsumer, max_batch: int, max_delay_ms: float,
                     idle_ms: int = IDLE_POLL_MS) -> list[ConsumerRecord]:
    """Records for one inference call (empty after ``idle_ms`` with nothing)."""
    batch = _flatten(await consumer.getmany(timeout_ms=idle_ms, max_records=max_batch))
    if not batch:
        return batch
    deadline = time.monotonic() + max_delay_ms / 1000
    while len(batch) < max_batch:
        left_ms = (deadline - time.monotonic()) * 1000
        if left_ms <= 0:
            break
        batch += _flatten(await consumer.getmany(timeout_ms=int(left_ms) or 1,
                                                 max_records=max_batch - len(batch)))
    return batch


def _flatten(by_partition: dict) -> list[ConsumerRecord]:
    return [r for records in by_partition.values() for r in records]


def by_class(records: Iterable[ConsumerRecord], topic_class: dict[str, Priority]
             ) -> list[tuple[Priority, list[ConsumerRecord]]]:
    """Records per class, highest class first."""
    groups = group_by(records, lambda r: topic_class[r.topic])
    return sorted(groups.items(), key=lambda item: item[0].rank)


def group_by(items: Iterable[P], key: Callable[[P], Hashable]) -> dict[Hashable, list[P]]:
    """``items`` grouped by ``key``, keeping their order."""
    groups: dict[Hashable, list[P]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


@dataclass
class ChunkRun(Generic[P]):
    """One chunk's run: what ran, what had expired, the outputs or the error."""

    live: list[P]
    expired: list[P]
    outputs: list | None = None        # per live request, in order
    error: Exception | None = None
    started_ms: float = 0.0
    finished_ms: float = 0.0


def chunked(items: Sequence[P], size: int) -> list[list[P]]:
    """``items`` in as few chunks of at most ``size`` as fit, their sizes within one of
    each other (10 by 4: 4, 3, 3; not 4, 4, 2)."""
    count = -(-len(items) // max(1, size))
    bounds = [len(items) * i // max(1, count) for i in range(count + 1)]
    return [list(items[a:b]) for a, b in zip(bounds, bounds[1:])]


@dataclass(frozen=True)
class Stages(Generic[P]):
    """How a chunk runs: ``prepare`` its requests (no device: joining rows, tokenizing),
    then ``execute`` what was prepared (the device). ``ahead``: a thread of its own in
    which the next chunk is prepared while this one executes; None: each chunk is
    prepared in turn, right before it executes."""

    prepare: Callable[[list[P]], Any]
    execute: Callable[[Any], list]
    ahead: Executor | None = None

    @classmethod
    def single(cls, run: Callable[[list[P]], list]) -> Stages[P]:
        """One step, nothing to prepare ahead."""
        return cls(lambda live: live, run)


class _Preparation(Generic[P]):
    """One chunk's preparation: begun in ``stages.ahead`` for the requests live when it
    began, or (with no thread ahead) done when it is needed."""

    def __init__(self, stages: Stages[P], chunk: list[P], deadline: Callable[[P], int]
                 ) -> None:
        self.stages = stages
        self.items = _live(chunk, deadline) if stages.ahead is not None else []
        self.future = stages.ahead.submit(stages.prepare, self.items) if self.items else None

    def result(self, live: list[P]) -> Any:
        """``live`` prepared: what was begun ahead if it is still the same requests (one
        that expired meanwhile means preparing the rest again, here)."""
        if self.future is not None and _same(live, self.items):
            return self.future.result()
        return self.stages.prepare(live)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def run_chunks(stages: Stages[P], chunks: list[list[P]], deadline: Callable[[P], int]
               ) -> list[ChunkRun[P]]:
    """Run each chunk's live requests in turn, in the calling (inference) thread, the
    next chunk prepared ahead while one executes; an exception is kept in its chunk's
    run, not raised."""
    runs_done = []
    upcoming = _Preparation(stages, chunks[0], deadline) if chunks else None
    for k, chunk in enumerate(chunks):
        started = time.time() * 1000   # the instant checked is the instant stamped
        live = [p for p in chunk if deadline(p) > started]
        run = ChunkRun(live, [p for p in chunk if deadline(p) <= started])
        preparation = upcoming
        if k + 1 < len(chunks):
            upcoming = _Preparation(stages, chunks[k + 1], deadline)
        if live:
            run.started_ms = started
            try:
                run.outputs = stages.execute(preparation.result(live))
            except Exception as exc:   # run_group decides: retry one by one, or poison
                run.error = exc
            run.finished_ms = time.time() * 1000
        runs_done.append(run)
    return runs_done


def _live(chunk: list[P], deadline: Callable[[P], int]) -> list[P]:
    now = time.time() * 1000
    return [p for p in chunk if deadline(p) > now]


async def run_group(executor: Executor, stages: Stages[P], items: list[P], chunk: int,
                    deadline: Callable[[P], int]) -> list[ChunkRun[P]]:
    """Run ``items`` in chunks of ``chunk``, back to back in ``executor``. A chunk that
    fails with more than one live request is run again one request at a time, so in the
    runs returned only a poison request keeps its error."""
    runs = await asyncio.get_running_loop().run_in_executor(
        executor, run_chunks, stages, chunked(items, chunk), deadline)
    kept: list[ChunkRun[P]] = []
    for run in runs:
        if run.error is None or len(run.live) <= 1:
            kept.append(run)
            continue
        log.warning("a chunk of %d failed (%s); retrying one by one", len(run.live),
                    run.error)
        kept.append(ChunkRun([], run.expired))
        kept += await run_group(executor, stages, run.live, 1, deadline)
    return kept
