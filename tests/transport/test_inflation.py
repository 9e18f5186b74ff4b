"""Compressed batches are inflated within a bound (transport/inflation.py): without a broker,
on batches built as producers build them; and on the real broker, through aiokafka's
own fetcher, which the bound hooks into."""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
import zlib

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c, encode_varint

from kip.transport import inflation
from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec
from kip.transport.inflation import HEADER, UNREAD_HEADER, bound_inflation, bounded

MiB = 1024 * 1024
GZIP, LZ4 = 1, 3


def _batch(records: list[tuple[bytes | None, bytes, list]], codec: int = GZIP,
           base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 64 * MiB)
    for n, (key, value, headers) in enumerate(records):
        builder.append(n, timestamp=1_700_000_000_000 + n, key=key, value=value,
                       headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def _read(data: bytes) -> list:
    """Every record of ``data``, as aiokafka reads them (CRCs checked)."""
    records, found = MemoryRecords(data), []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        found += [(batch.base_offset + r.offset - batch.base_offset, r) for r in batch]
    return found


def _unread(record) -> str | None:
    return dict(record.headers).get(UNREAD_HEADER, b"").decode() or None


def test_an_uncompressed_fetch_passes_as_it_is():
    data = _batch([(b"k", b"v" * 100, [])], codec=0) * 3
    assert bounded(data, 10, 10) is data


def test_a_gzip_record_past_its_limit_is_read_past_and_its_batch_mates_kept():
    big = b"\x00" * (5 * MiB)
    data = _batch([(b"acme", b"small one", [("kip-request-id", b"r1")]),
                   (b"bob", big, [("kip-request-id", b"r2")]),
                   (b"carol", b"small two", [])])
    assert len(data) < 64 * 1024
    records = _read(bounded(data, 1 * MiB, 16 * MiB))
    assert [r.offset for _, r in records] == [0, 1, 2]
    first, second, third = (r for _, r in records)
    assert (first.key, first.value, _unread(first)) == (b"acme", b"small one", None)
    assert (second.key, second.value) == (b"bob", b"")
    assert _unread(second) == f"too-large {5 * MiB}"
    assert dict(second.headers)["kip-request-id"] == b"r2"
    assert (third.value, _unread(third)) == (b"small two", None)


def test_a_batch_of_a_codec_kip_does_not_inflate_is_unread_at_every_offset():
    data = bytearray(_batch([(b"a", b"x", []), (b"b", b"y", [])], codec=0, base_offset=40))
    struct.pack_into(">h", data, 21, LZ4)   # as an lz4 batch says it is
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    records = _read(bounded(bytes(data), MiB, 16 * MiB))
    assert [(r.offset, r.key, r.value, _unread(r)) for _, r in records] == \
        [(40, None, b"", "codec lz4"), (41, None, b"", "codec lz4")]


def test_gzip_that_does_not_inflate_is_unread_and_a_bad_crc_left_to_aiokafka():
    data = bytearray(_batch([(b"a", b"x" * 1000, [])]))
    data[HEADER.size + 20] ^= 0xFF
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    [(_, record)] = _read(bounded(bytes(data), MiB, 16 * MiB))
    assert _unread(record) == "corrupt"
    data[HEADER.size + 21] ^= 0xFF   # the CRC no longer holds
    assert bounded(bytes(data), MiB, 16 * MiB) == bytes(data)


def test_a_fetch_stops_at_its_budget_and_a_lone_batch_past_it_is_unread_beyond():
    one = MiB // 2
    batches = [_batch([(b"k", bytes([n]) * one, []) for _ in range(3)], base_offset=3 * n)
               for n in range(3)]
    records = _read(bounded(b"".join(batches), MiB, 3 * MiB + 1000))
    assert [r.offset for _, r in records] == [0, 1, 2, 3, 4, 5]   # the third: next fetch
    assert all(_unread(r) is None for _, r in records)
    lone = _read(bounded(batches[0], MiB, one + 100))
    assert [_unread(r) for _, r in lone] == [None, f"budget {one}", f"budget {one}"]


def test_a_header_copied_onto_a_record_that_was_not_rewritten_is_kept_there_only():
    """Only the record that carries it is refused: it is its sender's."""
    data = _batch([(b"k", b"v", [(UNREAD_HEADER, b"too-large 1")])], codec=0)
    assert bounded(data, 10, 10) is data


def _gzip_of_one_huge_record(value_size: int) -> bytes:
    """A gzip batch of one record with a ``value_size`` value of zeros, built a chunk at a
    time (never whole in memory), as a producer that compresses would send it."""
    head = bytearray(b"\x00")
    for n in (0, 0):
        encode_varint(n, head.append)
    encode_varint(4, head.append)
    head += b"acme"
    encode_varint(value_size, head.append)
    tail = bytearray()
    encode_varint(0, tail.append)
    length = bytearray()
    encode_varint(len(head) + value_size + len(tail), length.append)
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [z.compress(bytes(length + head))]
    zeros = bytes(MiB)
    for _ in range(value_size // MiB):
        parts.append(z.compress(zeros))
    parts += [z.compress(bytes(tail)), z.flush()]
    body = b"".join(parts)
    header = bytearray(HEADER.pack(0, HEADER.size - 12 + len(body), -1, 2, 0, GZIP, 0,
                                   1, 1, -1, -1, -1, 1))
    struct.pack_into(">I", header, 17, calc_crc32c(bytes(header[21:]) + body))
    return bytes(header) + body


def test_a_256_mib_gzip_record_is_refused_holding_little():
    data = _gzip_of_one_huge_record(256 * MiB)
    assert len(data) < 512 * 1024
    tracemalloc.start()
    try:
        out = bounded(data, MiB, 16 * MiB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    [(_, record)] = _read(out)
    assert _unread(record) == f"too-large {256 * MiB}" and record.key == b"acme"
    assert peak < 2 * MiB, peak


@pytest.mark.broker
def test_aiokafka_reads_through_the_bound_on_the_real_broker(broker, prefix):
    """The hook is where aiokafka builds a partition's records: a consumer of a topic
    with a gzip bomb among small records reads them all, the bomb unread."""
    topic = f"{prefix}.bombs"

    async def go():
        await apply(broker.kafka, [TopicSpec(topic, 1, "test", "test",
                                             {"max.message.bytes": str(8 * MiB)})])
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip",
                                    max_request_size=64 * MiB, max_batch_size=64 * MiB)
        await producer.start()
        try:
            for value in (b"before", b"\x00" * (40 * MiB), b"after"):
                await producer.send_and_wait(topic, value, key=b"acme")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                    auto_offset_reset="earliest",
                                    max_partition_fetch_bytes=16 * MiB)
        await consumer.start()
        try:
            found = []
            while len(found) < 3:
                for records in (await consumer.getmany(timeout_ms=2000)).values():
                    found += records
            return found
        finally:
            await consumer.stop()

    before = inflation.installed()
    bound_inflation(lambda t: MiB if t == topic else 8 * MiB, 16 * MiB)
    try:
        records = asyncio.run(go())
    finally:
        _restore(before)
    assert [r.value for r in records] == [b"before", b"", b"after"]
    assert dict(records[1].headers)[UNREAD_HEADER] == f"too-large {40 * MiB}".encode()


def _restore(before) -> None:
    if before is None:
        inflation.unbound()
    else:
        bound_inflation(before.of_topic, before.budget_bytes)
