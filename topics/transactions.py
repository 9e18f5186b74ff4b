"""Exactly-once output: one Kafka transaction per input partition and round.

A stage (pipeline or worker) reads records, computes their outputs, and hands them here
grouped by input partition. For each partition one transaction carries the outputs and
the partition's next offset for the stage's consumer group, so a read_committed reader
sees the outputs exactly when the input counts as consumed: never twice, never lost.

aiokafka has no KIP-447 (fencing by consumer-group generation), so we use the older
scheme Kafka Streams used: the transactional id names the *input partition*
(``<group>.<topic>.<partition>``). Whoever owns the partition owns that id; when a new
owner's producer starts, the broker bumps the id's epoch, aborts the old owner's open
transaction and fences the old producer. A paused worker that wakes up (a zombie) gets
``ProducerFenced`` on its next commit and its outputs never become visible.

Fencing alone leaves one race: the new owner may read the committed offset *before* it
fences a zombie that commits in between. So every fresh producer, once it has fenced,
reads the committed offset again (the *floor*) and drops input below it: those records
were already answered. The same check makes a retried commit idempotent: if the
broker committed the transaction but the reply was lost, the rebuilt producer finds the
offset already moved and sends nothing.

A commit is five round trips one after another: AddPartitionsToTxn, the produce,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn. The produce waits for its acknowledgement
before the offsets go: the broker (KIP-890) verifies a transactional produce with the
transaction coordinator, and a verification that meets another request of the same
transactional id there (AddOffsetsToTxn's state change, TxnOffsetCommit's own
verification) fails the produce with NOT_ENOUGH_REPLICAS, which the producer retries
after its backoff: overlapped, about one commit in twenty took 10 ms longer
(docs/benchmarks.md). A stage that knows where its outputs will go before it has them
(a worker, once it has decoded a batch, while its inference runs) can ``begin_early``:
the transaction begins, AddOffsetsToTxn is answered and then its partitions are added
meanwhile, one request at a time, and the commit is left with the produce,
TxnOffsetCommit and EndTxn. Adding a partition or the group writes nothing to a topic,
so a transaction begun early holds no reader back; one its commit does not use is
aborted, and one that broke meanwhile fails the commit as a fenced one does.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from topics.clients import KafkaConnection
from schemas.audit_chain import ChainHead
from topics.outputs import Chaining, Record
from topics.partitioning import key_partition

log = logging.getLogger("kip.transactions")

RETRY_BACKOFF_S = 0.5
# A transaction that begins right after the previous one on the same producer often
# gets CONCURRENT_TRANSACTIONS (the broker is still writing the previous markers), and
# aiokafka retries AddOffsetsToTxn and EndTxn after retry_backoff_ms, 100 ms by
# default: every such retry would add 100 ms to the requests in the transaction.
TXN_RETRY_BACKOFF_MS = 10

Placement = Callable[[bytes | None], int]   # a record's key -> its partition
Placements = dict[str, Placement]           # by topic, for one transaction


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


class PartitionTransactions:
    """Transactional producers keyed by input partition, for one consumer group.

    ``owned(tp)`` tells whether the stage still owns a partition; a commit that keeps
    failing gives up once it does not, and leaves the records to the new owner.

    ``any_partition(topic)`` tells which output topics need no key placement: a
    transaction puts all of its records of such a topic in one partition, picked at
    random. Each partition a transaction touches costs the broker a marker write, and
    a reader downstream can then commit a batch of them in one transaction.

    With ``chaining``, each partition's producer is a writer of audit records with a
    hash chain of its own (schemas/audit_chain.py): its head rides as the metadata of
    the partition's committed offset, so the next owner continues it.
    """

    def __init__(self, kafka: KafkaConnection, group_id: str, timeout_ms: int,
                 owned: Callable[[TopicPartition], bool] = lambda tp: True,
                 any_partition: Callable[[str], bool] = lambda topic: False,
                 chaining: Chaining | None = None) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.timeout_ms = timeout_ms
        self.owned = owned
        self.any_partition = any_partition
        self.chaining = chaining
        self._producers: dict[TopicPartition, AIOKafkaProducer] = {}
        self._floor: dict[TopicPartition, int] = {}
        self._heads: dict[TopicPartition, ChainHead] = {}
        self._admin: AIOKafkaAdminClient | None = None
        self._committing: set[TopicPartition] = set()
        self._beginning: dict[TopicPartition, asyncio.Task] = {}
        self._begun: dict[TopicPartition, Placements] = {}   # placements chosen early

    def transactional_id(self, tp: TopicPartition) -> str:
        return f"{self.group_id}.{tp.topic}.{tp.partition}"

    async def commit(self, tp: TopicPartition, entries: list[Entry]) -> bool:
        """Publish ``entries`` and consume them, atomically. False: the partition went
        to another owner before we could, and nothing of ``entries`` is ours to commit.

        Any failure (fenced, timed out, broker gone) drops the producer; while we still
        own the partition, a fresh one fences whoever else holds the id, reads the floor
        and tries again. Retrying cannot publish twice: the floor skips what is done. No
        producer is built for a partition we no longer own (after a failure here or in
        a transaction begun early): it would fence the partition's new owner.
        """
        self._committing.add(tp)
        try:
            while True:
                if tp not in self._producers and not self.owned(tp):
                    return False
                try:
                    await asyncio.wait_for(self._attempt(tp, entries), self.timeout_ms / 1000)
                    return True
                except (KafkaError, asyncio.TimeoutError, OSError) as err:
                    fenced = isinstance(err, ProducerFenced)
                    log.warning("transaction for %s %s; dropping its producer", tp,
                                "fenced by another owner" if fenced else f"failed ({err!r})")
                    await self.release(tp)
                    if self.owned(tp):
                        await asyncio.sleep(RETRY_BACKOFF_S)
        finally:
            self._committing.discard(tp)

    def begin_early(self, tp: TopicPartition, destinations: list[tuple[str, bytes | None]]
                    ) -> None:
        """Begin ``tp``'s next transaction now, in the background, with the stage's group
        and the partitions that records of ``destinations`` (topic, key) go to added to
        it; the next commit of ``tp`` carries on with it. Only where ``tp``'s producer is
        up and idle: a first commit fences and reads the floor first, and a commit in
        flight owns the producer's transaction."""
        if (tp not in self._producers or tp in self._committing or tp in self._begun
                or tp in self._beginning):
            return
        self._beginning[tp] = asyncio.create_task(self._begin(tp, destinations))

    async def _begin(self, tp: TopicPartition, destinations: list[tuple[str, bytes | None]]
                     ) -> None:
        producer = self._producers[tp]
        try:
            await producer.begin_transaction()
            await self._add_group(producer)
            placements: Placements = {}
            for topic, key in destinations:
                place = await self._place(producer, topic, placements)
                added = TopicPartition(topic, place(key))   # sent with the next request
                producer._txn_manager.maybe_add_partition_to_txn(added)
            self._begun[tp] = placements
        except (KafkaError, OSError) as err:   # the commit starts over with a new producer
            log.info("beginning %s's transaction early failed: %r", tp, err)
            await self.release(tp)
        finally:
            if self._beginning.get(tp) is asyncio.current_task():
                del self._beginning[tp]

    async def _add_group(self, producer: AIOKafkaProducer) -> None:
        """AddOffsetsToTxn for the stage's group, awaited, before any partition is
        added: the commit's ``send_offsets_to_transaction`` then sends TxnOffsetCommit
        alone. aiokafka has no call for it, so its sender's step is called here."""
        while not await producer._sender._do_add_offsets_to_txn(self.group_id):
            pass   # a retriable error: aiokafka has waited its backoff
        if not producer._txn_manager.is_in_transaction():   # refused (the group's ACL)
            raise KafkaError(f"adding group {self.group_id} to the transaction failed")

    async def _attempt(self, tp: TopicPartition, entries: list[Entry]) -> None:
        beginning = self._beginning.get(tp)
        if beginning is not None:
            await asyncio.wait([beginning])
        producer = await self._producer(tp)
        placements = self._taken_over(tp, producer)
        live = [e for e in entries if e.offset >= self._floor[tp]]
        if not live:
            if placements is not None:
                await producer.abort_transaction()
            return
        outputs, head = self._linked(tp, [r for e in live for r in e.outputs])
        if placements is None:
            placements = {}
            await producer.begin_transaction()
        sent: list[asyncio.Future] = []
        try:
            groups = await self._by_partition(producer, outputs, placements)
            for (topic, partition), batch in groups.items():
                sent += await _send_batches(producer, topic, partition, batch)
            await asyncio.gather(*sent)   # acknowledged before the offsets: the docstring
            position = (live[-1].offset + 1, head.metadata() if head else "")
            await producer.send_offsets_to_transaction({tp: position}, self.group_id)
            await producer.commit_transaction()
        finally:
            for future in sent:   # their errors are the transaction's: already raised
                future.add_done_callback(_retrieve)
        self._floor[tp] = live[-1].offset + 1
        if head is not None:
            self._heads[tp] = head

    def _taken_over(self, tp: TopicPartition, producer: AIOKafkaProducer
                    ) -> Placements | None:
        """The placements of ``tp``'s transaction begun early, None where none was.
        One that broke meanwhile (its AddPartitionsToTxn fenced, say) raises here, as
        the commit's own requests would have: the producer is dropped and rebuilt."""
        placements = self._begun.pop(tp, None)
        txn = producer._txn_manager
        if placements is not None and not txn.is_in_transaction():
            ended = txn.wait_for_transaction_end()
            cause = ended.exception() if ended.done() and not ended.cancelled() else None
            raise cause if isinstance(cause, KafkaError) else KafkaError(
                f"the transaction begun early for {tp} broke off: {cause!r}")
        return placements

    def _linked(self, tp: TopicPartition, outputs: list[Record]
                ) -> tuple[list[Record], ChainHead | None]:
        """``outputs`` with the audit records linked into the partition's chain, and
        the chain's head after them (None without ``chaining``)."""
        if self.chaining is None:
            return outputs, None
        return self.chaining.link(self._heads[tp], outputs)

    async def _by_partition(self, producer: AIOKafkaProducer, outputs: list[Record],
                            placements: Placements) -> dict[tuple[str, int], list[Record]]:
        """``outputs`` by topic and partition, in order: an explicit partition, else one
        partition per topic that needs no key placement, else the producer's
        partitioner over the key (as ``producer.send`` would place it). ``placements``:
        those the transaction has chosen already."""
        groups: dict[tuple[str, int], list[Record]] = {}
        for record in outputs:
            partition = record.partition
            if partition is None:
                place = await self._place(producer, record.topic, placements)
                partition = place(record.key)
            groups.setdefault((record.topic, partition), []).append(record)
        return groups

    async def _place(self, producer: AIOKafkaProducer, topic: str, placements: Placements
                     ) -> Placement:
        """The transaction's placement for ``topic``, chosen on first use."""
        place = placements.get(topic)
        if place is None:
            place = placements[topic] = await self._placement(producer, topic)
        return place

    async def _placement(self, producer: AIOKafkaProducer, topic: str) -> Placement:
        """Where a record of ``topic`` goes in this transaction, by its key."""
        partitions = list(await producer.partitions_for(topic))
        if self.any_partition(topic):
            chosen = random.choice(sorted(partitions))
            return lambda key: chosen
        ordered = sorted(partitions)
        available = list(producer.client.cluster.available_partitions_for_topic(topic) or ())
        return lambda key: (producer._partitioner(None, ordered, available) if key is None
                            else key_partition(key, ordered))

    async def claim(self, tp: TopicPartition) -> None:
        """Take ``tp`` over now: fence its previous owner (the broker aborts that owner's
        open transaction) before reading state that owner may have been writing."""
        await self._producer(tp)

    async def _producer(self, tp: TopicPartition) -> AIOKafkaProducer:
        """The partition's producer; a new one fences older owners and reads the floor."""
        producer = self._producers.get(tp)
        if producer is not None:
            return producer
        producer = self.kafka.producer(
            transactional_id=self.transactional_id(tp), transaction_timeout_ms=self.timeout_ms,
            client_id=self.transactional_id(tp), retry_backoff_ms=TXN_RETRY_BACKOFF_MS)
        try:
            await producer.start()
            await producer._txn_manager.wait_for_pid()   # InitProducerId: the fence
            position = await self._position(tp)
            self._floor[tp] = position.offset
            if self.chaining is not None:
                self._heads[tp] = ChainHead.from_metadata(position.metadata,
                                                          self.transactional_id(tp))
        except BaseException:
            await _stop_quietly(producer)
            raise
        self._producers[tp] = producer
        return producer

    async def committed(self, tp: TopicPartition) -> int:
        """The group's committed offset for ``tp`` (0 when it has none)."""
        return (await self._position(tp)).offset

    async def _position(self, tp: TopicPartition) -> OffsetAndMetadata:
        """The group's committed offset for ``tp`` (0 when it has none), and the
        metadata committed with it (the audit chain's head)."""
        if self._admin is None:
            self._admin = self.kafka.admin()
            await self._admin.start()
        offsets = await self._admin.list_consumer_group_offsets(self.group_id,
                                                                partitions=[tp])
        found = offsets.get(tp)
        if found is None or found.offset < 0:
            return OffsetAndMetadata(0, "")
        return OffsetAndMetadata(found.offset, found.metadata or "")

    async def release(self, tp: TopicPartition) -> None:
        """Drop the partition's producer (revoked, fenced or broken)."""
        beginning = self._beginning.pop(tp, None)
        if beginning is not None and beginning is not asyncio.current_task():
            beginning.cancel()
            await asyncio.gather(beginning, return_exceptions=True)
        producer = self._producers.pop(tp, None)
        self._floor.pop(tp, None)
        self._heads.pop(tp, None)
        self._begun.pop(tp, None)
        if producer is not None:
            await _stop_quietly(producer)

    async def close(self) -> None:
        for tp in list(self._producers):
            await self.release(tp)
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()

    async def __aenter__(self) -> PartitionTransactions:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def _send_batches(producer: AIOKafkaProducer, topic: str, partition: int,
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


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5)
    except Exception as err:   # a broken producer: its connections close with it
        log.info("producer stop: %r", err)
    # A fenced producer also fails aiokafka's internal waiters, which nobody awaits once
    # we drop the producer: the transaction's, and each unsent batch's drain waiter.
    # Read them so asyncio does not report them as lost.
    for waiter in _internal_waiters(producer):
        if waiter.done():
            _retrieve(waiter)


def _internal_waiters(producer: AIOKafkaProducer) -> list[asyncio.Future]:
    """aiokafka 0.14's internal futures that fail with a fenced producer."""
    waiters = [getattr(producer._txn_manager, "_transaction_waiter", None)]
    accumulator = getattr(producer, "_message_accumulator", None)
    for batches in getattr(accumulator, "_batches", {}).values():
        waiters += [getattr(batch, "_drain_waiter", None) for batch in batches]
    return [w for w in waiters if w is not None]
