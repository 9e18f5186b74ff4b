"""Writing a transaction's records: where each goes, in as few batches as fit, beside
the offsets they answer; and stopping a producer that may be fenced.

transport/transactions.py takes these steps; each says here what it sends.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from kip.transport.aiokafka_adapter import internal_waiters, unkeyed_partition
from kip.transport.outputs import Record
from kip.transport.partitioning import key_partition, remember

log = logging.getLogger("kip.transactions")

Placement = Callable[[bytes | None], int]   # a record's key -> its partition
Placements = dict[str, Placement]   # by topic, for one transaction


async def placement(producer: AIOKafkaProducer, topic: str, anywhere: bool) -> Placement:
    """Where a record of ``topic`` goes in one transaction, by its key: a partition
    drawn at random for them all where ``anywhere``, else as ``producer.send`` would
    place it."""
    partitions = sorted(await producer.partitions_for(topic))
    if anywhere:
        chosen = random.choice(partitions)
        return lambda key: chosen
    available = list(producer.client.cluster.available_partitions_for_topic(topic) or ())
    return lambda key: (unkeyed_partition(producer, partitions, available) if key is None
                        else key_partition(key, partitions))


async def placed(producer: AIOKafkaProducer, topic: str, placements: Placements,
                 anywhere: Callable[[str], bool]) -> Placement:
    """The transaction's placement for ``topic``, chosen on first use (``anywhere``:
    which topics need no key placement)."""
    place = placements.get(topic)
    if place is None:
        place = placements[topic] = await placement(producer, topic, anywhere(topic))
    return place


async def by_partition(producer: AIOKafkaProducer, outputs: list[Record],
                       placements: Placements, anywhere: Callable[[str], bool]
                       ) -> dict[tuple[str, int], list[Record]]:
    """``outputs`` by topic and partition, in order: an explicit partition, else one
    partition per topic that needs no key placement, else the producer's partitioner
    over the key (as ``producer.send`` would place it), the keys hashed together first
    (``partitioning.remember``). ``placements``: those the transaction has chosen
    already."""
    remember([r.key for r in outputs if r.partition is None and r.key is not None])
    groups: dict[tuple[str, int], list[Record]] = {}
    for record in outputs:
        partition = record.partition
        if partition is None:   # looked up here: a coroutine per record costs more
            place = placements.get(record.topic) or await placed(
                producer, record.topic, placements, anywhere)
            partition = place(record.key)
        groups.setdefault((record.topic, partition), []).append(record)
    return groups


async def send_batches(producer: AIOKafkaProducer, topic: str, partition: int,
                       records: list[Record]) -> list[asyncio.Future]:
    """``records`` in as few record batches as fit (the producers' ``BATCH_BYTES``
    each), built here: one ``send_batch`` per batch instead of a ``send`` (a future, a
    metadata check, a partitioner call) per record. They leave in one produce request;
    with a ``send`` per record and aiokafka's 16 KiB batches, a round of work items
    left in many."""
    futures = []
    batch = producer.create_batch()
    for record in records:
        if batch.append(key=record.key, value=record.value, timestamp=None,
                        headers=record.headers) is None:   # full: a batch's first always fits
            futures.append(await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
            batch.append(key=record.key, value=record.value, timestamp=None,
                         headers=record.headers)
    futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures


async def send_outputs(producer: AIOKafkaProducer, groups: dict[tuple[str, int], list[Record]],
                       offsets: tuple[dict, str], beside: bool) -> None:
    """The produce of ``groups`` (records by topic and partition) and the
    TxnOffsetCommit of ``offsets`` (offsets, group id), both answered: side by side
    where the transaction has written the group's offsets already (``beside``), else
    the produce acknowledged first (the broker verifies a transaction's first write to
    a partition, and a verification that meets the offsets' fails the produce)."""
    sent: list[asyncio.Future] = []
    try:
        for (topic, partition), batch in groups.items():
            sent += await send_batches(producer, topic, partition, batch)
        if beside:
            await asyncio.gather(*sent, producer.send_offsets_to_transaction(*offsets))
        else:
            await asyncio.gather(*sent)
            await producer.send_offsets_to_transaction(*offsets)
    finally:
        for future in sent:   # their errors are the transaction's: already raised
            future.add_done_callback(retrieve)


async def wait_or_cancel(task: asyncio.Task) -> None:
    """Wait for ``task`` to end, whatever it raised; cancelled meanwhile, cancel it too."""
    try:
        await asyncio.wait([task])
    except asyncio.CancelledError:
        task.cancel()
        raise


def retrieve(future: asyncio.Future) -> None:
    """Read a future's error, so asyncio does not report it as never retrieved."""
    if not future.cancelled():
        future.exception()


async def stop_quietly(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5)
    except Exception as err:
        # A fenced producer's sender, cancelled by ``stop``, raises ProducerFenced from
        # a transactional request it awaits, and ``stop`` never reaches its client's
        # close: its connections would stay open. Close them here.
        log.info("producer stop: %r", err)
        try:
            await asyncio.wait_for(producer.client.close(), 5)
        except Exception as close_err:
            log.info("producer's client close: %r", close_err)
    # A fenced producer also fails aiokafka's internal waiters, which nobody awaits once
    # we drop the producer: the transaction's, and each unsent batch's drain waiter.
    # Read them so asyncio does not report them as lost.
    for waiter in internal_waiters(producer):
        if waiter.done():
            retrieve(waiter)
