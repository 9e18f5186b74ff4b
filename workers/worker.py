"""The GPU worker: serves one model from two lanes, each an aiokafka consumer-group member.

The interactive lane reads ``kip.work.<model>.interactive``; the background lane reads the
standard and batch topics (batch paused while standard has backlog, with aging). Each
lane has its own connection and inference thread, so an interactive request never waits
behind fetched or running batch work; the background thread runs at a lower OS priority.

Delivery: at-least-once. For each micro-batch the worker produces every
result and final audit record, waits for all acknowledgements (acks=all, idempotent
producer), and only then commits the batch's offsets. A crash between the two replays
the batch; issue 4 turns this into Kafka transactions.
"""

from __future__ import annotations

import asyncio
import os
import threading
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from kip import metrics
from kip.registry import Registry
from schemas.codec import decode, encode, headers, now_ms
from schemas.deadletter import dead_letter, fallback_request_id, hints
from schemas.errors import DeadlineExceeded, Internal, InvalidRequest, KipError
from schemas.messages import (AuditRecord, InferenceResult, Priority, Status, Timings,
                              WorkItem)
from topics.catalogue import MAX_MESSAGE_BYTES
from topics.names import PRIORITIES
from workers.batcher import next_batch
from workers.outcome import Stamps, terminal
from workers.priority import Prioritizer, backlog_by_class
from workers.session import ModelSession
from workers.settings import WorkerSettings
from workers.telemetry import Throughput, report, worker_id

