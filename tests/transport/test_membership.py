"""Static membership on a real broker: a member that leaves on purpose hands its partitions
over within a second; one that dies and comes back inside its session timeout takes its
partitions back and the other member is never revoked."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import ConsumerRebalanceListener

from kip.topics.catalogue import TopicSpec
from kip.transport.admin import apply
from kip.transport.membership import leave

pytestmark = pytest.mark.broker
SESSION_TIMEOUT_MS = 10_000


class _Moves(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.revoked, self.assigned = 0, []

    async def on_partitions_revoked(self, revoked) -> None:
        self.revoked += 1

    async def on_partitions_assigned(self, assigned) -> None:
        self.assigned.append((time.monotonic(), {tp.partition for tp in assigned}))


async def _member(broker, topic: str, group: str, instance: str, moves: _Moves):
    consumer = broker.kafka.consumer(group_id=group, group_instance_id=instance,
                                     session_timeout_ms=SESSION_TIMEOUT_MS,
                                     heartbeat_interval_ms=500)
    consumer.subscribe([topic], listener=moves)
    await consumer.start()
    return consumer


async def _until(check, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def _polling(consumer, done: asyncio.Event) -> None:
    """A member takes part in rebalances only while it polls."""
    while not done.is_set():
        await consumer.getmany(timeout_ms=100)


def test_a_leave_moves_partitions_at_once_and_a_restart_moves_nothing(broker, prefix):
    topic, group = f"{prefix}.static", f"{prefix}-static"

    async def go() -> tuple[float, int, set[int], set[int]]:
        await apply(broker.kafka, [TopicSpec(topic, 4, "any", "test", {})])
        stays, goes = _Moves(), _Moves()
        done = asyncio.Event()
        a = await _member(broker, topic, group, "worker-a", stays)
        polls = [asyncio.create_task(_polling(a, done))]
        await _until(lambda: stays.assigned and len(stays.assigned[-1][1]) == 4)
        b = await _member(broker, topic, group, "worker-b", goes)
        polls.append(asyncio.create_task(_polling(b, done)))
        await _until(lambda: goes.assigned and len(stays.assigned[-1][1]) == 2)
        kept, revoked_before = goes.assigned[-1][1], stays.revoked

        await b.stop()   # dies without a word, as a killed process does
        polls[1].cancel()
        b = await _member(broker, topic, group, "worker-b", goes)   # back within 10 s
        polls[1] = asyncio.create_task(_polling(b, done))
        await _until(lambda: len(goes.assigned) == 2)
        await asyncio.sleep(2)   # any rebalance would have reached the other member by now
        restart_revoked = stays.revoked - revoked_before

        polls[1].cancel()
        await b.stop()
        left = time.monotonic()
        assert await leave(broker.kafka, group, "worker-b")
        await _until(lambda: len(stays.assigned[-1][1]) == 4)
        handed_over_s = stays.assigned[-1][0] - left
        done.set()
        await asyncio.gather(*polls, return_exceptions=True)
        await a.stop()
        return handed_over_s, restart_revoked, kept, goes.assigned[-1][1]

    handed_over_s, restart_revoked, kept, again = asyncio.run(go())
    assert restart_revoked == 0 and again == kept
    assert handed_over_s < 1.0, handed_over_s


def test_leaving_a_group_the_member_already_left_is_no_error(broker, prefix):
    assert asyncio.run(leave(broker.kafka, f"{prefix}-nobody", "worker-z"))
