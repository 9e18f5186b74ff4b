"""A worker whose session prepares ahead (on CUDA by default; asked for here on CPU):
the background lane tokenizes its chunks in the lane's own thread, and every request is
answered once with the embedding its text gets alone."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from kip.schemas.messages import output_array
from kip.schemas.tensors import Tensor
from tests.workers.test_background_pull import _answered_from_one_partition, _worker_settings
from kip.topics.names import TopicNames
from kip.workers.session import ModelSession
from kip.workers.worker import Worker

pytestmark = pytest.mark.broker
REQUESTS, CALL = 12, 4
WORDS = "kip answers every request once while its workers keep the device busy".split() * 2


@pytest.mark.timeout(180)
def test_the_background_lane_tokenizes_ahead_in_its_own_thread(broker, registry, prefix,
                                                               tmp_path):
    names = TopicNames(prefix)
    texts = [" ".join(WORDS[:n]) for n in (3, 17, 5, 9, 2, 16, 4, 12, 7, 15, 6, 1)]

    async def scenario():
        settings = await _worker_settings(
            broker, registry, names, tmp_path, model="minilm", max_batch=REQUESTS,
            background_pull=REQUESTS, max_delay_ms=5_000, background_min_batch=CALL,
            background_max_batch=CALL)
        async with Worker(settings) as worker:
            threads = _watch_preparing(worker)
            items, decoded = await _answered_from_one_partition(
                broker, registry, names, settings, REQUESTS, [{"text": [t]} for t in texts])
        return items, decoded, threads
    items, decoded, threads = asyncio.run(scenario())
    by_id = {r.request_id: r for r in decoded}
    assert len(decoded) == REQUESTS and all(r.status == "ok" for r in decoded)
    assert sorted({r.timings.inference_started_at_ms: r.batch_size
                   for r in decoded}.values()) == [CALL] * (REQUESTS // CALL)
    assert threads and all(t.startswith("kip-prepare-background") for t in threads)
    alone = ModelSession(registry.load_alias("minilm"), device="cpu")
    for item, text in zip(items, texts):
        [[want]] = alone.run([[Tensor.text("text", [text])]])
        got = output_array(by_id[item.request.request_id], "embedding")
        np.testing.assert_allclose(got, want.array, atol=1e-5)


def _watch_preparing(worker: Worker) -> list[str]:
    """Ask the loaded session to prepare ahead; the threads its preparations ran in."""
    threads: list[str] = []
    for session in worker.sessions.loaded.values():
        assert not session.prepare_ahead   # on CPU, by default
        prepare = session.prepare

        def watched(requests, prepare=prepare):
            threads.append(threading.current_thread().name)
            return prepare(requests)
        session.prepare, session.prepare_ahead = watched, True
    return threads
