"""Reading a whole topic without a consumer group: assign every partition, know the end.

Used by the client (results from now on, or from a time), the pipeline's followers
(compacted topics from the beginning), the admitted ids and the audit readers (from a
time) and the tests (everything committed so far).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from kip.transport.aiokafka_adapter import (ask_metadata_for, refresh_metadata,
                                            unauthorized_topics)
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS, KafkaConnection
from kip.transport.fetch_waits import FOLLOWING_FETCH_MAX_WAIT_MS, wait_long_when_whole


def reader_to_end(kafka: KafkaConnection, **options) -> AIOKafkaConsumer:
    """A consumer without a group (not started) for reading up to an end. Such a read
    ends with a fetch past the last transaction's commit marker, which brings no
    record: at aiokafka's default fetch wait (500 ms) every read would end half a second
    after its last record."""
    return kafka.consumer(group_id=None, fetch_max_wait_ms=HOT_PATH_FETCH_MAX_WAIT_MS,
                          **options)


async def assign_all(consumer: AIOKafkaConsumer, topic: str, what: str = "topic"
                     ) -> list[TopicPartition]:
    """Assign every partition of ``topic``; a missing topic says how to create it."""
    # Named in the metadata request, a topic this principal may not see comes back as
    # "not authorized" rather than just missing.
    await ask_metadata_for(consumer, topic)
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:   # metadata may predate the topic: ask once more
        await refresh_metadata(consumer)
        partitions = consumer.partitions_for_topic(topic)
    if topic in unauthorized_topics(consumer):
        raise PermissionError(f"{what} {topic}: this principal may not read it (the "
                              "cluster's ACLs; `kip acls plan` lists what each role may)")
    if not partitions:
        raise RuntimeError(f"{what} {topic} does not exist: run `kip topics apply`")
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    return tps


async def reached(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether the consumer's position is at or past ``ends`` on every partition."""
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True


async def seek_to_time(consumer: AIOKafkaConsumer, tps: list[TopicPartition], since_ms: int
                       ) -> dict[TopicPartition, int]:
    """Position each of ``tps`` at its first record written at or after ``since_ms`` (at
    its end when there is none); return the ends, to read up to with ``reached``."""
    starts = await consumer.offsets_for_times({tp: max(0, since_ms) for tp in tps})
    ends = await consumer.end_offsets(tps)
    for tp in tps:
        found = starts.get(tp)
        consumer.seek(tp, found.offset if found is not None else ends[tp])
    return ends


async def records_since(kafka: KafkaConnection, topic: str, since_ms: int,
                        until_ms: int | None = None, follow: bool = False,
                        what: str = "topic") -> AsyncIterator[ConsumerRecord]:
    """``topic``'s committed records written from ``since_ms`` on, each partition in its
    order: up to the end as it is now (or ``until_ms``), or on and on with ``follow``
    (once caught up, with long fetch waits: transport/fetch_waits.py)."""
    consumer = reader_to_end(kafka)
    try:
        await consumer.start()   # a broker that is not there: closed all the same
        tps = await assign_all(consumer, topic, what=what)
        ends = await seek_to_time(consumer, tps, since_ms)
        caught_up = False
        while follow or not await reached(consumer, ends):
            if follow and not caught_up and await reached(consumer, ends):
                wait_long_when_whole(consumer, FOLLOWING_FETCH_MAX_WAIT_MS)
                caught_up = True
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for record in batch:
                    if until_ms is None or record.timestamp <= until_ms:
                        yield record
    finally:
        await consumer.stop()


async def partition_since(kafka: KafkaConnection, topic: str, partition: int, since_ms: int,
                          parse: Callable[[bytes | None], list],
                          unusable: Callable[[ConsumerRecord], None],
                          timeout_s: float = 60.0) -> list:
    """What ``parse`` makes of each record committed to ``topic``[``partition``] since
    ``since_ms`` (record time), up to its end now, joined; a record it raises
    ``ValueError`` on goes to ``unusable`` instead (kip's admitted and answered ids)."""
    tp = TopicPartition(topic, partition)
    return (await partitions_since(kafka, {tp: since_ms}, parse, unusable, timeout_s))[tp]


async def partitions_since(kafka: KafkaConnection, since: dict[TopicPartition, int],
                           parse: Callable[[bytes | None], list],
                           unusable: Callable[[ConsumerRecord], None],
                           timeout_s: float = 60.0) -> dict[TopicPartition, list]:
    """``partition_since`` of each partition from its own time, through one consumer."""
    consumer = reader_to_end(kafka)
    await consumer.start()
    try:
        tps = list(since)
        consumer.assign(tps)
        starts = await consumer.offsets_for_times({tp: max(0, ms) for tp, ms in since.items()})
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            found = starts.get(tp)
            consumer.seek(tp, found.offset if found is not None else ends[tp])
        return await asyncio.wait_for(_parsed_to(consumer, ends, parse, unusable), timeout_s)
    finally:
        await consumer.stop()


async def _parsed_to(consumer: AIOKafkaConsumer, ends: dict, parse, unusable
                     ) -> dict[TopicPartition, list]:
    entries: dict[TopicPartition, list] = {tp: [] for tp in ends}
    while not await reached(consumer, ends):
        for tp, records in (await consumer.getmany(*ends, timeout_ms=500)).items():
            for record in records:
                try:
                    entries[tp] += parse(record.value)
                except ValueError:
                    unusable(record)
    return entries
