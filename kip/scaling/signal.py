"""The scaling signal (``kip scaling``): per model and class, lag in records and seconds,
arrivals, and the workers kip wants (kip/scaling/estimate.py), as Prometheus gauges an
autoscaler reads (KEDA's prometheus trigger: deploy/kubernetes).

One process per deployment, stateless but for the end-offset samples of its window. It
polls every ``interval_s``: the work topics (found by name, so a new model is seen
without a restart), their end and start offsets, and each worker group's committed
offsets; it follows worker telemetry for the capacity a worker measured. It describes
topics and groups and never reads a request (the ``scaling`` role in topics/acls.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import Gauge

from kip.pipeline.capacity import CapacityView
from kip.pipeline.control import apply_telemetry
from kip.runtime.follower import TopicFollower
from kip.runtime.probes import PROBES, keep_beating
from kip.scaling.estimate import EndHistory, Sizing, demand, desired_workers
from kip.scaling.settings import ScalingSettings
from kip.schemas.codec import now_ms
from kip.schemas.messages import PRIORITIES, Priority
from kip.topics.names import TopicNames
from kip.transport.aiokafka_adapter import ask_metadata_for, refresh_metadata
from kip.transport.clients import KafkaConnection
from kip.transport.reading import reader_to_end

log = logging.getLogger("kip.scaling")
LAG_RECORDS = Gauge("kip_consumer_lag_records", "Requests written to a model's work "
                    "topic of a class and not yet committed by its workers",
                    ["model", "priority"])
LAG_SECONDS = Gauge("kip_consumer_lag_seconds", "Age of the oldest request a model's "
                    "workers have not committed, per class", ["model", "priority"])
ARRIVALS = Gauge("kip_work_arrivals_per_second", "Requests written to a model's work "
                 "topic per second, per class, over the window", ["model", "priority"])
PER_WORKER = Gauge("kip_worker_capacity_requests_per_second", "Requests per second one "
                   "worker of the model serves: its live workers' measured mean",
                   ["model"])
LIVE = Gauge("kip_workers_live", "Workers of the model reporting telemetry", ["model"])
PARTITIONS = Gauge("kip_work_partitions", "The most partitions of any of the model's "
                   "work topics: the cap on its workers", ["model"])
DESIRED = Gauge("kip_workers_desired", "Workers the model wants from its lag, arrivals "
                "and capacity, capped at its partitions (docs/deploy.md)", ["model"])


@dataclass
class ClassLag:
    records: int = 0
    seconds: float = 0.0
    arrivals_per_s: float = 0.0
    partitions: int = 0


@dataclass
class ModelSignal:
    model: str
    classes: dict[Priority, ClassLag] = field(default_factory=dict)
    per_worker: float = 0.0
    live: int = 0
    desired: int = 0


class ScalingSignal:
    def __init__(self, kafka: KafkaConnection, names: TopicNames, sizing: Sizing = Sizing(),
                 window_s: float = 30.0) -> None:
        self.kafka, self.names, self.sizing, self.window_s = kafka, names, sizing, window_s
        self.capacity = CapacityView()
        self.history: dict[TopicPartition, EndHistory] = {}
        self.consumer = reader_to_end(kafka, isolation_level="read_committed")
        self.admin = kafka.admin(client_id="kip-scaling")
        self.telemetry = TopicFollower(kafka, names.telemetry, apply_telemetry(self.capacity))

    async def start(self) -> None:
        await self.consumer.start()
        await self.admin.start()

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.admin.close()

    async def poll(self) -> list[ModelSignal]:
        """One reading of every model's lag, and the gauges set from it."""
        signals = []
        for model in await self.models():
            signal = ModelSignal(model)
            for priority in PRIORITIES:
                signal.classes[priority] = await self._class_lag(model, priority)
            self._size(signal)
            _export(signal)
            signals.append(signal)
        return signals

    async def models(self) -> list[str]:
        """Every model with an interactive work topic (``<prefix>.work.<model>.*``)."""
        head, tail = f"{self.names.prefix}.work.", f".{Priority.INTERACTIVE.value}"
        topics = await self.admin.list_topics()
        return sorted(t[len(head):-len(tail)] for t in topics
                      if t.startswith(head) and t.endswith(tail))

    async def _class_lag(self, model: str, priority: Priority) -> ClassLag:
        topic = self.names.work(model, priority)
        tps = await self._partitions(topic)
        if not tps:
            return ClassLag()
        lane = "interactive" if priority == Priority.INTERACTIVE else ""
        group = self.names.worker_group(model, lane)
        ends = await self.consumer.end_offsets(tps)
        starts = await self.consumer.beginning_offsets(tps)
        committed = await _retried(lambda: self.admin.list_consumer_group_offsets(
            group, partitions=tps))
        now = time.monotonic()
        lag = ClassLag(partitions=len(tps))
        for tp in tps:
            history = self.history.setdefault(tp, EndHistory())
            history.add(now, ends[tp])
            meta = committed.get(tp)
            at = meta.offset if meta is not None and meta.offset >= 0 else starts[tp]
            waiting = max(0, ends[tp] - max(at, starts[tp]) - 1)
            lag.records += waiting
            lag.arrivals_per_s += history.rate(self.window_s)
            written = history.written_at(max(at, starts[tp]) + 1) if waiting else None
            if written is not None:
                lag.seconds = max(lag.seconds, now - written)
        return lag

    async def _partitions(self, topic: str) -> list[TopicPartition]:
        await ask_metadata_for(self.consumer, topic)
        partitions = self.consumer.partitions_for_topic(topic)
        if not partitions:
            await refresh_metadata(self.consumer)
            partitions = self.consumer.partitions_for_topic(topic) or set()
        return [TopicPartition(topic, p) for p in sorted(partitions)]

    def _size(self, signal: ModelSignal) -> None:
        serving = self.capacity.serving(signal.model, now_ms())
        measured = [t.requests_per_s for t in serving if t.requests_per_s > 0]
        signal.live = len(serving)
        signal.per_worker = (sum(measured) / len(measured) if measured
                             else self.sizing.per_worker_default)
        wanted = sum(demand(c.arrivals_per_s, c.records, self.sizing)
                     for c in signal.classes.values())
        cap = max(c.partitions for c in signal.classes.values())
        signal.desired = desired_workers(wanted, signal.per_worker, signal.live, cap,
                                         self.sizing)


