"""The faust-streaming adapter: requests topics -> ``decide`` -> work / result topics.

Delivery: at-least-once. A round of up to ``take_max`` events is decided, every output
(work item or result, audit record, dead letter) is produced, and the round waits for
all acknowledgements (acks=all) before faust may commit the round's offsets.
"""

from __future__ import annotations

import asyncio
import logging

import faust

from kip import metrics
from pipeline.access import AccessConfig
from pipeline.decide import Context, Decision, Forward, Origin, decide, undecodable
from schemas.errors import Internal
from pipeline.reply_topics import ReplyTopics
from pipeline.routing import Router
from pipeline.settings import PipelineSettings
from schemas.codec import encode, headers, now_ms
from schemas.messages import DeadLetterRecord, WorkItem
from topics.names import PRIORITIES, TopicNames

log = logging.getLogger("kip.pipeline")


def create_app(settings: PipelineSettings) -> faust.App:
    app = faust.App(
        f"{settings.topic_prefix}-pipeline", broker=f"kafka://{settings.bootstrap}",
        store="memory://", web_enabled=False, topic_replication_factor=1,
        producer_acks=-1, consumer_auto_offset_reset="earliest", autodiscover=False)
    access = AccessConfig.from_file(settings.access_file)
    router = Router(_registry(settings))
    for priority in PRIORITIES:
        topic = app.topic(settings.names.requests(priority), key_serializer="raw",
                          value_serializer="raw")
        app.agent(topic, name=f"admit-{priority.value}")(
            _admit_agent(app, settings, access, router))
    return app


def _registry(settings: PipelineSettings):
    from kip.registry import Registry
    return Registry(settings.registry_dir)


def _admit_agent(app: faust.App, settings: PipelineSettings, access: AccessConfig,
                 router: Router):
    async def admit(stream):
        reply_topics = ReplyTopics(settings.bootstrap, settings.names)
        try:
            async for events in stream.take_events(settings.take_max,
                                                   within=settings.take_within_s):
                ctx = Context(access, router, settings.names, now_ms(),
                              settings.replay_window_ms, await reply_topics.current())
                decisions = [decide_safely(e.message.value, _origin(e.message), ctx)
                             for e in events]
                await publish(app.producer, settings.names, decisions)
        except Exception as exc:
            # Offsets of the failed round are not committed: a restart replays it.
            log.critical("pipeline agent failed, stopping the process: %r", exc)
            await app.crash(exc)
            raise
        finally:
            await reply_topics.close()
    return admit


def decide_safely(payload: bytes, origin: Origin, ctx: Context) -> Decision:
    """``decide``, with a defect turned into an INTERNAL rejection instead of a crash."""
    try:
        return decide(payload, origin, ctx)
    except Exception as exc:
        log.exception("decide() failed on %s[%d]@%d", origin.topic, origin.partition,
                      origin.offset)
        return undecodable(payload, origin, Internal(f"pipeline defect: {exc!r}"), ctx)


def _origin(message) -> Origin:
    return Origin(message.topic, message.partition, message.offset)


async def publish(producer, names: TopicNames, decisions: list[Decision]) -> None:
    """Produce every output of every decision, then wait for all acknowledgements."""
    futures = []
    for d in decisions:
        for topic, message, trace in _outputs(names, d):
            futures.append(await producer.send(
                topic, message_key(message), encode(message), None, None, headers(message, trace)))
    await asyncio.gather(*futures)
    for d in decisions:
        _count(d)


def message_key(message) -> bytes:
    """Dead letters are keyed by origin topic; everything else by request id."""
    if isinstance(message, DeadLetterRecord):
        return message.origin_topic.encode()
    if isinstance(message, WorkItem):
        return message.request.request_id.encode()
    return message.request_id.encode()


def _outputs(names: TopicNames, d: Decision):
    trace = d.audit.traceparent
    if isinstance(d, Forward):
        yield d.topic, d.work, trace
    else:
        yield d.reply_to, d.result, trace
        if d.deadletter is not None:
            yield names.deadletter, d.deadletter, None
    yield names.audit, d.audit, trace


def _count(d: Decision) -> None:
    a = d.audit
    outcome = "routed" if isinstance(d, Forward) else a.decision
    metrics.count("pipeline", outcome, a.error_code, a.priority, a.model_name or a.model)


def run(settings: PipelineSettings) -> None:
    """Run the pipeline until SIGINT/SIGTERM (faust owns the event loop)."""
    app = create_app(settings)
    metrics.serve(settings.metrics_port)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    worker.execute_from_commandline()
