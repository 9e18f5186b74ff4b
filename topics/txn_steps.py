"""Steps of a Kafka transaction that aiokafka's producer takes only inside its own calls,
taken here one at a time and awaited (``topics.transactions`` says why each must go
alone), and the clearing up after a dropped producer or a cancelled step.

All of it leans on aiokafka 0.14's internals (the sender's handlers, the transaction
manager's state): tests/topics/test_transactions.py checks the requests each step sends.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import aiokafka.errors as Errors
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.client import CoordinationType
from aiokafka.errors import KafkaError
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.producer.sender import AddOffsetsToTxnHandler
from aiokafka.structs import OffsetAndMetadata

from topics.clients import KafkaConnection
from topics.outputs import Record
from topics.partitioning import key_partition, remember

log = logging.getLogger("kip.transactions")

# How often a step looks whether the sender has had its AddPartitionsToTxn answered
# (aiokafka keeps no future for it); a step waits a round trip, a millisecond or two.
ADDED_POLL_S = 0.0002
CONCURRENT_RETRY_S = 0.001   # the first retry of CONCURRENT_TRANSACTIONS; doubled after

Placement = Callable[[bytes | None], int]   # a record's key -> its partition
Placements = dict[str, Placement]   # by topic, for one transaction


def transaction_timeout_ms(session_timeout_ms: int) -> int:
    """Two thirds of the consumer session timeout. A paused owner's open transaction is
    then aborted by the broker before its partitions can move to a new owner, so
    read_committed readers of the output topics are never held up by a zombie."""
    return session_timeout_ms * 2 // 3


@dataclass
class Entry:
    """One input record's offset and every record it produces."""

    offset: int
    outputs: list[Record] = field(default_factory=list)


async def placement(producer: AIOKafkaProducer, topic: str, anywhere: bool) -> Placement:
    """Where a record of ``topic`` goes in one transaction, by its key: a partition
    drawn at random for them all where ``anywhere``, else as ``producer.send`` would
    place it."""
    partitions = sorted(await producer.partitions_for(topic))
    if anywhere:
        chosen = random.choice(partitions)
        return lambda key: chosen
    available = list(producer.client.cluster.available_partitions_for_topic(topic) or ())
    return lambda key: (producer._partitioner(None, partitions, available) if key is None
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


async def add_group(producer: AIOKafkaProducer, group_id: str) -> None:
    """AddOffsetsToTxn for ``group_id``, answered: the commit's
    ``send_offsets_to_transaction`` then sends TxnOffsetCommit alone."""
    sender, txn = producer._sender, producer._txn_manager
    retry_s = CONCURRENT_RETRY_S
    while True:
        node_id = await sender._find_coordinator(CoordinationType.TRANSACTION,
                                                 txn.transactional_id)
        if await _AddGroup(sender, group_id, retry_s).do(node_id):
            break   # else a retriable error, and its backoff waited
        retry_s = min(2 * retry_s, sender._retry_backoff)
    if not txn.is_in_transaction():   # refused (the group's ACL)
        raise KafkaError(f"adding group {group_id} to the transaction failed")


class _AddGroup(AddOffsetsToTxnHandler):
    """aiokafka's AddOffsetsToTxn step, retried sooner while the coordinator is still
    writing the last transaction's markers (CONCURRENT_TRANSACTIONS): a kept
    transaction, or a commit right behind the last, begins right after a commit, and
    the markers take a millisecond or so where the producer's backoff is 10 ms. The
    retries back off to that 10 ms, so a busy broker, slow to write markers, is not
    asked every millisecond."""

    def __init__(self, sender, group_id: str, concurrent_retry_s: float) -> None:
        super().__init__(sender, group_id)
        self.concurrent_retry_s = concurrent_retry_s

    def handle_response(self, resp):
        if Errors.for_code(resp.error_code) is Errors.ConcurrentTransactions:
            return self.concurrent_retry_s
        return super().handle_response(resp)


async def add_partitions(producer: AIOKafkaProducer, partitions: list[TopicPartition]
                         ) -> None:
    """AddPartitionsToTxn for those of ``partitions`` the transaction lacks, answered."""
    txn = producer._txn_manager
    for tp in partitions:
        txn.maybe_add_partition_to_txn(tp)   # the sender sends them in one request
    while txn.partitions_to_add() and txn.is_in_transaction():
        await asyncio.sleep(ADDED_POLL_S)
    if not txn.is_in_transaction():
        raise broken(producer, "while its partitions were added")


def broken(producer: AIOKafkaProducer, when: str) -> KafkaError:
    """What broke the producer's transaction off (fenced, refused), to raise."""
    ended = producer._txn_manager.wait_for_transaction_end()
    cause = ended.exception() if ended.done() and not ended.cancelled() else None
    return cause if isinstance(cause, KafkaError) else KafkaError(
        f"the transaction broke off {when}: {cause!r}")


class CommittedOffsets:
    """A group's committed offsets and their metadata, read through one admin client
    that starts on first use; callers at once (partitions claimed together) share it."""

    def __init__(self, kafka: KafkaConnection, group_id: str) -> None:
        self.kafka, self.group_id = kafka, group_id
        self._admin: AIOKafkaAdminClient | None = None
        self._starting = asyncio.Lock()

    async def position(self, tp: TopicPartition) -> OffsetAndMetadata:
        """The committed offset for ``tp`` (0 when it has none) and its metadata."""
        async with self._starting:
            if self._admin is None:
                self._admin = self.kafka.admin()   # before it starts: ``close`` sees it
                await self._admin.start()
        return await committed_position(self._admin, self.group_id, tp)

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()


async def committed_position(admin: AIOKafkaAdminClient, group_id: str, tp: TopicPartition
                             ) -> OffsetAndMetadata:
    """``group_id``'s committed offset for ``tp`` (0 when it has none), and the metadata
    committed with it."""
    offsets = await admin.list_consumer_group_offsets(group_id, partitions=[tp])
    found = offsets.get(tp)
    if found is None or found.offset < 0:
        return OffsetAndMetadata(0, "")
    return OffsetAndMetadata(found.offset, found.metadata or "")


async def send_batches(producer: AIOKafkaProducer, topic: str, partition: int,
                       records: list[Record]) -> list[asyncio.Future]:
    """``records`` in as few record batches as fit (the producers' ``BATCH_BYTES``
    each), built here: one ``send_batch`` per batch instead of a ``send`` (a future, a
    metadata check, a partitioner call) per record. They leave in one produce request;
    with a ``send`` per record and aiokafka's 16 KiB batches, a round of work items left
    in ~12."""
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
    the produce acknowledged first (``topics.transactions`` says why)."""
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
    for waiter in _internal_waiters(producer):
        if waiter.done():
            retrieve(waiter)


def _internal_waiters(producer: AIOKafkaProducer) -> list[asyncio.Future]:
    """aiokafka 0.14's internal futures that fail with a fenced producer."""
    waiters = [getattr(producer._txn_manager, "_transaction_waiter", None)]
    accumulator = getattr(producer, "_message_accumulator", None)
    for batches in getattr(accumulator, "_batches", {}).values():
        waiters += [getattr(batch, "_drain_waiter", None) for batch in batches]
    return [w for w in waiters if w is not None]
