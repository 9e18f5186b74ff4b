"""The background lane's pull: more records than one call takes are answered in calls of
at most ``max_batch`` and committed together, in one transaction per input partition."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from kip.schemas.codec import encode, headers
from kip.schemas.messages import InferenceResult, Priority, WorkItem
from kip.schemas.stamps import stamped
from tests.e2e.conftest import read_topic
from tests.workers.test_long_batches import _work_item
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames
from kip.workers.settings import WorkerSettings
from kip.workers.worker import Worker

pytestmark = pytest.mark.broker
REQUESTS, CALL, PULL = 12, 4, 12


@pytest.mark.timeout(120)
def test_a_pull_runs_in_calls_of_max_batch_and_commits_once(broker, registry, prefix,
                                                            tmp_path):
    names = TopicNames(prefix)

    async def scenario():
        settings = await _worker_settings(broker, registry, names, tmp_path, max_batch=CALL,
                                        background_pull=PULL, max_delay_ms=5_000,
                                        background_min_batch=CALL)
        async with Worker(settings) as worker:
            background = worker.lanes[1].transactions
            commits, commit = [], background.commit

            async def counted(tp, entries):
                commits.append(len(entries))
                return await commit(tp, entries)
            background.commit = counted
            items, decoded = await _answered_from_one_partition(broker, registry, names,
                                                                settings, REQUESTS)
        assert sorted(r.request_id for r in decoded if r.status == "ok") == sorted(
            i.request.request_id for i in items)
        calls = {r.timings.inference_started_at_ms: r.batch_size for r in decoded}
        assert sorted(calls.values()) == [CALL] * (REQUESTS // CALL)
        assert commits == [REQUESTS]
    asyncio.run(scenario())


async def _worker_settings(broker, registry, names: TopicNames, home, model: str = "digits",
                         **options) -> WorkerSettings:
    """The topics, and settings for a worker of ``model`` (digits) on them."""
    await apply(broker.kafka, catalogue(names, [model]))
    settings = WorkerSettings(home=home, bootstrap=broker.bootstrap, topic_prefix=names.prefix,
                              registry_dir=registry.root, model=model, **options)
    settings.ensure_keys()
    return settings


async def _answered_from_one_partition(broker, registry, names: TopicNames,
                                       settings: WorkerSettings, count: int,
                                       inputs: list[dict] | None = None
                                       ) -> tuple[list[WorkItem], list[InferenceResult]]:
    """``count`` standard work items (digits, or ``settings.model`` with ``inputs``)
    sent to partition 0, and the results read back once there are as many (or after
    30 s)."""
    items = [stamped(_work_item(registry, names, settings.model, inputs and inputs[i]),
                     settings.stamp_keys()) for i in range(count)]
    async with AIOKafkaProducer(bootstrap_servers=broker.bootstrap) as producer:
        for item in items:
            await producer.send(names.work(settings.model, Priority.STANDARD), encode(item),
                                partition=0, headers=headers(item))
    for _ in range(60):
        results = await read_topic(broker.kafka, names.results)
        if len(results) >= count:
            break
        await asyncio.sleep(0.5)
    return items, [InferenceResult.model_validate_json(r.value) for r in results]
