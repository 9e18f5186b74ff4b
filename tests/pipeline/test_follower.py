"""Following a compacted topic: a record that cannot be applied is skipped and counted,
and the records after it still are."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.control import ControlState, publish_control, quota_record
from pipeline.follower import TopicFollower
from pipeline.quota import TenantQuota
from runtime import metrics
from topics.admin import apply
from topics.catalogue import catalogue
from topics.names import TopicNames

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
