"""The pipeline's faust app: requests topics -> ``decide`` -> work / result topics.

Delivery: exactly-once for read_committed readers. A round of up to its class's
``take_max`` events, at most ``take_per_partition`` of each partition (collected for at
most its class's ``round_ms`` after its first event; pipeline/rounds.py) is decided;
then, for each input partition, one Kafka transaction carries every output of its
events (work item or result, audit record, dead letter) and the partition's next offset
for faust's consumer group (transport/transactions.py). faust's own offset commits are
switched off (``TransactionalConsumer``, pipeline/faust_adapter.py): kip commits offsets
only inside those transactions. Why not faust's ``exactly_once`` mode:
docs/architecture.md.

State: quota settings and fallbacks come from the control topic, capacity from the
telemetry topic, bucket levels from the quota-levels topic; each is followed by a
background task that must have caught up before the first round is decided. Changed
bucket levels are produced in the round's first transaction. A partition is claimed
(its previous owner fenced, the ids admitted from it read back: pipeline/claims.py) as
soon as it is assigned, and a round waits for its partitions' claims; a round's
admitted ids are written in that partition's transaction.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import faust
import orjson
from aiokafka import TopicPartition

from kip.pipeline.access import AccessConfig
from kip.pipeline.capacity import CapacityView
from kip.pipeline.claims import Claims
from kip.pipeline.control import ControlState, apply_telemetry, publish_control
from kip.pipeline.health import rollbacks
from kip.schemas.releases import Releases
from kip.pipeline.decide import decide
from kip.pipeline.decisions import Context, Decision, Origin, Shed
from kip.pipeline.intake import CheckedEnvelopes, Screen, UnsignedAllowance, shed_record
from kip.pipeline.refusals import refuse_undecodable
from kip.pipeline.faust_adapter import TransactionalConsumer
from kip.pipeline.readiness import agent_condition, watch
from kip.runtime.follower import TopicFollower
from kip.pipeline.known_topics import KnownTopics
from kip.pipeline.quota import Ledger, apply_levels, dump_levels
from kip.pipeline.replays import SeenRequests
from kip.pipeline.rounds import rounds
from kip.pipeline.routing import serving_router
from kip.pipeline.settings import PipelineSettings
from kip.pipeline.spans import traced
from kip.pipeline.work_placement import WorkPlacement
from kip.runtime import allocator, collector, metrics, tracing
from kip.runtime.files import private_dir
from kip.runtime.probes import PROBES
from kip.schemas.codec import TRACE_HEADER, now_ms
from kip.schemas.errors import Internal
from kip.schemas.messages import Priority
from kip.schemas.result_signatures import request_sha256
from kip.topics.catalogue import MAX_MESSAGE_BYTES
from kip.transport.admin import cluster_brokers
from kip.transport.clients import INFLATION_BUDGET_BYTES, METADATA_MAX_AGE_MS
from kip.transport.inflation import bound_inflation
from kip.transport.outputs import Output, Record, signed_records
from kip.transport.transactions import Entry, PartitionTransactions
from kip.transport.transactions import transaction_timeout_ms

log = logging.getLogger("kip.pipeline")
HEALTH_GATE_S = 2.0
GIVE_BACK_EVERY_S = 1.0   # how often freed heap is given back, if large messages came
DECIDE_SLICE = 200   # events decided between two turns of the event loop


class PipelineState:
    """What every round of every agent shares within one pipeline process."""

    def __init__(self, settings: PipelineSettings) -> None:
        self.settings = settings
        self.access = AccessConfig.from_file(settings.access_file)
        self.releases = Releases()
        self.router = serving_router(settings, self.releases)
        self.control = ControlState()
        self.capacity = CapacityView()
        self.ledger = Ledger(self.control.quotas)
        self.stamp_keys = settings.stamp_keys()
        self.sealing = settings.sealing()
        self.seen = SeenRequests(settings.replay_window_ms)
        self.allowance = UnsignedAllowance()
        self.envelopes = CheckedEnvelopes()
        self.screen = Screen(self.access, settings.admission, self.allowance, self.envelopes)
        self.large_messages = allocator.LargeMessages()
        self.known_topics = KnownTopics(settings.kafka)   # each agent's, shared()
        for priority in settings.classes:   # 0 until a message is shed, not missing
            metrics.SHED.labels(priority.value)
        self.claims = Claims(settings.kafka, self.seen,
                             lambda tp: settings.names.admitted(_class_of(tp, settings)))
        names, kafka = settings.names, settings.kafka
        self.followers = [
            TopicFollower(kafka, names.control, self.control.apply),
            TopicFollower(kafka, names.telemetry, apply_telemetry(self.capacity)),
            TopicFollower(kafka, names.quota_levels, apply_levels(self.ledger)),
            TopicFollower(kafka, names.releases, self.releases.apply)]

    async def ready(self) -> None:
        await asyncio.gather(*(f.caught_up.wait() for f in self.followers))

    def context(self, topics: frozenset[str], known: KnownTopics,
                placement: WorkPlacement) -> Context:
        s = self.settings
        now = now_ms()
        self.seen.sweep(now)
        return Context(self.access, self.router, s.names, now, s.replay_window_ms,
                       topics, s.admission, self.ledger, self.capacity,
                       self.control.fallbacks, self.stamp_keys, self.seen, self.allowance,
                       known.partitions, placement, envelopes=self.envelopes)

    def admitted_records(self, tp: TopicPartition) -> list[Record]:
        topic = self.settings.names.admitted(_class_of(tp, self.settings))
        return self.seen.records(topic, tp)

    def changed_levels(self) -> list[Record]:
        """Records for the bucket levels this round changed (produced with its outputs)."""
        topic = self.settings.names.quota_levels
        changed = [Record(topic, tenant.encode(),
                          orjson.dumps(dump_levels(self.ledger.levels[tenant])), [])
                   for tenant in self.ledger.dirty]
        self.ledger.dirty.clear()
        return changed


def create_app(settings: PipelineSettings, replicas: int = 1) -> faust.App:
    """The pipeline's faust app; ``replicas``: the replication factor of the one topic
    faust creates itself (its assignor's leader topic)."""
    bound_inflation(_record_limits(settings), INFLATION_BUDGET_BYTES)
    app = faust.App(
        settings.names.pipeline_group(settings.classes),
        **settings.kafka.faust_broker(),
        store="memory://", web_enabled=False,
        datadir=str(_faust_dir(settings) / "{conf.name}-data"), topic_replication_factor=replicas,
        producer_acks=-1, consumer_auto_offset_reset="earliest", autodiscover=False,
        consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
        producer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
        topic_partitions=settings.request_partitions,
        broker_session_timeout=settings.session_timeout_ms / 1000,
        broker_heartbeat_interval=settings.session_timeout_ms / 3000)
    app.transport.Consumer = TransactionalConsumer
    state = PipelineState(settings)
    app.task(_follow(state))
    app.task(_tend_memory(state))
    app.task(_health_gate(state))
    app.task(watch(state))
    for priority in settings.classes:
        topic = app.topic(settings.names.requests(priority), key_serializer="raw",
                          value_serializer="raw")
        app.agent(topic, name=f"admit-{priority.value}")(_admit_agent(app, state, priority))
    return app


def _record_limits(settings: PipelineSettings):
    """The largest record each topic may inflate to (transport/inflation.py): a request
    topic's class limit, ``MAX_MESSAGE_BYTES`` elsewhere."""
    limits = {settings.names.requests(p): settings.admission.of(p).max_payload_bytes
              for p in Priority}
    return lambda topic: limits.get(topic, MAX_MESSAGE_BYTES)


def _class_of(tp: TopicPartition, settings: PipelineSettings) -> Priority:
    return next(p for p in settings.classes if settings.names.requests(p) == tp.topic)


def _faust_dir(settings: PipelineSettings) -> Path:
    """Where faust keeps its (unused: no tables) app directory: under $KIP_HOME, not in
    whatever directory the process was started from."""
    return private_dir(settings.home / "faust")


def _follow(state: PipelineState):
    async def follow() -> None:
        await asyncio.gather(*(f.run() for f in state.followers))
    return follow


def _tend_memory(state: PipelineState):
    """Once the views have caught up, settle the collector (runtime/collector.py) and
    keep freed memory (runtime/allocator.py); then, every ``GIVE_BACK_EVERY_S``, give
    the freed heap back if enough large messages came (once per process, however many
    agents it runs)."""
    async def tend() -> None:
        await state.ready()
        collector.settle()
        allocator.keep_freed()
        while True:
            await asyncio.sleep(GIVE_BACK_EVERY_S)
            state.large_messages.give_back_if_due()
    return tend


def _health_gate(state: PipelineState):
    """Every ``HEALTH_GATE_S``: a canary doing worse than its stable version is rolled
    back (pipeline/health.py), the reason on the release record."""
    settings = state.settings

    async def gate() -> None:
        await state.ready()
        while True:
            await asyncio.sleep(HEALTH_GATE_S)
            for release in rollbacks(state.releases, state.capacity, settings.health_gate,
                                     now_ms()):
                log.warning("rolling back %s: %s", release.alias, release.reason)
                metrics.ROLLBACKS.inc()
                await publish_control(settings.kafka, settings.names.releases, release.alias,
                                      release.model_dump_json().encode())
                state.releases.apply(release.alias.encode(), release.model_dump_json().encode())
    return gate


def _admit_agent(app: faust.App, state: PipelineState, priority: Priority):
    settings = state.settings
    take = settings.rounds_of(priority)
    topic = settings.names.requests(priority)

    async def admit(stream):
        known_topics = state.known_topics.shared()
        transactions = _agent_transactions(app, state, priority)
        placement = WorkPlacement.of_class(priority)
        app.consumer.screen = state.screen   # sheds before the stream: pipeline/faust_adapter.py
        _follow_assignment(app, state, transactions, topic)
        log.info("agent waits for the control and telemetry views")
        await state.ready()
        log.info("agent admits requests")
        PROBES.set(agent_condition(priority), True, "admitting")
        try:
            await known_topics.current()   # read once now: the first request need not wait
            async for events in rounds(stream, *take):
                await state.claims.before_round(
                    {TopicPartition(e.message.topic, e.message.partition) for e in events},
                    transactions)
                state.large_messages.read(len(e.message.value or b"") for e in events)
                ctx = state.context(await known_topics.current(), known_topics, placement)
                decisions = await decide_round(events, ctx)
                decisions = traced(events, decisions, ctx.now_ms, app.conf.id, state.sealing)
                await publish(transactions, state, events, decisions)
        except Exception as exc:
            # Offsets of the failed round are not committed: a restart replays it.
            log.critical("pipeline agent failed, stopping the process: %r", exc)
            PROBES.set(agent_condition(priority), False, f"failed: {exc!r}"[:300])
            await app.crash(exc)
            raise
        finally:
            await state.claims.close(topic)
            await known_topics.close()
            await transactions.close()
    return admit


def _agent_transactions(app: faust.App, state: PipelineState, priority: Priority
                        ) -> PartitionTransactions:
    """The transactions of one agent's partitions (none of another agent's)."""
    settings = state.settings
    return PartitionTransactions(
        settings.kafka, app.conf.id, transaction_timeout_ms(settings.session_timeout_ms),
        owned=lambda tp: tp in app.consumer.assignment(),
        any_partition=settings.names.any_partition,
        chaining=state.sealing.chaining(settings.names.audit),
        keep_begun=priority == Priority.INTERACTIVE)


def _follow_assignment(app: faust.App, state: PipelineState,
                       transactions: PartitionTransactions, topic: str) -> None:
    """Claim the agent's partitions as they are assigned; on a revocation, stop claiming
    and drop each partition revoked (its ids, its producer)."""
    @app.on_partitions_revoked.connect
    async def release(sender, revoked, **kwargs) -> None:
        for tp in revoked:
            await state.claims.forget(TopicPartition(tp.topic, tp.partition))
            await transactions.release(TopicPartition(tp.topic, tp.partition))

    @app.on_partitions_assigned.connect
    async def claim(sender, assigned, **kwargs) -> None:
        state.claims.start({TopicPartition(tp.topic, tp.partition) for tp in assigned
                            if tp.topic == topic}, transactions)


async def decide_round(events: list, ctx: Context) -> list[Decision]:
    """Each event decided, in order; the event loop gets a turn after each
    ``DECIDE_SLICE`` events, so another agent in this process (interactive) waits
    behind at most a slice of a long round."""
    decisions: list[Decision] = []
    for start in range(0, len(events), DECIDE_SLICE):
        if start:
            await asyncio.sleep(0)
        decisions += [decide_safely(e.message.value, _origin(e.message), ctx)
                      for e in events[start:start + DECIDE_SLICE]]
    return decisions


def decide_safely(payload: bytes, origin: Origin, ctx: Context) -> Decision:
    """``decide``, with a defect turned into an INTERNAL rejection instead of a crash. A
    record without a value (a tombstone) is an empty, undecodable message."""
    payload = b"" if payload is None else payload
    try:
        return decide(payload, origin, ctx)
    except Exception as exc:
        log.exception("decide() failed on %s[%d]@%d (trace_id %s)", origin.topic,
                      origin.partition, origin.offset,
                      tracing.trace_id(origin.header(TRACE_HEADER)))
        return refuse_undecodable(payload, origin, Internal(f"pipeline defect: {exc!r}"), ctx,
                           request_sha256(payload))


def _origin(message) -> Origin:
    return Origin(message.topic, message.partition, message.offset, message.key,
                  tuple(message.headers or ()))


async def publish(transactions: PartitionTransactions, state: PipelineState, events: list,
                  decisions: list[Decision]) -> None:
    """Commit each input partition's outputs, with the ids it admitted, and its offset
    (the changed quota levels ride in the first transaction); count what was committed.
    The round's results (its rejections) share one signature."""
    names, sealing = state.settings.names, state.sealing
    entries: dict[TopicPartition, list[tuple[Entry, Decision]]] = {}
    signed = signed_records([d.outputs(names) for d in decisions], sealing)
    for event, d, outputs in zip(events, decisions, signed):
        m = event.message
        entry = Entry(m.offset, outputs)
        entries.setdefault(TopicPartition(m.topic, m.partition), []).append((entry, d))
    for tp, pairs in entries.items():
        pairs[-1][0].outputs.extend(state.admitted_records(tp) + _shed_record(tp, pairs, state))
    extra = state.changed_levels()
    if entries and extra:
        next(iter(entries.values()))[-1][0].outputs.extend(extra)
    done = await transactions.commit_each({tp: [e for e, _ in pairs]
                                           for tp, pairs in entries.items()})
    metrics.count_outcomes("pipeline", [
        (d.audit, d.audit.model_name or state.router.known(d.audit.model))
        for pairs, ok in zip(entries.values(), done) if ok for _, d in pairs
        if not isinstance(d, Shed)])


def _shed_record(tp: TopicPartition, pairs: list, state: PipelineState) -> list[Record]:
    """The audit record of what ``tp`` shed since its last (in the drain or in this
    round), if anything."""
    for entry, d in pairs:
        if isinstance(d, Shed):
            state.screen.note_shed(tp.topic, tp.partition, entry.offset, d.key)
    tally = state.screen.take_shed(tp.topic, tp.partition)
    if tally is None:
        return []
    audit = shed_record(tp.topic, tp.partition, tally, now_ms())
    return signed_records([[Output(state.settings.names.audit, audit)]], state.sealing)[0]


def run(settings: PipelineSettings) -> None:
    """Run the pipeline until SIGINT/SIGTERM (faust owns the event loop)."""
    if settings.nice:
        os.nice(settings.nice)
    allocator.pin_mmap_threshold()   # before anything is read: runtime/allocator.py
    tracing.configure("kip-pipeline")   # where OTEL_* asks: runtime/tracing.py
    brokers = asyncio.run(cluster_brokers(settings.kafka))
    app = create_app(settings, settings.replication(brokers).factor)
    metrics.serve(settings.metrics_port, settings.metrics_host)
    worker = _Worker(app, loglevel=settings.log_level, quiet=True)
    worker.execute_from_commandline()


class _Worker(faust.Worker):
    def on_setup_root_logger(self, logger, level: int) -> None:
        """Give the root logger the level asked for, and no terminal spinner. (faust
        leaves the root at NOTSET and adds a spinner handler at DEBUG, so every debug
        call in aiokafka would build and handle a log record on the hot path.)"""
        logger.setLevel(level)
