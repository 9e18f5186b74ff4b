"""Claiming request partitions on the real broker: at assignment, in the background;
a round waits for a claim running, claims again one that failed, and a partition
revoked mid-claim never has its ids loaded."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest
from aiokafka import TopicPartition

from kip.pipeline.claims import Claims
from kip.pipeline.replays import SeenRequests
from kip.schemas.codec import now_ms
from tests.transport.test_transactions import _create, _group_known
from kip.transport.transactions import PartitionTransactions

pytestmark = pytest.mark.broker
WINDOW_MS = 60_000


class CountedTransactions(PartitionTransactions):
    """Real transactions that count their claims, the first ``failing`` of them failing."""

    def __init__(self, *args, failing: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.claims, self.failing = 0, failing

    async def claim(self, tp: TopicPartition) -> None:
        self.claims += 1
        if self.claims <= self.failing:
            raise ConnectionError("the broker went away")
        await super().claim(tp)


async def _setting(broker, prefix: str, failing: int = 0):
    """An admitted-ids topic holding one id for partition 0, claims over it, and the
    request partition's transactions (its group known, as once assigned)."""
    admitted, tp = f"{prefix}.admitted", TopicPartition(f"{prefix}.requests", 0)
    await _create(broker.bootstrap, {admitted: 1, tp.topic: 1})
    producer = broker.kafka.producer()
    await producer.start()
    try:
        await producer.send_and_wait(admitted, orjson.dumps(
            {"ids": [["acme", "r-1", now_ms()]]}), key=b"0", partition=0)
    finally:
        await producer.stop()
    seen = SeenRequests(WINDOW_MS)
    tx = CountedTransactions(broker.kafka, f"{prefix}.g", 10_000, failing=failing)
    await _group_known(tx, tp)
    return Claims(broker.kafka, seen, lambda _: admitted), tx, tp


def test_an_assigned_partition_is_claimed_before_its_first_round(broker, prefix):
    async def scenario():
        claims, tx, tp = await _setting(broker, prefix)
        async with tx:
            claims.start({tp}, tx)
            assert tp in claims.running
            await asyncio.gather(*claims.running.values())
            assert ("acme", "r-1") in claims.seen.partitions[tp] and not claims.running
            await claims.before_round({tp}, tx)
            assert tx.claims == 1 and tp in tx._producers   # fenced once, not again
    asyncio.run(scenario())


@pytest.mark.parametrize("failing, claims_made", [(0, 1), (1, 2)],
                         ids=["waits-for-the-running-claim", "claims-again-after-a-failure"])
def test_a_round_starts_once_its_partitions_are_claimed(broker, prefix, caplog, failing,
                                                        claims_made):
    """A round waits for the claim running in the background; one that failed there
    is made again by the round."""
    async def scenario():
        claims, tx, tp = await _setting(broker, prefix, failing=failing)
        async with tx:
            claims.start({tp}, tx)
            await claims.before_round({tp}, tx)
            assert ("acme", "r-1") in claims.seen.partitions[tp]
            assert tx.claims == claims_made
    with caplog.at_level(logging.WARNING, logger="kip.pipeline"):
        asyncio.run(scenario())
    assert ("its first round claims it again" in caplog.text) == bool(failing)


def test_a_round_raises_what_its_own_claim_raises(broker, prefix):
    async def scenario():
        claims, tx, tp = await _setting(broker, prefix, failing=2)
        async with tx:
            claims.start({tp}, tx)
            with pytest.raises(ConnectionError):
                await claims.before_round({tp}, tx)
            assert tp not in claims.seen.partitions
    asyncio.run(scenario())


def test_a_partition_revoked_while_claimed_never_has_its_ids_loaded(broker, prefix):
    async def scenario():
        claims, tx, tp = await _setting(broker, prefix)
        async with tx:
            claims.start({tp}, tx)
            await asyncio.sleep(0)   # the claim has begun
            await claims.forget(tp)
            await tx.release(tp)
            await asyncio.sleep(0.5)
            assert tp not in claims.seen.partitions and not claims.running
            claims.start({tp}, tx)   # given back: claimed afresh
            await claims.before_round({tp}, tx)
            assert ("acme", "r-1") in claims.seen.partitions[tp]
    asyncio.run(scenario())
