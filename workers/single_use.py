"""A work item is run once: a worker answers each request id at most once, however often
the item is copied back onto a work topic (on a plain bus anyone may write one).

The pipeline admits each request id once (pipeline/replays.py) and writes its work item
to one partition of its model's work topic for its class; the stamp names that partition
(schemas/stamps.py), so a copy is good there alone, and one worker owns it at a time:

- ``Answered`` holds, per input partition, the (tenant, request id) of every item
  answered from it. An item under an id it holds, one on another partition or topic than
  its stamp says, or one appended too long after it was routed is refused
  (``refusal``): a dead letter and a non-final audit record, no result, no inference.
  The request already has its one ending.
- Work topics keep the broker's append time on their records
  (``message.timestamp.type=LogAppendTime``, topics/catalogue.py), which no producer
  can set. The pipeline writes an item within its transaction timeout of routing it, or
  loses the partition and routes the request again; an item appended more than
  ``transit_ms`` after its routing is a copy. So an id is kept only until the partition's
  own clock (the append time of the records read from it, not the wall clock) has passed
  its routing by ``transit_ms``: a worker catching up on a backlog still holds it.
- The ids a batch answered go, in the partition's transaction, to
  ``<prefix>.answered.<model>.<class>`` (same partition number); a worker given a
  partition reads back those answered from ``transit_ms`` before the append time of the
  first record it will read, before it answers any (``claim``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from kip.schemas.codec import now_ms
from kip.schemas.errors import DuplicateRequest, InvalidRequest, KipError
from kip.schemas.messages import WorkItem
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames
from kip.transport.outputs import Record
from kip.transport.id_records import id_records, parse_id_record
from kip.transport.reading import partition_since, reader_to_end

log = logging.getLogger("kip.worker")
LOG_APPEND_TIME = 1   # a record's timestamp type: the broker's append time
TRANSIT_MS = 5 * 60 * 1000
Key = tuple[str, str]   # (tenant, request id)


@dataclass
class Answered:
    """Request ids answered per input partition, until the partition's clock passes
    their routing by ``transit_ms``; and those of the batches not yet committed."""

    names: TopicNames
    transit_ms: int = TRANSIT_MS
    partitions: dict[TopicPartition, OrderedDict[Key, int]] = field(default_factory=dict)
    unwritten: dict[TopicPartition, list[list]] = field(default_factory=dict)
    loading: dict[TopicPartition, asyncio.Task] = field(default_factory=dict)
    reader: Callable[[TopicPartition, int], Awaitable[list]] | None = None   # (answered_reader)

    def refusal(self, record: ConsumerRecord, item: WorkItem) -> KipError | None:
        """Why ``record``'s (stamped) item must not run, or None; an item that may run is
        taken as answered from now on."""
        request, tp = item.request, TopicPartition(record.topic, record.partition)
        if record.partition != item.work_partition or \
                record.topic != self.names.work(item.route.model_name, request.priority):
            return InvalidRequest(f"the work item belongs on partition {item.work_partition} "
                                  f"of {self.names.work(item.route.model_name, request.priority)}"
                                  f", not {record.topic}[{record.partition}]: a copy")
        if record.timestamp_type == LOG_APPEND_TIME:
            self._sweep(tp, record.timestamp)
            if record.timestamp - item.routed_at_ms > self.transit_ms:
                return InvalidRequest(f"appended {record.timestamp - item.routed_at_ms} ms "
                                      "after it was routed: a copy, not the pipeline's")
        seen = self.partitions.setdefault(tp, OrderedDict())
        key = (request.tenant, request.request_id)
        if key in seen:
            return DuplicateRequest(f"request {request.request_id} of tenant "
                                    f"{request.tenant} was answered already: a copy")
        seen[key] = item.routed_at_ms
        self.unwritten.setdefault(tp, []).append([*key, item.routed_at_ms])
        return None

    def _sweep(self, tp: TopicPartition, clock_ms: int) -> None:
        """Forget the oldest ids of ``tp`` while they were routed more than
        ``transit_ms`` before ``clock_ms`` (an item of theirs appended from now on is
        late anyway). Ids are kept in the order they were answered, nearly that of their
        routing: one routed earlier than an id answered before it is forgotten later,
        never sooner. Constant time a record: a search for the oldest of all, per
        record, grew with the ids held (``kip bench cost``)."""
        seen = self.partitions.get(tp)
        cutoff = clock_ms - self.transit_ms
        while seen and next(iter(seen.values())) < cutoff:
            seen.popitem(last=False)

    def records(self, tp: TopicPartition, model: str, priority: str) -> list[Record]:
        """What ``tp``'s batch answered, as records for its transaction."""
        return id_records(self.names.answered(model, priority), tp.partition,
                          self.unwritten.pop(tp, []))

    def drop(self, tp: TopicPartition) -> None:
        """Forget a partition this worker no longer owns."""
        self.partitions.pop(tp, None)
        self.unwritten.pop(tp, None)
        task = self.loading.pop(tp, None)
        if task is not None:
            task.cancel()

    def claim(self, tp: TopicPartition) -> None:
        """Begin reading back the ids ``tp`` answered (``ready`` waits for it)."""
        self.partitions.pop(tp, None)
        if self.reader is not None and tp not in self.loading:
            self.loading[tp] = asyncio.create_task(self._load(tp), name=f"answered {tp}")

    async def ready(self, tps: set[TopicPartition]) -> None:
        """Every one of ``tps`` read back (those not claimed yet are claimed now: aiokafka
        may hand over records before its assignment callback has run); raises what a
        read back raised, and the batch is answered by no one (the loop fails)."""
        for tp in tps - self.partitions.keys() - self.loading.keys():
            self.claim(tp)
        tasks = [self.loading[tp] for tp in tps if tp in self.loading]
        if tasks:
            await asyncio.gather(*tasks)

    async def _load(self, tp: TopicPartition) -> None:
        try:
            entries = await self.reader(tp, self.transit_ms)
        finally:
            if self.loading.get(tp) is asyncio.current_task():
                del self.loading[tp]
        seen = self.partitions.setdefault(tp, OrderedDict())
        for tenant, request_id, routed_at_ms in entries:
            seen[(tenant, request_id)] = routed_at_ms
        log.info("%s: %d answered ids read back", tp, len(entries))


