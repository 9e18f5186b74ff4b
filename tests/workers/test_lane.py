"""A lane's commits in flight: ``settle`` raises what they raised, finished or not."""

from __future__ import annotations

import asyncio

import pytest

from kip.workers.lane import Lane


def _lane() -> Lane:
    """A lane with nothing but its commits in flight (``settle`` reads nothing else)."""
    return Lane("interactive", "minilm", consumer=None, executor=None, preparer=None,
                transactions=None, sealing=None, names=None, answered=None)


def test_settle_raises_what_a_finished_commit_raised():
    async def scenario():
        lane = _lane()

        async def defect():
            raise RuntimeError("a commit's defect")
        task = asyncio.create_task(defect())
        await asyncio.wait([task])
        lane.committing.append(task)
        with pytest.raises(RuntimeError, match="defect"):
            await lane.settle()
        assert lane.committing == []
    asyncio.run(scenario())


def test_settle_waits_for_a_commit_still_in_flight():
    async def scenario():
        lane, committed = _lane(), asyncio.Event()
        done = asyncio.create_task(asyncio.sleep(0))
        await done
        lane.committing += [done, asyncio.create_task(committed.wait())]
        settling = asyncio.create_task(lane.settle())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not settling.done()
        committed.set()
        await asyncio.wait_for(settling, 1)
    asyncio.run(scenario())


def test_a_transaction_begun_early_holds_every_partition_its_commit_writes():
    """Results, audit records and the answered ids: a partition the commit must add first
    costs it a round trip (transport/transactions.py)."""
    from types import SimpleNamespace

    from aiokafka import TopicPartition

    from kip.topics.names import TopicNames
    from tests.workers.test_endings import _item

    begun = {}
    names = TopicNames("t")
    lane = Lane("interactive", "digits", consumer=None, executor=None, preparer=None,
                transactions=SimpleNamespace(begin_early=begun.__setitem__), sealing=None,
                names=names, answered=None)
    item = _item()
    record = SimpleNamespace(topic="t.work.digits.interactive", partition=2)
    lane.begin_early([(record, item)])
    key = item.request.request_id.encode()
    assert begun == {TopicPartition("t.work.digits.interactive", 2): [
        (names.answered("digits", item.request.priority), 2), (names.results, key),
        (names.audit, key)]}