log = logging.getLogger("kip.worker")
_RANK = {Priority.INTERACTIVE: 0, Priority.STANDARD: 1, Priority.BATCH: 2}
Output = tuple[str, bytes, object, str | None]   # topic, key, message, traceparent


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.names = settings.names
        self.registry = Registry(settings.registry_dir)
        self.model = self.registry.resolve(settings.model).manifest.name
        self.sessions: dict[str, ModelSession] = {}
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kip-infer")
        self.background_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kip-infer-background",
            initializer=_lower_thread_priority)
        self._loading = asyncio.Lock()
        self.consumer: AIOKafkaConsumer | None = None   # standard and batch
        self.urgent: AIOKafkaConsumer | None = None     # interactive
        self.topic_class: dict[str, Priority] = {}
        self.producer: AIOKafkaProducer | None = None
        self.id = worker_id(self.model)
        self.throughput = Throughput()
        self.prioritizer: Prioritizer | None = None
        self._committed: dict[TopicPartition, int] = {}
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        if self._tasks:
            return
        alias = self.registry.resolve(self.settings.model)
        await self._session(alias.manifest.name, alias.manifest.version)
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap, acks="all", enable_idempotence=True,
            max_request_size=MAX_MESSAGE_BYTES, client_id=f"kip-worker-{self.model}")
        work = {p: self.names.work(self.model, p) for p in PRIORITIES}
        # Two consumers, two connections: interactive records are fetched the moment
        # they arrive, never held behind a fetch or buffer of batch records.
        self.urgent = self._consumer([work[Priority.INTERACTIVE]], "interactive")
        self.consumer = self._consumer([work[Priority.STANDARD], work[Priority.BATCH]], "")
        await self.producer.start()
        await self.urgent.start()
        await self.consumer.start()
        self.topic_class = {t: p for p, t in work.items()}
        self.prioritizer = Prioritizer(self.consumer, self.topic_class,
                                       self.settings.max_class_wait_ms)
        self._tasks = [
            asyncio.create_task(self._lane(self.urgent, self.executor),
                                name=f"kip-worker-{self.model}-interactive"),
            asyncio.create_task(self._lane(self.consumer, self.background_executor),
                                name=f"kip-worker-{self.model}-background"),
            asyncio.create_task(self._report(), name=f"kip-telemetry-{self.model}")]

    def _consumer(self, topics: list[str], lane: str) -> AIOKafkaConsumer:
        group = f"{self.names.prefix}.workers.{self.model}" + (f".{lane}" if lane else "")
        return AIOKafkaConsumer(
            *topics, bootstrap_servers=self.settings.bootstrap, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.session_timeout_ms // 3,
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES + 1024 * 1024,
            fetch_max_bytes=4 * MAX_MESSAGE_BYTES)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks and self.producer is not None:   # leave the capacity view at once
            await self.producer.send_and_wait(self.names.telemetry, None,
                                              key=self.id.encode())
        for client in (self.urgent, self.consumer, self.producer):
            if client is not None:
                await client.stop()
        self.urgent = self.consumer = self.producer = None
        self.executor.shutdown(wait=True)
        self.background_executor.shutdown(wait=True)

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

    async def _lane(self, consumer: AIOKafkaConsumer, executor: ThreadPoolExecutor) -> None:
        """One lane's loop. The interactive lane and the standard/batch lane run side by
        side, each with its own consumer and inference thread; the background thread runs
        at a lower OS priority, so interactive inference takes the CPU first."""
        background = consumer is self.consumer
        while True:
            if background:
                await self.prioritizer.apply()
            records = await next_batch(consumer, self.max_batch, self.settings.max_delay_ms)
            if not records:
                continue
            started = time.monotonic()
            await self.process(records, consumer, executor)
            if len(records) >= max(1, self.max_batch // 2):
                # Only well-filled batches say what the worker can do: a lone request's
                # rate is mostly fixed cost and would make admission refuse bursts that
                # batching would serve at once. Until then capacity reads "unknown".
                self.throughput.record(len(records), time.monotonic() - started)
            if background:
                self.prioritizer.served({self.topic_class[r.topic] for r in records})

    async def _report(self) -> None:
        """Telemetry every ``telemetry_interval_s``: capacity, backlog, memory."""
        while True:
            sessions = list(self.sessions.values())
            backlog = (await backlog_by_class(self.urgent, self.topic_class)
                       | await backlog_by_class(self.consumer, self.topic_class))
            message = report(self.id, self.model, [s.manifest.version for s in sessions],
                             sessions[0].provider if sessions else "", self.throughput,
                             backlog, now_ms())
            await self.producer.send_and_wait(self.names.telemetry, encode(message),
                                              key=self.id.encode(), headers=headers(message))
            await asyncio.sleep(self.settings.telemetry_interval_s)

    async def process(self, records: list[ConsumerRecord],
                      consumer: AIOKafkaConsumer | None = None,
                      executor: ThreadPoolExecutor | None = None) -> None:
        """Outputs for every record, all acknowledged, then the offsets committed.

        Groups run highest class first and their results leave as soon as they are
        computed. Lower classes run in chunks of ``background_max_batch`` rows, which
        bounds how long one inference call holds the device.
        """
        pulled = float(now_ms())
        sent: list[asyncio.Future] = []
        items: list[WorkItem] = []
        for record in records:
            try:
                items.append(decode(WorkItem, record.value))
            except InvalidRequest as err:
                sent += await self._send(self._undecodable(record, err))
        for (name, version, _), group in self._groups(items):
            outputs = await self._infer(name, version, group, pulled, executor or self.executor)
            sent += await self._send(outputs)
        await asyncio.gather(*sent)
        await self._commit(records, consumer or self.consumer)

    def _groups(self, items: list[WorkItem]):
        """(model, version, class) groups in class order; lower classes in chunks."""
        groups: dict[tuple[str, str, Priority], list[WorkItem]] = defaultdict(list)
        for item in sorted(items, key=lambda i: _RANK[i.request.priority]):
            r = item.route
            groups[(r.model_name, r.model_version, item.request.priority)].append(item)
        chunk = self.settings.background_max_batch
        for key, group in groups.items():
            size = len(group) if key[2] == Priority.INTERACTIVE else chunk
            for i in range(0, len(group), size):
                yield key, group[i:i + size]

    async def _commit(self, records: list[ConsumerRecord], consumer: AIOKafkaConsumer
                      ) -> None:
        """Commit past ``records``, never behind what a nested round already committed."""
        offsets = {tp: o for tp, o in _next_offsets(records).items()
                   if o > self._committed.get(tp, -1)}
        if offsets:
            await consumer.commit(offsets)
            self._committed.update(offsets)

    def _drop_expired(self, group: list[WorkItem], pulled: float
                      ) -> tuple[list[WorkItem], list[Output]]:
        """Split off requests whose deadline has passed: no inference runs for them."""
        now = now_ms()
        live = [i for i in group if i.deadline_ms > now]
        expired = DeadlineExceeded("the deadline passed before inference started")
        outputs = [o for i in group if i.deadline_ms <= now
                   for o in self._terminal(i, Stamps(pulled), error=expired)]
        return live, outputs

    async def _infer(self, name: str, version: str, group: list[WorkItem], pulled: float,
                     executor: ThreadPoolExecutor) -> list[Output]:
        try:
            session = await self._session(name, version)
        except KipError as err:
            return [o for i in group for o in self._terminal(i, Stamps(pulled), error=err)]
        group, outputs = self._drop_expired(group, pulled)
        if not group:
            return outputs
        return outputs + await self._run(session, group, pulled, executor)

    async def _run(self, session: ModelSession, group: list[WorkItem], pulled: float,
                   executor: ThreadPoolExecutor) -> list[Output]:
        name = session.manifest.name
        stamps = Stamps(pulled, batch_size=sum(i.request.inputs[0].shape[0] for i in group))
        try:
            stamps.started_ms = time.time() * 1000
            per_request = await asyncio.get_running_loop().run_in_executor(
                executor, session.run, [i.request.inputs for i in group])
            stamps.finished_ms = time.time() * 1000
        except KipError as err:
            return [o for i in group for o in self._terminal(i, stamps, error=err)]
        except Exception as exc:  # a defect: still one terminal result per request
            log.exception("inference on %s failed", name)
            err = Internal(f"{type(exc).__name__}: {exc}")
            return [o for i in group for o in self._terminal(i, stamps, error=err)]
        metrics.BATCH_SIZE.labels(name).observe(stamps.batch_size)
        metrics.LATENCY.labels("inference", "", name).observe(
            (stamps.finished_ms - stamps.started_ms) / 1000)
        return [o for i, out in zip(group, per_request)
                for o in self._terminal(i, stamps, outputs=out)]

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

    def _terminal(self, item: WorkItem, stamps: Stamps, outputs=None, error=None
                  ) -> list[Output]:
        now = now_ms()
        result, audit = terminal(item, stamps, now, outputs, error)
        _observe(result)
        reply_to = item.request.reply_to or self.names.results
        key = item.request.request_id.encode()
        trace = item.request.traceparent
        return [(reply_to, key, result, trace), (self.names.audit, key, audit, trace)]

    def _undecodable(self, record: ConsumerRecord, err: InvalidRequest) -> list[Output]:
        now = now_ms()
        found = hints(record.value)
        request_id = found.get("request_id") or fallback_request_id(
            record.topic, record.partition, record.offset)
        result = InferenceResult(request_id=request_id, status=Status.FAILED,
                                 error={"code": err.code, "message": err.message},
                                 timings=Timings(total_ms=0.0), produced_at_ms=now)
        audit = AuditRecord(request_id=request_id, stage="worker", decision="failed",
                            final=True, tenant=found.get("tenant"), error_code=err.code,
                            payload_bytes=len(record.value), at_ms=now)
        dead = dead_letter(record.value, record.topic, record.partition, record.offset, err, now)
        key = request_id.encode()
        return [(self.names.results, key, result, None), (self.names.audit, key, audit, None),
                (self.names.deadletter, record.topic.encode(), dead, None)]

    async def _send(self, outputs: list[Output]) -> list[asyncio.Future]:
        """Hand outputs to the producer; the returned futures resolve on acknowledgement."""
        return [await self.producer.send(topic, encode(msg), key=key,
                                         headers=headers(msg, trace))
                for topic, key, msg, trace in outputs]


def _observe(result: InferenceResult) -> None:
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


def _next_offsets(records: list[ConsumerRecord]) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        out[tp] = max(out.get(tp, 0), r.offset + 1)
    return out


async def run(settings: WorkerSettings) -> None:
    """Run one worker until cancelled (SIGINT/SIGTERM in ``kip worker``)."""
    metrics.serve(settings.metrics_port)
    async with Worker(settings) as worker:
        await worker.wait()
