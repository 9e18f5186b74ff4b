"""The GPU worker: serves one model from two lanes (workers/lane.py), interactive and
standard/batch, each an aiokafka consumer-group member with its own inference thread.

Each lane's loop pulls a micro-batch (workers/batching.py), answers it class by class,
highest first (workers/answers.py), and commits each class's outputs with its input
offsets while the next batch runs (exactly-once for read_committed readers). Within
the background lane, batch partitions are paused while standard has backlog, with aging
(workers/priority.py). Inference runs in the lanes' threads, so the event loop keeps
heartbeating however long a batch takes. Telemetry reports capacity every second.

Poison: an undecodable work item, or a request whose inference fails on its own (the
chunk is retried request by request to find it), ends as a failed result plus a
dead-letter record in the same transaction; the partition moves on.
"""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord

from kip.models.manifest import Manifest
from kip.models.registry import Registry
from kip.models.staging import Stager, serving_stager
from kip.models.signing import configured_trust
from kip.runtime import allocator, collector, metrics, tracing
from kip.runtime.probes import PROBES, keep_beating
from kip.schemas.codec import now_ms
from kip.schemas.messages import PRIORITIES, Priority
from kip.workers.answers import Answering, answer
from kip.workers.batching import by_class, next_batch
from kip.workers import spans
from kip.workers.cancels import Cancels, follower as cancels_follower
from kip.workers.gpu_metrics import keep_sampling
from kip.workers.health import HEALTH
from kip.workers.lane import Lane, open_lane
from kip.workers.endings import ended, ran_inference
from kip.workers.pace import Pace
from kip.schemas.releases import Releases
from kip.transport.membership import leave
from kip.workers.preload import preload
from kip.workers.priority import Prioritizer, backlog_by_class
from kip.workers.session import CUDA
from kip.workers.sessions import Sessions
from kip.workers.settings import WorkerSettings
from kip.workers.telemetry import TelemetryPublisher, Throughput, report, worker_id

