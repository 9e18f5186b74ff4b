"""The GPU worker: serves one model from two lanes, each an aiokafka consumer-group member.

The interactive lane reads ``kip.work.<model>.interactive``; the background lane reads the
standard and batch topics (batch paused while standard has backlog, with aging). Each
lane has its own connection and inference thread, so an interactive request never waits
behind fetched or running batch work; the background thread runs at a lower OS priority.

Delivery: exactly-once for read_committed readers. A batch's results, final audit
records and dead letters leave in one Kafka transaction per input partition, together
with that partition's next offset (topics/transactions.py): a crash, a pause past the
session timeout or a rebalance either commits all of it or none of it, and a fenced
zombie's outputs are never visible. Those transactions commit while the next batch's
inference runs. Inference runs in executor threads, so the event loop keeps heartbeating
however long a batch takes.

Poison: an undecodable work item, or a request whose inference fails on its own (the
batch is retried request by request to find it), ends as a failed result plus a
dead-letter record in the same transaction; the partition moves on.
"""

from __future__ import annotations

import asyncio
import os
import threading
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from aiokafka import (AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener,
                      TopicPartition)
from aiokafka.structs import ConsumerRecord

from kip import metrics
from kip.registry import Registry
from schemas.codec import decode, encode, headers, now_ms
from schemas.errors import DeadlineExceeded, InvalidRequest, KipError
from schemas.messages import InferenceResult, Priority, WorkItem
from topics.catalogue import MAX_MESSAGE_BYTES
from topics.names import PRIORITIES
from topics.transactions import (Entry, PartitionTransactions, by_partition,
                                 transaction_timeout_ms)
from workers.batcher import next_batch
from workers.chunks import ChunkRun, chunked, run_chunks
from workers.outcome import Output, Stamps, poisoned, terminal_outputs, undecodable
from workers.priority import Prioritizer, backlog_by_class
from workers.session import ModelSession
from workers.settings import WorkerSettings
from workers.telemetry import Throughput, report, worker_id

log = logging.getLogger("kip.worker")
_RANK = {Priority.INTERACTIVE: 0, Priority.STANDARD: 1, Priority.BATCH: 2}
Pair = tuple[ConsumerRecord, WorkItem]
_EXPIRED = DeadlineExceeded("the deadline passed before inference started")


@dataclass
class Lane:
    """One consumer-group member with its inference thread and transactions.

    ``committing`` holds the transactions of the last batch still in flight: the next
    batch's inference runs while they commit, so the device does not wait for Kafka.
    """

    name: str
    consumer: AIOKafkaConsumer
    executor: ThreadPoolExecutor
    transactions: PartitionTransactions
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)
    committing: list[asyncio.Task] = field(default_factory=list)

    async def settle(self) -> None:
        """Wait for the transactions in flight; raise what they raised (a defect: Kafka
        errors are retried inside them)."""
        tasks, self.committing = self.committing, []
        await asyncio.gather(*tasks)

    async def drain(self, timeout_s: float) -> None:
        """Give the transactions in flight ``timeout_s`` to finish, then abandon them
        (a transaction left open is aborted by the broker)."""
        tasks, self.committing = self.committing, []
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


