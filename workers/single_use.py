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
from collections.abc import Awaitable, Callable, Iterable
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
from kip.transport.reading import partitions_since, reader_to_end

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
        if task is not None and task not in self.loading.values():   # no other reads it
            task.cancel()

    def claim(self, tp: TopicPartition) -> None:
        """Begin reading back the ids ``tp`` answered (``ready`` waits for it)."""
        self.claim_each([tp])

    def claim_each(self, tps: Iterable[TopicPartition]) -> None:
        """``claim`` each of ``tps``, in one read: a partition's read costs a consumer of
        its own and the round trips to start it, far more than its records."""
        wanted = [tp for tp in tps if tp not in self.loading]
        for tp in wanted:
            self.partitions.pop(tp, None)
        if self.reader is not None and wanted:
            task = asyncio.create_task(self._load(wanted), name=f"answered ids of {wanted}")
            for tp in wanted:
                self.loading[tp] = task

    async def ready(self, tps: set[TopicPartition]) -> None:
        """Every one of ``tps`` read back (those not claimed yet are claimed now: aiokafka
        may hand over records before its assignment callback has run); raises what a
        read back raised, and the batch is answered by no one (the loop fails)."""
        self.claim_each(tps - self.partitions.keys() - self.loading.keys())
        tasks = {self.loading[tp] for tp in tps if tp in self.loading}
        if tasks:
            await asyncio.gather(*tasks)

    async def _load(self, tps: list[TopicPartition]) -> None:
        task = asyncio.current_task()
        try:
            read = await self.reader(tps, self.transit_ms)
        finally:
            mine = [tp for tp in tps if self.loading.get(tp) is task]   # not dropped since
            for tp in mine:
                del self.loading[tp]
        for tp in mine:
            seen = self.partitions.setdefault(tp, OrderedDict())
            for tenant, request_id, routed_at_ms in read[tp]:
                seen[(tenant, request_id)] = routed_at_ms
            log.info("%s: %d answered ids read back", tp, len(read[tp]))


def answered_reader(kafka: KafkaConnection, names: TopicNames, model: str,
                    committed: Callable[[TopicPartition], Awaitable[int]]):
    """How a lane reads back what work partitions answered: for each, the ids committed
    to its answered partition from twice ``transit_ms`` before the append time of the
    first record it will read (``committed``: the group's offset)."""
    async def read(tps: list[TopicPartition], transit_ms: int) -> dict[TopicPartition, list]:
        offsets = dict(zip(tps, await asyncio.gather(*(committed(tp) for tp in tps))))
        firsts = await appended_at(kafka, offsets)
        answered = {tp: TopicPartition(names.answered(model, tp.topic.rpartition(".")[2]),
                                       tp.partition) for tp in tps}
        found = await partitions_since(
            kafka, {answered[tp]: firsts[tp] - 2 * transit_ms for tp in tps},
            parse_id_record, lambda record: None)
        return {tp: found[answered[tp]] for tp in tps}
    return read


async def appended_at(kafka: KafkaConnection, offsets: dict[TopicPartition, int]
                      ) -> dict[TopicPartition, int]:
    """When the record at each partition's offset was appended (now, where there is
    none yet: the partition is read to its end), through one consumer."""
    consumer = reader_to_end(kafka, max_partition_fetch_bytes=1024 * 1024)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        ends = await consumer.end_offsets(list(offsets))
        found = {tp: now_ms() for tp, offset in offsets.items() if offset >= ends[tp]}
        for tp in offsets.keys() - found.keys():
            consumer.seek(tp, offsets[tp])
        deadline = asyncio.get_running_loop().time() + 5
        while len(found) < len(offsets) and asyncio.get_running_loop().time() < deadline:
            waiting = [tp for tp in offsets if tp not in found]
            for tp, records in (await consumer.getmany(*waiting, timeout_ms=500)).items():
                if records and tp not in found:
                    found[tp] = records[0].timestamp
                    consumer.pause(tp)
        return {tp: found.get(tp, now_ms()) for tp in offsets}
    finally:
        await consumer.stop()
