"""Claiming a request partition before its first request is decided.

To claim a partition, the pipeline fences its previous owner (the broker aborts that
owner's open transaction), then reads back the ids admitted from it within twice the
replay window (pipeline/replays.py: a request may be issued up to one window ahead of
the clock). Only then may a round decide the partition's requests.

A new assignment is claimed at once, in the background, as a worker's lanes claim
theirs, so the first request on a partition does not wait for those round trips. A round whose partitions are
still being claimed waits for their claims; one whose claim failed in the background
claims it again itself, and raises what that raises. A partition revoked while it is
being claimed stops being claimed before it is forgotten, so ids read for an owner
that no longer owns it are never loaded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import TopicPartition

from kip.pipeline.replays import SeenRequests, read_admitted
from kip.schemas.codec import now_ms
from kip.transport.clients import KafkaConnection
from kip.transport.transactions import PartitionTransactions

log = logging.getLogger("kip.pipeline")


class Claims:
    """The partitions being claimed, and how to claim one."""

    def __init__(self, kafka: KafkaConnection, seen: SeenRequests,
                 admitted_topic: Callable[[TopicPartition], str]) -> None:
        self.kafka, self.seen, self.admitted_topic = kafka, seen, admitted_topic
        self.running: dict[TopicPartition, asyncio.Task] = {}

    def start(self, tps: set[TopicPartition], transactions: PartitionTransactions) -> None:
        """Begin claiming each of ``tps`` not claimed yet, in the background."""
        for tp in tps - self.seen.partitions.keys() - self.running.keys():
            task = asyncio.create_task(self._claim(tp, transactions), name=f"claim {tp}")
            self.running[tp] = task
            task.add_done_callback(lambda done, tp=tp: self._ended(tp, done))

    async def before_round(self, tps: set[TopicPartition],
                           transactions: PartitionTransactions) -> None:
        """Every one of ``tps`` claimed: wait for the claims running, make the missing."""
        running = [self.running[tp] for tp in tps if tp in self.running]
        if running:
            await asyncio.gather(*running, return_exceptions=True)   # failed: again below
        for tp in tps - self.seen.partitions.keys():
            await self._claim(tp, transactions)

    async def forget(self, tp: TopicPartition) -> None:
        """``tp`` is no longer ours: stop claiming it, and drop the ids it had."""
        task = self.running.pop(tp, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.seen.drop(tp)

    async def close(self, topic: str) -> None:
        """Stop claiming ``topic``'s partitions (its agent stops)."""
        for tp in [tp for tp in self.running if tp.topic == topic]:
            await self.forget(tp)

    async def _claim(self, tp: TopicPartition, transactions: PartitionTransactions) -> None:
        await transactions.claim(tp)
        since = now_ms() - 2 * self.seen.window_ms
        entries = await read_admitted(self.kafka, self.admitted_topic(tp), tp.partition,
                                      since)
        self.seen.load(tp, entries, now_ms())
        log.info("%s: %d admitted ids in the replay window", tp, len(entries))

    def _ended(self, tp: TopicPartition, task: asyncio.Task) -> None:
        if self.running.get(tp) is task:
            del self.running[tp]
        if not task.cancelled() and task.exception() is not None:
            log.warning("claiming %s on assignment failed (its first round claims it "
                        "again): %r", tp, task.exception())
