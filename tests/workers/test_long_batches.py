"""A batch whose inference outlasts the session timeout: heartbeats keep flowing (the
inference runs in a thread), the worker keeps its partitions and the result is
committed once."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer

from kip.runtime import metrics
from kip.schemas.codec import encode, headers, now_ms
from kip.schemas.messages import InferenceResult, Priority, Route, WorkItem
from kip.schemas.stamps import stamped
from tests.e2e.conftest import read_topic
from tests.pipeline.conftest import signer
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames
from kip.workers.settings import WorkerSettings
from kip.workers.worker import Worker

pytestmark = pytest.mark.broker
SESSION_TIMEOUT_MS = 6_000        # the broker's minimum
INFERENCE_S = 10.0                # well past it


def _work_item(registry, names: TopicNames, model: str = "digits",
               inputs: dict | None = None) -> WorkItem:
    manifest = registry.resolve(model).manifest
    request = signer(topic_prefix=names.prefix).request(
        model, inputs or {"pixels": np.zeros((1, 64), np.float32)}, priority="standard",
        deadline_ms=now_ms() + 120_000)
    route = Route(alias=model, model_name=manifest.name, model_version=manifest.version,
                  artifact_sha256=manifest.artifact_sha256)
    return WorkItem(request=request, route=route, routed_at_ms=now_ms(),
                    deadline_ms=request.deadline_ms, work_partition=0)


def _slowed(run, seconds: float = INFERENCE_S):
    def slow(batch):
        time.sleep(seconds)
        return run(batch)
    return slow


def _revoked(group: str) -> float:
    return metrics.PARTITIONS_REVOKED.labels(group)._value.get()


@pytest.mark.timeout(120)
def test_inference_longer_than_the_session_timeout_keeps_the_partitions(broker, registry,
                                                                        prefix, tmp_path):
    names = TopicNames(prefix)

    async def scenario():
        await apply(broker.kafka, catalogue(names, ["digits"]))
        settings = WorkerSettings(home=tmp_path, bootstrap=broker.bootstrap,
                                  topic_prefix=prefix, registry_dir=registry.root,
                                  model="digits", session_timeout_ms=SESSION_TIMEOUT_MS)
        settings.ensure_keys()
        async with Worker(settings) as worker:
            for session in worker.sessions.loaded.values():
                session.execute_documents = _slowed(session.execute_documents)
            group = names.worker_group("digits")
            revoked_before = _revoked(group)
            item = stamped(_work_item(registry, names), settings.stamp_keys())
            async with AIOKafkaProducer(bootstrap_servers=broker.bootstrap) as producer:
                await producer.send_and_wait(names.work("digits", Priority.STANDARD),
                                             encode(item), partition=0, headers=headers(item))
            for _ in range(60):
                results = await read_topic(broker.kafka, names.results)
                if results:
                    break
                await asyncio.sleep(1)
            await asyncio.sleep(2)   # a second result would show up now
            results = await read_topic(broker.kafka, names.results)
            assert _revoked(group) == revoked_before, "the worker lost its partitions"
        decoded = [InferenceResult.model_validate_json(r.value) for r in results]
        assert [(r.request_id, r.status) for r in decoded] == [(item.request.request_id, "ok")]
        assert decoded[0].timings.inference_ms >= INFERENCE_S * 1000
    asyncio.run(scenario())
