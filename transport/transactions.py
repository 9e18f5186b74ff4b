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

A commit is five round trips: AddOffsetsToTxn, AddPartitionsToTxn, the produce,
TxnOffsetCommit, EndTxn, each awaited alone (transport/aiokafka_adapter.py). It begins
with AddOffsetsToTxn: right behind its partition's last commit it meets the coordinator
still writing that one's markers (CONCURRENT_TRANSACTIONS), and kip retries a
millisecond later, where aiokafka would wait its backoff. The produce is acknowledged
before the offsets go: the broker (KIP-890) verifies a transaction's first write to a
partition with the coordinator, and a verification that meets another request of the
same id fails with NOT_ENOUGH_REPLICAS and waits the producer's backoff.

A stage that knows where its outputs will go before it has them (a worker, while its
inference runs) can ``begin_early``: the transaction begins, AddOffsetsToTxn is
answered, a TxnOffsetCommit restates the committed position, and the partitions are
added. The commit is left with the produce and TxnOffsetCommit, side by side, and
EndTxn. A stage that decides in well under a round trip (a pipeline) keeps its next
transaction begun instead (``keep_begun``), with the group and the partitions the last
one wrote to. A transaction begun early writes nothing to a topic and holds no reader
back; one its commit does not use is aborted, one kept a third of the transaction
timeout is aborted before the broker would (and fence the producer), and one that broke
meanwhile fails the commit as a fenced one does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from kip.schemas.audit_chain import ChainHead
from kip.transport.aiokafka_adapter import (add_group, add_partitions, broken, in_transaction,
                                            wait_for_producer_id)
from kip.transport.clients import KafkaConnection
from kip.transport.committed import CommittedOffsets
from kip.transport.outputs import Chaining, Record
from kip.transport.producing import (Placements, by_partition, placed, retrieve, send_outputs,
                                     stop_quietly, wait_or_cancel)

log = logging.getLogger("kip.transactions")
RETRY_BACKOFF_S = 0.5
CONCURRENT_RETRY_S = 0.001   # the first retry of CONCURRENT_TRANSACTIONS; doubled after
TXN_RETRY_BACKOFF_MS = 10   # aiokafka's (100 ms by default) paces its retries of it too
# A kept transaction begins this long after the commit before it (the coordinator answers
# CONCURRENT_TRANSACTIONS until that one's markers are written), where a round came late.
KEEP_AFTER_S, KEEP_WHEN_IDLE_S = 0.002, 0.006
KEEP_FOR_S = 60.0   # kept begun again while the partition's last commit is this recent

# A topic and where in it: a key to place by, a partition, or every partition.
Destination = tuple[str, bytes | int | str | None]
ALL_PARTITIONS = "*"


def transaction_timeout_ms(session_timeout_ms: int) -> int:
    """Two thirds of the consumer session timeout: the broker aborts a paused owner's
    open transaction before its partitions move, so no zombie holds readers up."""
    return session_timeout_ms * 2 // 3


@dataclass
class Entry:
    """One input record's offset and every record it produces."""

    offset: int
    outputs: list[Record] = field(default_factory=list)


