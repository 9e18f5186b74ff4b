"""Following a compacted topic: a record that cannot be applied is skipped and counted,
and the records after it still are."""

from __future__ import annotations

import asyncio
import time

import pytest

from kip.pipeline.control import ControlState, publish_control, quota_record
from kip.runtime.follower import TopicFollower
from kip.pipeline.quota import TenantQuota
from kip.runtime import metrics
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.transport.fetch_waits import FOLLOWING_FETCH_MAX_WAIT_MS
from kip.topics.names import TopicNames

pytestmark = pytest.mark.broker


def test_an_unusable_control_record_is_counted_and_skipped(broker, prefix):
    names = TopicNames(prefix)
    asyncio.run(apply(broker.kafka, catalogue(names, [], 1)))
    counted = metrics.UNUSABLE_RECORDS.labels(names.control)
    before = counted._value.get()

    async def go() -> tuple[ControlState, int]:
        await publish_control(broker.kafka, names.control, "quota:bad", b'{"tenant": 7}')
        key, value = quota_record(TenantQuota(tenant="good", requests_per_s=5))
        await publish_control(broker.kafka, names.control, key, value)
        state = ControlState()
        follower = TopicFollower(broker.kafka, names.control, state.apply)
        task = asyncio.create_task(follower.run())
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return state, follower.skipped
    state, skipped = asyncio.run(go())
    assert list(state.quotas) == ["good"] and skipped == 1
    assert counted._value.get() == before + 1


def test_a_record_after_catching_up_is_applied_at_once_despite_the_long_wait(broker, prefix):
    """Once caught up, a follower's fetch may wait 5 s at the broker; it asks for every
    partition of its topic, so a new record answers it at once."""
    names = TopicNames(prefix)
    asyncio.run(apply(broker.kafka, catalogue(names, [], 1)))

    async def go() -> float:
        state = ControlState()
        follower = TopicFollower(broker.kafka, names.control, state.apply)
        task = asyncio.create_task(follower.run())
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 30)
            await asyncio.sleep(1)   # a long fetch is in flight now
            key, value = quota_record(TenantQuota(tenant="later", requests_per_s=5))
            published = time.monotonic()
            await publish_control(broker.kafka, names.control, key, value)
            while "later" not in state.quotas:
                await asyncio.sleep(0.01)
            return time.monotonic() - published
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    took_s = asyncio.run(asyncio.wait_for(go(), 30))
    assert took_s < FOLLOWING_FETCH_MAX_WAIT_MS / 1000 / 2, f"applied after {took_s:.2f} s"