def answered_reader(kafka: KafkaConnection, names: TopicNames, model: str,
                    committed: Callable[[TopicPartition], Awaitable[int]]):
    """How a lane reads back what a work partition answered: the ids committed to its
    answered partition from twice ``transit_ms`` before the append time of the first
    record it will read (``committed``: the group's offset)."""
    async def read(tp: TopicPartition, transit_ms: int) -> list:
        first = await appended_at(kafka, tp, await committed(tp))
        topic = names.answered(model, tp.topic.rpartition(".")[2])
        return await read_answered(kafka, topic, tp.partition, first - 2 * transit_ms)
    return read


async def appended_at(kafka: KafkaConnection, tp: TopicPartition, offset: int) -> int:
    """When the record at ``offset`` of ``tp`` was appended (now, where there is none
    yet: the partition is read to its end)."""
    consumer = reader_to_end(kafka, max_partition_fetch_bytes=1024 * 1024)
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if offset >= end:
            return now_ms()
        consumer.seek(tp, offset)
        batch = await consumer.getmany(tp, timeout_ms=5000, max_records=1)
        records = batch.get(tp, [])
        return records[0].timestamp if records else now_ms()
    finally:
        await consumer.stop()


async def read_answered(kafka: KafkaConnection, topic: str, partition: int, since_ms: int
                        ) -> list:
    """Every ``[tenant, request id, routed_at_ms]`` committed to ``topic``[``partition``]
    since ``since_ms`` (record time), up to its end now; a record that is not one is
    skipped (only this model's workers write the topic)."""
    return await partition_since(kafka, topic, partition, since_ms, parse_id_record,
                                 lambda record: None)