class _Revocations(ConsumerRebalanceListener):
    """Finish the batch in flight, then drop the revoked partitions' producers."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane

    async def on_partitions_revoked(self, revoked) -> None:
        metrics.PARTITIONS_REVOKED.labels(self.lane.transactions.group_id).inc(len(revoked))
        async with self.lane.busy:
            if self.lane.committing:   # their errors are the loop's to raise
                await asyncio.wait(self.lane.committing)
            for tp in revoked:
                await self.lane.transactions.release(tp)

    async def on_partitions_assigned(self, assigned) -> None:
        pass


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.names = settings.names
        self.registry = Registry(settings.registry_dir)
        self.model = self.registry.resolve(settings.model).manifest.name
        self.sessions: dict[str, ModelSession] = {}
        self._loading = asyncio.Lock()
        self.lanes: list[Lane] = []
        self.topic_class: dict[str, Priority] = {}
        self.producer: AIOKafkaProducer | None = None   # telemetry only
        self.id = worker_id(self.model)
        self.throughput = Throughput()
        self.prioritizer: Prioritizer | None = None
        self._tasks: list[asyncio.Task] = []

    @property
    def executor(self) -> ThreadPoolExecutor | None:
        """The interactive lane's inference thread (models load on it too)."""
        return self.lanes[0].executor if self.lanes else None

    async def start(self) -> None:
        if self._tasks:
            return
        work = {p: self.names.work(self.model, p) for p in PRIORITIES}
        self.topic_class = {t: p for p, t in work.items()}
        # Two lanes, two connections: interactive records are fetched the moment they
        # arrive, never held behind a fetch or buffer of batch records.
        self.lanes = [
            self._lane_for("interactive", [work[Priority.INTERACTIVE]],
                           ThreadPoolExecutor(1, thread_name_prefix="kip-infer")),
            self._lane_for("", [work[Priority.STANDARD], work[Priority.BATCH]],
                           ThreadPoolExecutor(1, thread_name_prefix="kip-infer-background",
                                              initializer=_lower_thread_priority))]
        alias = self.registry.resolve(self.settings.model)
        await self._session(alias.manifest.name, alias.manifest.version)
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap, acks="all",
            client_id=f"kip-worker-{self.model}")
        await self.producer.start()
        for lane in self.lanes:
            await lane.consumer.start()
        urgent, background = self.lanes
        self.prioritizer = Prioritizer(background.consumer, self.topic_class,
                                       self.settings.max_class_wait_ms)
        self._tasks = [
            asyncio.create_task(self._loop(urgent), name=f"kip-worker-{self.model}-interactive"),
            asyncio.create_task(self._loop(background), name=f"kip-worker-{self.model}-background"),
            asyncio.create_task(self._report(), name=f"kip-telemetry-{self.model}")]

    def _lane_for(self, name: str, topics: list[str], executor: ThreadPoolExecutor) -> Lane:
        group = self.names.worker_group(self.model, name)
        s = self.settings
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.session_timeout_ms // 3,
            max_poll_interval_ms=s.max_poll_interval_ms,
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES + 1024 * 1024,
            fetch_max_bytes=4 * MAX_MESSAGE_BYTES)
        transactions = PartitionTransactions(
            s.bootstrap, group, transaction_timeout_ms(s.session_timeout_ms),
            owned=lambda tp: tp in consumer.assignment(),
            any_partition=self.names.any_partition)
        lane = Lane(name or "background", consumer, executor, transactions)
        consumer.subscribe(topics, listener=_Revocations(lane))
        return lane

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks and self.producer is not None:   # leave the capacity view at once
            await self.producer.send_and_wait(self.names.telemetry, None,
                                              key=self.id.encode())
        for lane in self.lanes:
            await lane.drain(lane.transactions.timeout_ms / 1000)
            await lane.consumer.stop()
            await lane.transactions.close()
            lane.executor.shutdown(wait=True)
        if self.producer is not None:
            await self.producer.stop()
        self.lanes, self.producer = [], None

    async def wait(self) -> None:
        """Until a loop ends (they only end by an error or ``stop``)."""
        if self._tasks:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    @property
    def max_batch(self) -> int:
        if self.settings.max_batch:
            return self.settings.max_batch
        return max(s.manifest.max_batch for s in self.sessions.values())

    async def _loop(self, lane: Lane) -> None:
        """One lane's loop. The interactive lane and the standard/batch lane run side by
        side, each with its own consumer and inference thread; the background thread runs
        at a lower OS priority, so interactive inference takes the CPU first."""
        background = lane is self.lanes[1]
        saturated_since: float | None = None   # end of the last well-filled batch
        while True:
            if background:
                await self.prioritizer.apply()
            records = await next_batch(lane.consumer, self.max_batch,
                                       self.settings.max_delay_ms)
            if not records:
                saturated_since = None
                await lane.settle()   # surface a failed commit even when idle
                continue
            async with lane.busy:
                inferred = await self.process(records, lane)
            finished = time.monotonic()
            if len(records) >= max(1, self.max_batch // 2):
                # Capacity is the rate the lane serves a backlog: from the end of one
                # well-filled batch to the end of the next, so fetches, commits and the
                # CPU other processes take all count. (Busy time alone overstated it, and
                # admission let in requests that then expired in the queue.) Only
                # requests that ran inference count: expired ones leave the queue fast,
                # and counting them made admission let in more, which expired in turn.
                # A lone request's rate is mostly fixed cost and says nothing: until two
                # well-filled batches in a row, capacity reads "unknown".
                if saturated_since is not None:
                    self.throughput.record(inferred, finished - saturated_since)
                saturated_since = finished
            else:
                saturated_since = None
            if background:
                self.prioritizer.served({self.topic_class[r.topic] for r in records})

    async def _report(self) -> None:
        """Telemetry every ``telemetry_interval_s``: capacity, backlog, memory."""
        while True:
            sessions = list(self.sessions.values())
            backlog: dict[Priority, int] = {}
            for lane in self.lanes:
                backlog |= await backlog_by_class(lane.consumer, self.topic_class)
            message = report(self.id, self.model, [s.manifest.version for s in sessions],
                             sessions[0].provider if sessions else "", self.throughput,
                             backlog, now_ms())
            await self.producer.send_and_wait(self.names.telemetry, encode(message),
                                              key=self.id.encode(), headers=headers(message))
            await asyncio.sleep(self.settings.telemetry_interval_s)

    async def process(self, records: list[ConsumerRecord], lane: Lane) -> int:
        """Outputs for every record, committed with the records' offsets; returns how
        many requests ran inference.

        Classes run highest first, and each class's partitions start to commit as soon
        as its requests are answered, in the background: the next inference overlaps
        them. The previous batch's transactions finish before this batch's start, so a
        partition's transactions stay in order. Lower classes run in chunks of
        ``background_max_batch`` rows, which bounds how long one inference call holds
        the device.
        """
        pulled = float(now_ms())
        inferred = 0
        by_class: dict[Priority, list[ConsumerRecord]] = defaultdict(list)
        for record in records:
            by_class[self.topic_class[record.topic]].append(record)
        settled = False
        for priority in sorted(by_class, key=_RANK.__getitem__):
            outputs = await self._answer(by_class[priority], priority, pulled, lane)
            inferred += sum(_ran_inference(outs) for outs in outputs.values())
            if not settled:
                await lane.settle()
                settled = True
            lane.committing.append(asyncio.create_task(
                self._commit(lane, by_class[priority], outputs)))
        return inferred

    async def _answer(self, records: list[ConsumerRecord], priority: Priority,
                      pulled: float, lane: Lane) -> dict[int, list[Output]]:
        """Every record's outputs (by ``id(record)``): inference or a terminal error."""
        outputs: dict[int, list[Output]] = {}
        pairs: list[Pair] = []
        for record in records:
            try:
                pairs.append((record, decode(WorkItem, record.value)))
            except InvalidRequest as err:
                outputs[id(record)] = undecodable(record, err, self.names)
        chunk = (len(pairs) if priority == Priority.INTERACTIVE
                 else self.settings.background_max_batch)
        for (name, version), group in self._groups(pairs).items():
            for record, outs in await self._infer(name, version, group, pulled, lane, chunk):
                outputs[id(record)] = outs
        return outputs

    def _groups(self, pairs: list[Pair]) -> dict[tuple[str, str], list[Pair]]:
        """Requests of one class by (model, version)."""
        groups: dict[tuple[str, str], list[Pair]] = defaultdict(list)
        for pair in pairs:
            r = pair[1].route
            groups[(r.model_name, r.model_version)].append(pair)
        return groups

    async def _commit(self, lane: Lane, records: list[ConsumerRecord],
                      outputs: dict[int, list[Output]]) -> None:
        """One transaction per input partition. A partition lost meanwhile is not ours to
        commit: its new owner answers those records, and we do not count them."""
        groups = by_partition(records, lambda r: TopicPartition(r.topic, r.partition))
        done = await asyncio.gather(*(
            lane.transactions.commit(tp, [Entry(r.offset, _records(outputs[id(r)]))
                                          for r in rs])
            for tp, rs in groups.items()))
        for rs, committed in zip(groups.values(), done):
            for r in rs if committed else ():
                _observe(outputs[id(r)])

    async def _infer(self, name: str, version: str, group: list[Pair], pulled: float,
                     lane: Lane, chunk: int) -> list[tuple[ConsumerRecord, list[Output]]]:
        try:
            session = await self._session(name, version)
        except KipError as err:
            return [(r, terminal_outputs(i, Stamps(pulled), self.names, error=err)) for r, i in group]
        return await self._run(session, group, pulled, lane.executor, chunk)

    async def _run(self, session: ModelSession, group: list[Pair], pulled: float,
                   executor: ThreadPoolExecutor, chunk: int
                   ) -> list[tuple[ConsumerRecord, list[Output]]]:
        """Run a group in chunks, back to back in the inference thread. Requests whose
        deadline passed before their chunk started are not inferred. A failed chunk is
        run again one request at a time, so only a poison request fails (with a dead
        letter) and the rest are served."""
        runs = await asyncio.get_running_loop().run_in_executor(
            executor, run_chunks, partial(_run_session, session), chunked(group, chunk),
            _deadline)
        answered = []
        for run in runs:
            answered += [(r, terminal_outputs(i, Stamps(pulled), self.names, error=_EXPIRED))
                         for r, i in run.expired]
            if not run.live:
                continue
            stamps = Stamps(pulled, run.started_ms, run.finished_ms,
                            sum(i.request.inputs[0].shape[0] for _, i in run.live))
            if run.error is None:
                answered += self._served(session.manifest.name, run, stamps)
            elif len(run.live) > 1:
                log.warning("batch of %d on %s failed (%s); retrying one by one",
                            len(run.live), session.manifest.name, run.error)
                answered += await self._run(session, run.live, pulled, executor, 1)
            else:
                record, item = run.live[0]
                if not isinstance(run.error, KipError):   # a defect: still one terminal result
                    log.error("inference on %s raised %r", session.manifest.name, run.error)
                answered.append((record, poisoned(record, item, stamps, self.names, run.error)))
        return answered

    def _served(self, name: str, run: ChunkRun[Pair], stamps: Stamps
                ) -> list[tuple[ConsumerRecord, list[Output]]]:
        metrics.BATCH_SIZE.labels(name).observe(stamps.batch_size)
        metrics.LATENCY.labels("inference", "", name).observe(
            (stamps.finished_ms - stamps.started_ms) / 1000)
        return [(r, terminal_outputs(i, stamps, self.names, outputs=out))
                for (r, i), out in zip(run.live, run.outputs)]

    async def _session(self, name: str, version: str) -> ModelSession:
        key = f"{name}@{version}"
        async with self._loading:   # both lanes may ask for a new version at once
            if key not in self.sessions:
                await self._load(name, version)
        return self.sessions[key]

    async def _load(self, name: str, version: str) -> None:
        """Verify and load a version (in the executor: hashing and loading take time)."""
        loop = asyncio.get_running_loop()
        mv = await loop.run_in_executor(self.executor, self.registry.load, name, version)
        session = await loop.run_in_executor(self.executor, ModelSession, mv,
                                             self.settings.device,
                                             self.settings.intra_op_threads)
        self.sessions[f"{name}@{version}"] = session
        metrics.MODELS_LOADED.labels(name, version, session.provider).set(1)
        log.warning("worker serves %s@%s on %s", name, version, session.provider)


def _run_session(session: ModelSession, pairs: list[Pair]) -> list:
    return session.run([item.request.inputs for _, item in pairs])


def _deadline(pair: Pair) -> int:
    return pair[1].deadline_ms


def _ran_inference(outputs: list[Output]) -> bool:
    return any(isinstance(m, InferenceResult) and m.timings.inference_ms is not None
               for _, _, m, _ in outputs)


def _records(outputs: list[Output]) -> list:
    """Outputs as (topic, key, value, headers), ready for a transaction."""
    return [(topic, key, encode(msg), headers(msg, trace)) for topic, key, msg, trace in outputs]


def _observe(outputs: list[Output]) -> None:
    for _, _, message, _ in outputs:
        if isinstance(message, InferenceResult):
            _observe_result(message)


def _observe_result(result: InferenceResult) -> None:
    code = result.error.code if result.error else None
    metrics.count("worker", result.status.value, code, result.priority, result.model_name)
    t = result.timings
    labels = (result.priority or "", result.model_name or "")
    metrics.LATENCY.labels("end_to_end", *labels).observe(t.total_ms / 1000)
    if t.queue_ms is not None:
        metrics.LATENCY.labels("queue", *labels).observe(t.queue_ms / 1000)
    if t.batch_wait_ms is not None:
        metrics.LATENCY.labels("batch_wait", *labels).observe(t.batch_wait_ms / 1000)


def _lower_thread_priority() -> None:
    """Run this (background inference) thread at nice +10 where the OS allows it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


async def run(settings: WorkerSettings) -> None:
    """Run one worker until cancelled (SIGINT/SIGTERM in ``kip worker``)."""
    metrics.serve(settings.metrics_port)
    async with Worker(settings) as worker:
        await worker.wait()
