"""A lane: one consumer-group member of a worker, with its inference thread and its
transactions.

A worker has two lanes: the interactive lane reads ``kip.work.<model>.interactive``;
the background lane reads the standard and batch topics. Each has its own connection
and inference thread, so an interactive request never waits behind fetched or running
batch work; the background thread runs at a lower OS priority. The background lane has
a second thread, at the same priority, that prepares the next chunk of text while one
runs, where the session asks for it (on CUDA: ``ModelSession.prepare_ahead``).

Delivery: exactly-once for read_committed readers. A batch's outputs leave in one Kafka
transaction per input partition, together with that partition's next offset
(transport/transactions.py): a crash, a pause past the session timeout or a rebalance
either commits all of it or none of it, and a fenced zombie's outputs are never
visible. Those transactions run as tasks (``committing``) while the next batch's
inference runs; the previous batch's transactions finish before the next batch's
start, so each partition's transactions stay in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
import os
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord

from kip.runtime import metrics
from kip.runtime.probes import PROBES
from kip.schemas.codec import now_ms
from kip.schemas.messages import WorkItem
from kip.topics.catalogue import MAX_MESSAGE_BYTES
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS
from kip.transport.fetch_waits import wait_long_when_whole
from kip.topics.names import TopicNames
from kip.transport.outputs import Record, Sealing, signed_records
from kip.transport.transactions import Entry, PartitionTransactions
from kip.transport.transactions import transaction_timeout_ms
from kip.workers import spans
from kip.workers.answers import Answers
from kip.workers.health import HEALTH
from kip.workers.batching import group_by
from kip.workers.endings import Ended, destinations
from kip.workers.settings import WorkerSettings
from kip.transport.aiokafka_adapter import sticky_per_topic
from kip.workers.single_use import Answered, answered_reader

BACKGROUND_NICE = 10

log = logging.getLogger("kip.worker")


class Gate:
    """Batches being answered, any number at once, and the revocation that waits for
    them all to finish and holds new ones off while it runs."""

    def __init__(self) -> None:
        self._answering = 0
        self._idle, self._open = asyncio.Event(), asyncio.Event()
        self._idle.set()
        self._open.set()

    @asynccontextmanager
    async def answering(self) -> AsyncIterator[None]:
        await self._open.wait()
        self._answering += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._answering -= 1
            if not self._answering:
                self._idle.set()

    @asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


@dataclass
class Lane:
    name: str
    model: str
    consumer: AIOKafkaConsumer
    executor: ThreadPoolExecutor
    preparer: ThreadPoolExecutor | None   # the next chunk's tokenizing (background only)
    transactions: PartitionTransactions
    sealing: Sealing
    names: TopicNames
    answered: Answered
    gate: Gate = field(default_factory=Gate)
    committing: list[asyncio.Task] = field(default_factory=list)
    joined: asyncio.Event = field(default_factory=asyncio.Event)   # its first assignment

    def begin_early(self, pairs: list[tuple[ConsumerRecord, WorkItem]]) -> None:
        """Begin the transactions of these work items' input partitions while their
        inference runs, with the partitions their results, audit records and answered
        ids go to (transport/transactions.py): the commit after it is a round trip
        shorter, and one that had to add a partition first would wait a round trip."""
        for tp, group in group_by(pairs, lambda p: TopicPartition(p[0].topic,
                                                                  p[0].partition)).items():
            ids = (self.names.answered(self.model, group[0][1].request.priority), tp.partition)
            self.transactions.begin_early(
                tp, [ids, *(d for _, item in group for d in destinations(item, self.names))])

    def commit(self, batch: list[ConsumerRecord], answers: Answers,
               endings: dict[int, Ended | None], answered: dict[TopicPartition, list[Record]],
               span=None) -> None:
        """Start committing ``batch`` with its outputs and the ids it ``answered`` (per
        input partition), in the background; ``endings`` (``workers.endings.ended`` of
        each record's outputs) are counted once committed; ``span``, the batch's, ends
        with the commit (workers/spans.py)."""
        self.committing.append(asyncio.create_task(
            self._commit(batch, answers, endings, answered, span)))

    def answered_records(self, batch: list[ConsumerRecord], priority: str
                         ) -> dict[TopicPartition, list[Record]]:
        """The ids ``batch`` answered, per input partition, as records (taken now: the
        next batch's are its own transaction's)."""
        return {tp: self.answered.records(tp, self.model, priority)
                for tp in {TopicPartition(r.topic, r.partition) for r in batch}}

    async def _commit(self, batch: list[ConsumerRecord], answers: Answers,
                      endings: dict[int, Ended | None],
                      answered: dict[TopicPartition, list[Record]], span=None) -> None:
        """One transaction per input partition. A partition lost meanwhile is not ours to
        commit: its new owner answers those records, and we do not count them."""
        groups = group_by(batch, lambda r: TopicPartition(r.topic, r.partition))
        signed = dict(zip(map(id, batch), signed_records([answers[id(r)] for r in batch],
                                                         self.sealing)))
        entries = {tp: [Entry(r.offset, signed[id(r)]) for r in rs]
                   for tp, rs in groups.items()}
        for tp, tp_entries in entries.items():
            tp_entries[-1].outputs.extend(answered.get(tp, []))
        started = now_ms() if span is not None else 0
        done = await self.transactions.commit_each(entries)
        if span is not None:
            spans.committed(span, batch[0].topic, started, now_ms(), len(done), sum(done))
        _observe([endings[id(r)] for rs, committed in zip(groups.values(), done)
                  if committed for r in rs], self.model)

    async def start(self) -> None:
        """Start the consumer; its fetches that leave no partition out wait long
        (transport/fetch_waits.py)."""
        await self.consumer.start()
        wait_long_when_whole(self.consumer)

    async def settle(self) -> None:
        """Wait for the transactions in flight; raise what they raised (a defect: Kafka
        errors are retried inside them)."""
        tasks, self.committing = self.committing, []
        await asyncio.gather(*tasks)

    async def close(self) -> None:
        """Give the transactions in flight their timeout to finish, then abandon them (a
        transaction left open is aborted by the broker), and close everything."""
        tasks, self.committing = self.committing, []
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.transactions.timeout_ms / 1000)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.consumer.stop()
        await self.transactions.close()
        self.executor.shutdown(wait=True)
        if self.preparer is not None:
            self.preparer.shutdown(wait=True)


def open_lane(settings: WorkerSettings, model: str, name: str, topics: list[str],
              sealing: Sealing) -> Lane:
    """A lane (its consumer not started) subscribed to ``topics``. ``name`` is
    "interactive", or "" for the standard/batch lane."""
    group = settings.names.worker_group(model, name)
    session_timeout_ms = (settings.interactive_session_timeout_ms if name
                          else settings.session_timeout_ms)
    consumer = settings.kafka.consumer(
        group_id=group, auto_offset_reset="earliest",
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=min(settings.heartbeat_interval_ms, session_timeout_ms // 3),
        group_instance_id=settings.group_instance_id,
        # partitions stay where they were across a join or leave, each topic balanced on
        # its own (transport/assignment.py): one that stays keeps its producer and
        # answered ids (_Revocations)
        partition_assignment_strategy=sticky_per_topic(group),
        max_poll_interval_ms=settings.max_poll_interval_ms,
        fetch_max_bytes=4 * MAX_MESSAGE_BYTES,
        fetch_max_wait_ms=HOT_PATH_FETCH_MAX_WAIT_MS)
    transactions = PartitionTransactions(
        settings.kafka, group, transaction_timeout_ms(session_timeout_ms),
        owned=lambda tp: tp in consumer.assignment(),
        any_partition=settings.names.any_partition,
        chaining=sealing.chaining(settings.names.audit))
    executor = (ThreadPoolExecutor(1, thread_name_prefix="kip-infer") if name else
                _background_thread("kip-infer-background"))
    # An interactive batch runs in one call: there is no next chunk to prepare.
    preparer = None if name else _background_thread("kip-prepare-background")
    answered = Answered(settings.names, reader=answered_reader(
        settings.kafka, settings.names, model, transactions.committed))
    lane = Lane(name or "background", model, consumer, executor, preparer, transactions,
                sealing, settings.names, answered)
    consumer.subscribe(topics, listener=_Revocations(lane))
    return lane


class _Revocations(ConsumerRebalanceListener):
    """Finish the batch in flight on a revocation; on the assignment after it, keep what
    comes back unchanged, drop the rest, claim what is new.

    aiokafka's rebalances are eager: every member gives up every partition, and most
    come back to the member that had them. A partition that comes back, whose group
    offset is still the last this lane committed (``unchanged``: no one committed from
    it meanwhile), keeps its producer and its answered ids; building a producer (the
    fence) and reading back a partition's answered ids cost round trips and a read of
    minutes of ids, which every member paid for every partition at every join and leave.
    """

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.revoked: set[TopicPartition] = set()
        self.taking: asyncio.Task | None = None
        self.paused_at: float | None = None   # the revocation's, until the assignment

    async def on_partitions_revoked(self, revoked) -> None:
        group = self.lane.transactions.group_id
        metrics.PARTITIONS_REVOKED.labels(group).inc(len(revoked))
        PROBES.set(f"group {group}", False, "rebalancing")
        if self.paused_at is None:
            self.paused_at = time.monotonic()
        if self.taking is not None:
            self.taking.cancel()
            await asyncio.gather(self.taking, return_exceptions=True)
        async with self.lane.gate.closed():
            if self.lane.committing:   # their errors are the loop's to raise
                await asyncio.wait(self.lane.committing)
        self.revoked |= set(revoked)

    async def on_partitions_assigned(self, assigned) -> None:
        """Kept partitions are fetched from at once; new ones are paused until taken."""
        assigned, revoked, self.revoked = set(assigned), self.revoked, set()
        back = sorted(revoked & assigned)
        same = await asyncio.gather(*(self.lane.transactions.unchanged(tp) for tp in back),
                                    return_exceptions=True)
        kept = {tp for tp, ok in zip(back, same) if ok is True}
        for tp in revoked - kept:
            self.lane.answered.drop(tp)
            await self.lane.transactions.release(tp)
        fresh = assigned - kept
        log.info("%s assigned %d partitions: %d kept, %d taken over (%d came back changed)",
                 self.lane.transactions.group_id, len(assigned), len(kept), len(fresh),
                 len(back) - len(kept))
        group = self.lane.transactions.group_id

        if self.paused_at is not None:
            metrics.REBALANCE_PAUSE.labels(group).observe(time.monotonic() - self.paused_at)
            self.paused_at = None
        if fresh:
            self.lane.consumer.pause(*fresh)
            PROBES.set(f"group {group}", False, f"taking over {len(fresh)} partitions")
            self.taking = asyncio.create_task(self.take_over(fresh), name="kip-take-partitions")
        else:
            self.mark_serving()

    async def take_over(self, fresh: set[TopicPartition]) -> None:
        """Each new partition's producer fences its previous owner and reads its floor,
        so its first request does not wait for those round trips; then its answered ids
        are read back (workers/single_use.py), and it is resumed. Where that fails it is
        resumed anyway: its first batch reads the ids back itself (``Answered.ready``)
        and fails the loop if it cannot, as a commit builds a producer that is missing."""
        began = time.monotonic()
        try:
            await self.lane.transactions.claim_each(fresh)
            self.lane.answered.claim_each(fresh)
            await self.lane.answered.ready(fresh)
            metrics.TAKEOVER.labels(self.lane.transactions.group_id).observe(
                time.monotonic() - began)
        except Exception as err:
            log.warning("taking %d partitions over: %r; their first batch tries again",
                        len(fresh), err)
        finally:
            mine = self.lane.consumer.assignment()
            self.lane.consumer.resume(*(tp for tp in fresh if tp in mine))
            self.mark_serving()

    def mark_serving(self) -> None:
        """Every partition assigned is fetched from: the lane serves (its readiness, and
        the first telemetry a worker sends waits for it)."""
        partitions = len(self.lane.consumer.assignment())
        PROBES.set(f"group {self.lane.transactions.group_id}", True,
                   f"joined: {partitions} partitions")
        self.lane.joined.set()


def _observe(committed: list[Ended | None], model: str) -> None:
    """Count each committed request once, by its ending, with its latencies: once per
    batch, so each label set is looked up once."""
    endings = [e for e in committed if e is not None]
    metrics.count_decisions("worker", [(e.status, e.error_code or "", e.priority or "", model)
                                       for e in endings])
    metrics.observe_latencies(endings, model)
    for ending in endings:
        HEALTH.observe(ending)


def _background_thread(prefix: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix=prefix, initializer=_lower_thread_priority)


def _lower_thread_priority() -> None:
    """Run this (background inference) thread at a higher nice value where the OS allows."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError):
        pass