async def _retried(call, tries: int = 10, backoff_s: float = 0.3):
    """``call()`` again while Kafka says to retry (a coordinator being elected)."""
    for attempt in range(tries):
        try:
            return await call()
        except KafkaError as err:
            if not err.retriable or attempt == tries - 1:
                raise
            await asyncio.sleep(backoff_s)


def _export(signal: ModelSignal) -> None:
    for priority, lag in signal.classes.items():
        LAG_RECORDS.labels(signal.model, priority.value).set(lag.records)
        LAG_SECONDS.labels(signal.model, priority.value).set(lag.seconds)
        ARRIVALS.labels(signal.model, priority.value).set(lag.arrivals_per_s)
    PER_WORKER.labels(signal.model).set(signal.per_worker)
    LIVE.labels(signal.model).set(signal.live)
    PARTITIONS.labels(signal.model).set(max(c.partitions for c in signal.classes.values()))
    DESIRED.labels(signal.model).set(signal.desired)


async def serve(settings: ScalingSettings) -> None:
    """``kip scaling``: the signal of the deployment ``settings`` name, until cancelled."""
    await run(ScalingSignal(settings.kafka, settings.names, settings.sizing(),
                            settings.scaling_window_s), settings.scaling_interval_s)


async def run(signal: ScalingSignal, interval_s: float) -> None:
    """Poll every ``interval_s`` until cancelled, following telemetry meanwhile. Ready
    (/readyz) while the last poll read the lag; a failed poll keeps the gauges."""
    PROBES.expect("lag read")
    await signal.start()
    tasks = [asyncio.create_task(signal.telemetry.run(), name="kip-scaling-telemetry"),
             asyncio.create_task(keep_beating(), name="kip-beat")]
    try:
        while True:
            try:
                await signal.poll()
                PROBES.set("lag read", True, "the last poll read every model's lag")
            except KafkaError as err:   # the next poll tries again; the gauges stay
                log.error("reading lag failed: %r", err)
                PROBES.set("lag read", False, f"the last poll failed: {err!r}"[:300])
            await asyncio.sleep(interval_s)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await signal.stop()
