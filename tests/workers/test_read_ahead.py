"""The background lane reads one batch ahead: the next batch is decoded and queued for
the inference thread while the current one runs, and each partition's transactions
still commit in offset order, every request answered once."""

from __future__ import annotations

import asyncio

import pytest

from tests.workers.test_background_pull import _answered_from_one_partition, _worker_settings
from tests.workers.test_long_batches import _slowed
from kip.topics.names import TopicNames
from kip.workers.worker import Worker

pytestmark = pytest.mark.broker
REQUESTS, PULL, CALL_S = 16, 4, 0.2


@pytest.mark.timeout(120)
def test_the_next_batch_waits_in_line_and_commits_in_order(broker, registry, prefix,
                                                           tmp_path):
    names = TopicNames(prefix)

    async def scenario():
        settings = await _worker_settings(broker, registry, names, tmp_path, max_batch=PULL,
                                        background_pull=PULL, background_min_batch=PULL)
        async with Worker(settings) as worker:
            for session in worker.sessions.loaded.values():
                session.execute_documents = _slowed(session.execute_documents, CALL_S)
            commits, answering = _watch(worker)
            items, decoded = await _answered_from_one_partition(broker, registry, names,
                                                                settings, REQUESTS)
        assert sorted(r.request_id for r in decoded if r.status == "ok") == sorted(
            i.request.request_id for i in items)
        assert [first for first, _ in commits] == sorted(first for first, _ in commits)
        assert all(last + 1 == first for (_, last), (first, _) in zip(commits, commits[1:]))
        assert answering["most"] == 2, "no batch was read ahead"
    asyncio.run(scenario())


def _watch(worker: Worker) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """The background lane's commits (first and last offset, in call order) and the
    most batches it answered at once."""
    background = worker.lanes[1].transactions
    commits: list[tuple[int, int]] = []
    answering = {"now": 0, "most": 0}
    commit, process = background.commit, worker.process

    async def counted_commit(tp, entries):
        commits.append((entries[0].offset, entries[-1].offset))
        return await commit(tp, entries)

    async def counted_process(batch, lane, before=None):
        answering["now"] += 1
        answering["most"] = max(answering["most"], answering["now"])
        try:
            return await process(batch, lane, before)
        finally:
            answering["now"] -= 1
    background.commit = counted_commit
    worker.process = counted_process
    return commits, answering
