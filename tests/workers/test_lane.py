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