class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        registry, trust = Registry(settings.registry_dir), configured_trust(settings)
        self.releases = Releases()
        stager = serving_stager(settings, registry, trust, keep=self._cached_to_keep)
        self.sessions = Sessions(registry, settings.device, settings.intra_op_threads,
                                 settings.assume_gpu, settings.intra_op_spinning, trust,
                                 settings.memory_budget_bytes, stager)
        self.served = _served(settings.model, stager)
        self.model = self.served.name
        self.pace = Pace(settings.background_call_ms)
        HEALTH.window_s = settings.health_window_s
        self.stamp_keys = settings.stamp_keys()
        self.cancels = Cancels(self.stamp_keys)
        self.sealing = settings.sealing()
        self.topic_class = {settings.names.work(self.model, p): p for p in PRIORITIES}
        self.id = worker_id(self.model)
        self.throughput = Throughput()
        self.lanes: list[Lane] = []
        self.telemetry = TelemetryPublisher(settings.kafka, settings.names.telemetry, self.id,
                                            settings.telemetry_interval_s * 5)
        self._tasks: list[asyncio.Task] = []
        self._draining = False

    async def start(self) -> None:
        if self._tasks:
            return
        work = {p: t for t, p in self.topic_class.items()}
        self.lanes = [open_lane(self.settings, self.model, "interactive",
                                [work[Priority.INTERACTIVE]], self.sealing),
                      open_lane(self.settings, self.model, "",
                                [work[Priority.STANDARD], work[Priority.BATCH]], self.sealing)]
        PROBES.expect("broker", "model", *(f"group {lane.transactions.group_id}"
                                           for lane in self.lanes))
        session = await self.sessions.get(self.model, self.served.version)
        PROBES.set("model", True, f"{self.model}@{self.served.version} loaded and warmed up "
                                  f"({session.provider})")
        await self.telemetry.start()
        for lane in self.lanes:
            await lane.start()
        urgent, background = self.lanes
        prioritizer = Prioritizer(background.consumer, self.topic_class,
                                  self.settings.max_class_wait_ms)
        self._tasks = [
            asyncio.create_task(self._loop(urgent), name=f"kip-worker-{self.model}-interactive"),
            asyncio.create_task(self._loop(background, prioritizer),
                                name=f"kip-worker-{self.model}-background"),
            asyncio.create_task(self._report(), name=f"kip-telemetry-{self.model}"),
            asyncio.create_task(cancels_follower(self.settings.kafka, self.settings.names,
                                                 self.cancels).run(), name="kip-cancels"),
            asyncio.create_task(preload(self.settings.kafka, self.settings.names, self.model,
                                        self.sessions, self.releases),
                                name=f"kip-preload-{self.model}")]
        if session.provider == CUDA:   # NVML's gauges: workers/gpu_metrics.py
            self._tasks.append(asyncio.create_task(
                keep_sampling(self.settings.telemetry_interval_s), name="kip-gpu-metrics"))

    def _cached_to_keep(self) -> set[str]:
        """The versions the model cache never evicts: loaded (the served one stays), or
        named by a release. Called from the stager's thread: it copies the dicts the
        event loop changes (a copy is one step under the GIL; iterating them is not)."""
        return set(self.sessions.loaded.copy()) | self.releases.targets()

    async def stop(self) -> None:
        """Stop pulling; let the batches pulled finish and commit (``drain_timeout_s``);
        close each lane and, as a static member, leave its group at once."""
        tasks, self._tasks = self._tasks, []
        self._draining = True
        PROBES.set("model", False, "stopping: draining what was pulled")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:   # leave the capacity view at once
            await self.telemetry.leave()
        for lane in self.lanes:
            await lane.close()
            if self.settings.group_instance_id:
                await leave(self.settings.kafka, lane.transactions.group_id,
                            self.settings.group_instance_id)
        await self.telemetry.stop()
        self.lanes = []
        self.sessions.close()

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
        return self.settings.max_batch or self.sessions.max_batch

    async def _loop(self, lane: Lane, prioritizer: Prioritizer | None = None) -> None:
        """Fetch a batch, answer it, start its commits; until cancelled.

        Behind a full pull, the background lane reads one batch ahead: the next batch is
        fetched, decoded and queued for the inference thread while this one runs, so the
        thread goes from one batch to the next without waiting for the event loop to
        fetch, decode, build outputs and start commits in between. Behind a short pull
        (no backlog) it waits, so the next batch gathers what arrives meanwhile, as the
        interactive lane always does."""
        answering: list[asyncio.Task] = []   # oldest first; at most two
        try:
            while True:
                if prioritizer is not None:
                    await prioritizer.apply()
                pull = self._pull(lane)
                batch = await next_batch(lane.consumer, pull, self._delay_ms(lane))
                if not batch:
                    while answering:
                        await asyncio.shield(answering[0])
                        answering.pop(0)
                    self.throughput.batch_done(lane.name, 0, 0, pull)
                    await lane.settle()   # surface a failed commit even when idle
                    continue
                before = answering[-1] if answering else None
                answering.append(asyncio.create_task(
                    self._answer(batch, lane, pull, before, prioritizer)))
                ahead = prioritizer is not None and len(batch) >= pull
                while len(answering) > (1 if ahead else 0):
                    # shielded: a stop lets it finish (below); raises what it raised
                    await asyncio.shield(answering[0])
                    answering.pop(0)
        finally:
            if self._draining and answering:   # finish and commit what was pulled
                await asyncio.wait(answering, timeout=self.settings.drain_timeout_s)
            for task in answering:
                task.cancel()

    async def _answer(self, batch: list[ConsumerRecord], lane: Lane, pull: int,
                      before: asyncio.Task | None, prioritizer: Prioritizer | None) -> None:
        """One batch, answered; its commits wait for ``before`` (the previous batch) to
        start and finish its own, so each partition's transactions stay in order."""
        async with lane.gate.answering():
            inferred = await self.process(batch, lane, before)
        self.throughput.batch_done(lane.name, len(batch), inferred, pull)
        if prioritizer is not None:
            prioritizer.served({self.topic_class[r.topic] for r in batch})

    def _pull(self, lane: Lane) -> int:
        """Records one batch of ``lane`` takes (answered, then committed together)."""
        if lane.name == "interactive":
            return self.max_batch
        return self.settings.background_pull or self.max_batch

    def _delay_ms(self, lane: Lane) -> float:
        s = self.settings
        return s.interactive_max_delay_ms if lane.name == "interactive" else s.max_delay_ms

    async def process(self, batch: list[ConsumerRecord], lane: Lane,
                      before: asyncio.Task | None = None) -> int:
        """Answer ``batch`` class by class, highest first; each class starts to commit
        once answered, after the previous batch (``before``) has started its commits and
        they have finished. Interactive transactions begin while inference runs (their
        latency is the request's; background commits overlap the next batch anyway).
        Returns how many requests ran inference."""
        pulled, inferred, s = float(now_ms()), 0, self.settings
        for n, (priority, records) in enumerate(by_class(batch, self.topic_class)):
            interactive = priority == Priority.INTERACTIVE
            group = lane.transactions.group_id
            span = spans.batch(records, pulled, group, self.model, priority.value)
            how = Answering(self.model, self.stamp_keys, self.sessions, lane.executor,
                            self.pace, interactive,
                            (s.background_min_batch, min(s.background_max_batch,
                                                         self.max_batch)), s.names,
                            lane.begin_early if interactive else None, lane.preparer,
                            lane.answered, span, group, self.cancels)
            answers = await answer(records, pulled, how)
            answered = lane.answered_records(records, priority.value)
            endings = {key: ended(outputs) for key, outputs in answers.items()}
            inferred += sum(ran_inference(e) for e in endings.values())
            if n == 0:
                if before is not None:
                    await asyncio.wait([before])   # its errors are the loop's to raise
                await lane.settle()
            lane.commit(records, answers, endings, answered, span)
        return inferred

    async def _report(self) -> None:
        """Telemetry every ``telemetry_interval_s`` from the lanes' first assignment on:
        capacity, backlog, memory, versions refused; and versions unused for
        ``unload_after_s`` unloaded."""
        keep = {f"{self.model}@{self.served.version}"}
        # live to the pipelines only once it can take work: a request admitted while its
        # groups still form would wait out the join, and an interactive one expire
        await asyncio.gather(*(lane.joined.wait() for lane in self.lanes))
        while True:
            self.sessions.unload_idle(self.settings.unload_after_s, keep)
            sessions = list(self.sessions.loaded.values())
            backlog: dict[Priority, int] = {}
            for lane in self.lanes:
                backlog |= await backlog_by_class(lane.consumer, self.topic_class)
            message = report(self.id, self.model, [s.manifest.version for s in sessions],
                             sessions[0].provider if sessions else "", self.throughput,
                             backlog, now_ms(), self.sessions.refused)
            await self.telemetry.publish(message)
            await asyncio.sleep(self.settings.telemetry_interval_s)


def _served(model: str, stager: Stager) -> Manifest:
    """The version a worker starts with: ``name@version`` is staged from the model store
    where the cache lacks it (the worker has nothing to serve until then); an alias is
    the cache's (aliases.json), as on one host."""
    name, _, version = model.partition("@")
    if version:
        return stager.stage_now(name, version).manifest
    return stager.cache.resolve(model).manifest


async def run(settings: WorkerSettings) -> None:
    """Run one worker until cancelled (SIGINT/SIGTERM in ``kip worker``)."""
    metrics.serve(settings.metrics_port, settings.metrics_host)
    tracing.configure(f"kip-worker-{settings.model.partition('@')[0]}")   # where OTEL_* asks
    beating = asyncio.create_task(keep_beating(), name="kip-beat")
    try:
        async with Worker(settings) as worker:
            collector.settle()   # once started: runtime/collector.py
            allocator.keep_freed()   # runtime/allocator.py
            await worker.wait()
    finally:
        beating.cancel()