class PartitionTransactions:
    """Transactional producers keyed by input partition, for one consumer group.

    ``owned(tp)``: whether the stage still owns a partition; a commit that keeps failing
    gives up once it does not, and leaves the records to the new owner. ``any_partition
    (topic)``: output topics that need no key placement (a transaction puts all of its
    records of one in a partition picked at random: each partition it touches costs a
    marker). With ``chaining``, each partition's producer chains its audit records
    (schemas/audit_chain.py); the head rides as its committed offset's metadata. A
    partition assigned back after a rebalance keeps its producer where ``unchanged``.
    """

    def __init__(self, kafka: KafkaConnection, group_id: str, timeout_ms: int,
                 owned: Callable[[TopicPartition], bool] = lambda tp: True,
                 any_partition: Callable[[str], bool] = lambda topic: False,
                 chaining: Chaining | None = None, keep_begun: bool = False) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.timeout_ms = timeout_ms
        self.owned = owned
        self.any_partition = any_partition
        self.chaining = chaining
        self.keep_begun = keep_begun
        self._producers: dict[TopicPartition, AIOKafkaProducer] = {}
        self._floor: dict[TopicPartition, int] = {}
        self._heads: dict[TopicPartition, ChainHead] = {}
        self._offsets = CommittedOffsets(kafka, group_id)
        self._starting: dict[TopicPartition, asyncio.Task] = {}   # producers being built
        self._committing: set[TopicPartition] = set()
        self._beginning: dict[TopicPartition, asyncio.Task] = {}
        self._begun: dict[TopicPartition, Placements] = {}   # placements chosen early
        self._again: dict[TopicPartition, list[Destination]] = {}
        self._timers: dict[TopicPartition, asyncio.TimerHandle] = {}   # keep, _expire
        self._ended: dict[TopicPartition, float] = {}   # the last commit's end, loop time

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
        self._cancel_timer(tp)   # a transaction to keep or expire: this commit's now
        loop = asyncio.get_running_loop()
        idle_s = loop.time() - self._ended.get(tp, float("-inf"))
        try:
            done = await self._commit(tp, entries)
        finally:
            self._committing.discard(tp)
            self._ended[tp] = loop.time()
        if done and self.keep_begun and idle_s >= KEEP_WHEN_IDLE_S:
            self._arm(tp, KEEP_AFTER_S, lambda tp: self.begin_early(tp, self._again.get(tp, [])))
        return done

    async def commit_each(self, entries: dict[TopicPartition, list[Entry]]) -> list[bool]:
        """``commit`` for each partition's entries, at once; what each returned, in order.
        A lone partition's commit runs in the caller's task: a task of its own would
        put a pass of the event loop before its first request (an interactive round's)."""
        if len(entries) == 1:
            (tp, batch), = entries.items()
            return [await self.commit(tp, batch)]
        return list(await asyncio.gather(*(self.commit(tp, batch)
                                           for tp, batch in entries.items())))

    def _arm(self, tp: TopicPartition, delay_s: float, then: Callable) -> None:
        self._cancel_timer(tp)   # one timer a partition
        self._timers[tp] = asyncio.get_running_loop().call_later(delay_s, then, tp)

    def _cancel_timer(self, tp: TopicPartition) -> None:
        if (timer := self._timers.pop(tp, None)) is not None:
            timer.cancel()   # one that has run is left in _timers: this does nothing

    async def _commit(self, tp: TopicPartition, entries: list[Entry]) -> bool:
        while True:
            if tp not in self._producers and not self.owned(tp):
                return False
            try:
                async with asyncio.timeout(self.timeout_ms / 1000):   # no task of its own
                    await self._attempt(tp, entries)
                return True
            except (KafkaError, asyncio.TimeoutError, OSError) as err:
                fenced = isinstance(err, ProducerFenced)
                log.warning("transaction for %s %s; dropping its producer", tp,
                            "fenced by another owner" if fenced else f"failed ({err!r})")
                await self.release(tp)
                if self.owned(tp):
                    await asyncio.sleep(RETRY_BACKOFF_S)

    def begin_early(self, tp: TopicPartition, destinations: list[Destination]) -> None:
        """Begin ``tp``'s next transaction now, in the background, with the stage's group
        and the partitions of ``destinations`` added to it; where one is begun already,
        add those partitions to it. The next commit of ``tp`` carries on with it. Only
        where ``tp``'s producer is up and no commit is in flight: a first commit fences
        and reads the floor first, and a commit in flight owns the transaction."""
        if tp not in self._producers or tp in self._committing:
            return
        self._chain(tp, self._prepare(tp, destinations))

    def _chain(self, tp: TopicPartition, step: Coroutine) -> None:
        """``step`` in the background after ``tp``'s last: a commit waits for them."""
        task = asyncio.create_task(self._after(tp, self._producers[tp],
                                               self._beginning.get(tp), step))
        task.add_done_callback(lambda _: step.close())   # where it never ran
        self._beginning[tp] = task

    async def _after(self, tp: TopicPartition, producer: AIOKafkaProducer,
                     before: asyncio.Task | None, step: Coroutine) -> None:
        try:
            if before is not None:
                await wait_or_cancel(before)
            if self._producers.get(tp) is producer:   # not dropped meanwhile
                await step
        except (KafkaError, OSError) as err:   # the commit starts over with a new producer
            log.info("beginning %s's transaction early failed: %r", tp, err)
            if self._producers.get(tp) is producer:
                await self.release(tp)
        finally:
            if self._beginning.get(tp) is asyncio.current_task():
                del self._beginning[tp]

    async def _prepare(self, tp: TopicPartition, destinations: list[Destination]) -> None:
        producer = self._producers[tp]
        placements = self._begun.get(tp)
        if placements is None:
            await producer.begin_transaction()
            await add_group(producer, self.group_id, CONCURRENT_RETRY_S)
            await producer.send_offsets_to_transaction({tp: self._position(tp)}, self.group_id)
            placements = self._begun[tp] = {}
            if self.keep_begun:
                self._arm(tp, self.timeout_ms / 3000, self._expire)
        partitions = []
        for topic, where in destinations:
            if where == ALL_PARTITIONS:
                partitions += [TopicPartition(topic, p)
                               for p in sorted(await producer.partitions_for(topic))]
            else:
                if not isinstance(where, int):
                    where = (await placed(producer, topic, placements, self.any_partition))(where)
                partitions.append(TopicPartition(topic, where))
        await add_partitions(producer, partitions)

    def _expire(self, tp: TopicPartition) -> None:
        """A transaction kept begun that no commit has taken is aborted, at a third of
        the transaction timeout: the broker would abort it at the timeout and fence
        the producer, and the next commit would have to start over. While the
        partition's last commit is under ``KEEP_FOR_S`` old, the next is begun again
        after the abort: requests seconds apart find one begun too."""
        if tp in self._begun and tp not in self._committing:
            self._chain(tp, self._abort_begun(tp))
            idle_s = asyncio.get_running_loop().time() - self._ended.get(tp, float("-inf"))
            if idle_s < KEEP_FOR_S and tp in self._again:
                self.begin_early(tp, self._again[tp])

    async def _abort_begun(self, tp: TopicPartition) -> None:
        if self._begun.pop(tp, None) is not None:
            await self._producers[tp].abort_transaction()

    async def _attempt(self, tp: TopicPartition, entries: list[Entry]) -> None:
        beginning = self._beginning.get(tp)
        if beginning is not None:
            await asyncio.wait([beginning])
        producer = await self._producer(tp)
        placements = self._taken_over(tp, producer)
        self._cancel_timer(tp)   # armed by the step the commit waited for
        live = [e for e in entries if e.offset >= self._floor[tp]]
        if not live:
            if placements is not None:
                await producer.abort_transaction()
            return
        outputs, head = self._linked(tp, [r for e in live for r in e.outputs])
        begun = placements is not None
        if placements is None:
            placements = {}
            await producer.begin_transaction()
            await add_group(producer, self.group_id, CONCURRENT_RETRY_S)   # first: the docstring says why
        groups = await by_partition(producer, outputs, placements, self.any_partition)
        if begun:   # a partition it lacks is added before any produce goes: above
            await add_partitions(producer, [TopicPartition(*g) for g in groups])
        position = (live[-1].offset + 1, head.metadata() if head else "")
        await send_outputs(producer, groups, ({tp: position}, self.group_id), beside=begun)
        await producer.commit_transaction()
        self._floor[tp] = live[-1].offset + 1
        if self.keep_begun:
            self._again[tp] = self._unkeyed(outputs)   # for the transaction kept next
        if head is not None:
            self._heads[tp] = head

    def _position(self, tp: TopicPartition) -> tuple[int, str]:
        """``tp``'s position as this stage last committed it: its offset and chain head."""
        head = self._heads.get(tp)
        return self._floor[tp], head.metadata() if head else ""

    def _unkeyed(self, outputs: list[Record]) -> list[Destination]:
        """Where ``outputs`` went that does not hang on their keys: their explicit
        partitions, and a fresh partition of each topic that needs no placement."""
        found = {(r.topic, r.partition) if r.partition is not None else
                 (r.topic, None) if self.any_partition(r.topic) else (r.topic, ALL_PARTITIONS)
                 for r in outputs}
        return sorted(found, key=str)

    def _taken_over(self, tp: TopicPartition, producer: AIOKafkaProducer
                    ) -> Placements | None:
        """The placements of ``tp``'s transaction begun early, None where none was.
        One that broke meanwhile (its AddPartitionsToTxn fenced, say) raises here, as
        the commit's own requests would have: the producer is dropped and rebuilt."""
        placements = self._begun.pop(tp, None)
        if placements is not None and not in_transaction(producer):
            raise broken(producer, f"after it began early for {tp}")
        return placements

    def _linked(self, tp: TopicPartition, outputs: list[Record]
                ) -> tuple[list[Record], ChainHead | None]:
        """``outputs`` with the audit records linked into the partition's chain, and
        the chain's head after them (None without ``chaining``)."""
        if self.chaining is None:
            return outputs, None
        return self.chaining.link(self._heads[tp], outputs)

    async def claim(self, tp: TopicPartition) -> None:
        """Take ``tp`` over now: fence its previous owner (the broker aborts that owner's
        open transaction) before reading state that owner may have been writing."""
        await self._producer(tp)

    async def claim_each(self, tps: Iterable[TopicPartition]) -> None:
        """``claim`` each of ``tps`` at once (a new assignment); one that fails is left
        to its first commit, which builds its producer again."""
        tps = list(tps)
        claimed = await asyncio.gather(*(self.claim(tp) for tp in tps),
                                       return_exceptions=True)
        for tp, failed in zip(tps, claimed):
            if isinstance(failed, Exception):   # its first commit tries again
                log.warning("claiming %s on assignment failed: %r", tp, failed)

    async def _producer(self, tp: TopicPartition) -> AIOKafkaProducer:
        """The partition's producer; a new one fences older owners and reads the floor.
        One at a time: a claim and a commit asking at once would fence each other."""
        producer = self._producers.get(tp)
        if producer is not None:
            return producer
        starting = self._starting.get(tp)
        if starting is None:
            starting = self._starting[tp] = asyncio.create_task(self._start_producer(tp))
            starting.add_done_callback(retrieve)   # its callers may be gone
        return await asyncio.shield(starting)

    async def _start_producer(self, tp: TopicPartition) -> AIOKafkaProducer:
        producer = self.kafka.producer(
            transactional_id=self.transactional_id(tp), transaction_timeout_ms=self.timeout_ms,
            client_id=self.transactional_id(tp), retry_backoff_ms=TXN_RETRY_BACKOFF_MS)
        try:
            await producer.start()
            await wait_for_producer_id(producer)   # InitProducerId: the fence
            position = await self._offsets.position(tp)
            self._floor[tp] = position.offset
            if self.chaining is not None:
                self._heads[tp] = ChainHead.from_metadata(position.metadata,
                                                          self.transactional_id(tp))
        except BaseException:
            await stop_quietly(producer)
            raise
        finally:
            if self._starting.get(tp) is asyncio.current_task():
                del self._starting[tp]
        self._producers[tp] = producer
        return producer

    async def committed(self, tp: TopicPartition) -> int:
        """The group's committed offset for ``tp`` (0 when it has none)."""
        return (await self._offsets.position(tp)).offset

    async def unchanged(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s producer is up and the group's offset is still its last."""
        floor = self._floor.get(tp) if tp in self._producers else None
        return floor is not None and (await self._offsets.position(tp)).offset == floor

    async def release(self, tp: TopicPartition) -> None:
        """Drop the partition's producer (revoked, fenced or broken)."""
        beginning = self._beginning.pop(tp, None)
        if beginning is not None and beginning is not asyncio.current_task():
            beginning.cancel()
            await asyncio.gather(beginning, return_exceptions=True)
        starting = self._starting.pop(tp, None)
        if starting is not None:   # not cancelled: a commit may be waiting for it too
            await asyncio.gather(starting, return_exceptions=True)
        producer = self._producers.pop(tp, None)
        self._floor.pop(tp, None)
        self._heads.pop(tp, None)
        self._begun.pop(tp, None)
        self._again.pop(tp, None)
        self._cancel_timer(tp)
        if producer is not None:
            await stop_quietly(producer)

    async def close(self) -> None:
        for tp in {*self._producers, *self._starting}:
            await self.release(tp)
        await self._offsets.close()

    async def __aenter__(self) -> PartitionTransactions:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

