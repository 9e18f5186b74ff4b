"""Compressed record batches, inflated within a bound before aiokafka reads them.

aiokafka inflates a compressed batch whole as it reads it: its gzip codec reads the
entire stream into memory, and snappy, lz4 and zstd need ``cramjam``, which kip does
not install (aiokafka raises as it reads such a batch). A small gzip record could
become hundreds of MiB inside a stage before its size check could refuse it. A producer picks
the codec, the broker keeps what it was sent (``compression.type=producer``), and
Kafka bounds only a batch's compressed size (``message.max.bytes``), so the bound has
to be the reader's.

``bound_inflation`` installs a pass over each partition's fetched bytes before aiokafka
parses them:

- an uncompressed batch passes as it is (one look at its header);
- a gzip batch is inflated record by record, a bounded chunk at a time: a record whose
  value fits its topic's limit (``limits``) is kept as it was; a larger one is read
  past (inflated and dropped, never held) and becomes an *unread* record: its offset,
  timestamp, key and headers, an empty value, and the header ``kip-unread`` saying why
  (``too-large <bytes seen>``);
- a batch of another codec (``codec <name>``), or one that does not inflate or parse
  (``corrupt``), becomes an unread record at each of its offsets, keys unknown;
- a fetch keeps at most ``budget_bytes`` of inflated records: once a batch has used it,
  the fetch ends before the next compressed batch (aiokafka fetches from there next
  time), and the records of a lone batch past it are unread (``budget``).

A rewritten batch is uncompressed, with its offsets, producer fields and transaction
flag as they were and a CRC of its own; its CRC is checked first, as aiokafka would.
Each stage ends an unread record with a code (pipeline/decide.py ``unread``); a copy of
the header on a record that was not rewritten only refuses that record.

aiokafka has no hook for this: ``bound_inflation`` installs ``bounded`` as the filter of
fetched bytes in transport/aiokafka_adapter.py, which says what of aiokafka's it
replaces.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import TopicPartition

from kip.transport.aiokafka_adapter import (calc_crc32c, encode_varint, filter_fetched,
                                            unfilter_fetched)

log = logging.getLogger("kip.inflation")

UNREAD_HEADER = "kip-unread"
HEADER = struct.Struct(">qiiBIhiqqqhii")   # a v2 batch's header, 61 bytes
CRC_FROM = 21                               # the CRC covers the batch from here
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CHUNK = 64 * 1024                 # inflated at a time; also the most held to skip bytes
KEY_LIMIT = 4096                  # a longer key is not kept on an unread record
HEADERS_LIMIT = 64 * 1024         # nor headers longer than this
MAX_UNREAD = 65_536               # unread records made of one batch, at most


@dataclass
class Limits:
    """The largest record value each topic may carry, and how much one fetch of a
    partition may inflate."""

    of_topic: Callable[[str], int]
    budget_bytes: int


_limits: Limits | None = None


def bound_inflation(of_topic: Callable[[str], int], budget_bytes: int) -> None:
    """From now on, in this process, every aiokafka consumer's fetched batches pass
    ``bounded`` with these limits (calling it again changes the limits)."""
    global _limits
    _limits = Limits(of_topic, budget_bytes)
    filter_fetched(_bounded_fetch)


def installed() -> Limits | None:
    return _limits


def unbound() -> None:
    """aiokafka's own reading back (tests that install other limits restore with it)."""
    global _limits
    _limits = None
    unfilter_fetched()


def _bounded_fetch(tp: TopicPartition, data: bytes) -> bytes:
    limits = _limits
    if limits is None:
        return data
    return bounded(data, limits.of_topic(tp.topic), limits.budget_bytes)


def bounded(data: bytes, limit: int, budget: int) -> bytes:
    """``data`` (a partition's fetched batches) with every compressed batch inflated
    within the bounds; ``data`` itself when it holds none."""
    parts, pos, spent, changed = [], 0, 0, False
    view = memoryview(data)
    while pos + HEADER.size <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        end = pos + 12 + length
        if length < HEADER.size - 12 or end > len(data):
            break   # a partial batch at the end of a fetch: aiokafka leaves it too
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        if data[pos + 16] != 2 or not attributes & 0x07:
            parts.append(view[pos:end])
        elif spent and spent >= budget:
            changed = True
            break   # fetched again, from this batch, with a budget of its own
        else:
            batch, used, over = _rewritten(view[pos:end], limit, max(budget - spent, 0))
            if over and spent:
                changed = True
                break   # past what is left of the budget: fetched again, from here
            spent += used
            changed = changed or batch is not None
            parts.append(view[pos:end] if batch is None else batch)
        pos = end
    if not changed:
        return data
    return b"".join(parts)


def _rewritten(batch: memoryview, limit: int, budget: int
               ) -> tuple[bytes | None, int, bool]:
    """The batch, uncompressed and bounded, the bytes it kept, and whether a record did
    not fit ``budget``; None where its CRC does not hold (aiokafka refuses it as it
    would have)."""
    fields = list(HEADER.unpack_from(batch, 0))
    if calc_crc32c(batch[CRC_FROM:]) != fields[4]:
        return None, 0, False
    codec = fields[5] & 0x07
    if CODECS.get(codec) != "gzip":
        return _all_unread(fields, f"codec {CODECS.get(codec, codec)}"), 0, False
    try:
        records, kept, over = _inflated_records(batch[HEADER.size:], fields[12], limit,
                                                budget)
    except (zlib.error, _Corrupt) as err:
        log.warning("a gzip batch at offset %d does not inflate: %s", fields[0], err)
        return _all_unread(fields, "corrupt"), 0, False
    return _batch(fields, records, len(records)), kept, over


def _all_unread(fields: list, why: str) -> bytes:
    """An unread record at each offset of the batch (keys unknown)."""
    last = fields[6]
    deltas = list(range(min(last + 1, MAX_UNREAD - 1)))
    if last not in deltas:
        deltas.append(last)   # the batch's last offset, so the fetch moves past it
    records = [_unread_record(d, 0, None, [], why) for d in deltas]
    return _batch(fields, records, len(records))


def _batch(fields: list, records: list[bytes], count: int) -> bytes:
    """A v2 batch of ``records`` (each encoded whole) with the header ``fields`` had,
    uncompressed."""
    body = b"".join(records)
    (base, _, epoch, magic, _, attributes, last, first_ts, max_ts, pid, pepoch, seq,
     _) = fields
    header = bytearray(HEADER.pack(base, HEADER.size - 12 + len(body), epoch, magic, 0,
                                   attributes & ~0x07, last, first_ts, max_ts, pid, pepoch,
                                   seq, count))
    crc = calc_crc32c(bytes(header[CRC_FROM:]) + body)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


class _Corrupt(Exception):
    pass


def _inflated_records(compressed: memoryview, count: int, limit: int, budget: int
                      ) -> tuple[list[bytes], int, bool]:
    """Each of the batch's ``count`` records, encoded whole: as it was where its value
    fits ``limit`` and ``budget`` has room, else unread; the bytes kept; and whether a
    record did not fit the budget."""
    stream = _Inflating(compressed)
    records, kept, over = [], 0, False
    for _ in range(count):
        length = stream.varint()
        if length < 0:
            raise _Corrupt("a negative record length")
        if length <= limit + KEY_LIMIT + HEADERS_LIMIT and kept + length <= budget:
            body = stream.take(length)
            value_size = _value_size(body)
            if value_size <= limit:
                records.append(_varint(length) + body)
                kept += length
                continue
            records.append(_unread_of(_Inflating.of(body), length, f"too-large {value_size}"))
            continue
        why = "too-large" if length > limit else "budget"
        records.append(_unread_of(stream, length, why))
        over = over or why == "budget"
    return records, kept, over


def _value_size(body: bytes) -> int:
    """The size of the value of an encoded record ``body`` (0 for a null value)."""
    reader = _Inflating.of(body)
    reader.byte()
    reader.varint(), reader.varint()
    key = reader.varint()
    reader.skip(max(key, 0))
    return max(reader.varint(), 0)


def _unread_of(stream: _Inflating, length: int, why: str) -> bytes:
    """The unread record for a record of ``length`` bytes at ``stream``'s position:
    read past, its value never held."""
    start = stream.position
    stream.byte()   # attributes
    ts_delta, offset_delta = stream.varint(), stream.varint()
    key_size = stream.varint()
    key = stream.take(key_size) if 0 <= key_size <= KEY_LIMIT else None
    if key is None and key_size > 0:
        stream.skip(key_size)
    value_size = stream.varint()
    stream.skip(max(value_size, 0))
    left = length - (stream.position - start)
    if left < 0:
        raise _Corrupt("a record longer than its length")
    headers = _headers(stream.take(left)) if left <= HEADERS_LIMIT else _skipped(stream, left)
    return _unread_record(offset_delta, ts_delta, key, headers,
                          why if " " in why else f"{why} {max(value_size, 0)}")


def _skipped(stream: _Inflating, size: int) -> list:
    stream.skip(size)
    return []


def _headers(encoded: bytes) -> list[tuple[bytes, bytes | None]]:
    reader = _Inflating.of(encoded)
    found = []
    for _ in range(max(reader.varint(), 0)):
        name = reader.take(max(reader.varint(), 0))
        size = reader.varint()
        found.append((name, reader.take(size) if size >= 0 else None))
    return [(k, v) for k, v in found if k != UNREAD_HEADER.encode()]


def _unread_record(offset_delta: int, ts_delta: int, key: bytes | None,
                   headers: list[tuple[bytes, bytes | None]], why: str) -> bytes:
    """An encoded record with an empty value and the ``kip-unread`` header."""
    body = bytearray(b"\x00")
    for number in (ts_delta, offset_delta):
        body += _varint(number)
    body += _bytes_field(key)
    body += _bytes_field(b"")
    headers = [*headers, (UNREAD_HEADER.encode(), why.encode())]
    body += _varint(len(headers))
    for name, value in headers:
        body += _bytes_field(name) + _bytes_field(value)
    return _varint(len(body)) + bytes(body)


def _bytes_field(value: bytes | None) -> bytes:
    return _varint(-1) if value is None else _varint(len(value)) + value


def _varint(number: int) -> bytes:
    out = bytearray()
    encode_varint(number, out.append)
    return bytes(out)


class _Inflating:
    """Bytes read one field at a time from a gzip stream, inflated a chunk at a time:
    what is held is a chunk and the field being read, never the whole."""

    def __init__(self, compressed: memoryview | bytes | None, plain: bytes = b"") -> None:
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS) if compressed is not None else None
        self._input = compressed
        self._buf = bytearray(plain)
        self._pos = 0
        self.position = 0   # bytes consumed since the start

    @classmethod
    def of(cls, plain: bytes) -> _Inflating:
        """A reader of bytes already inflated."""
        return cls(None, plain)

    def _more(self) -> bool:
        if self._z is None or self._z.eof:
            return False
        data = self._input if self._input is not None else self._z.unconsumed_tail
        self._input = None
        out = self._z.decompress(data, CHUNK)
        if self._pos > CHUNK:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += out
        return bool(out) or bool(self._z.unconsumed_tail)   # else: no progress left

    def _need(self, n: int) -> None:
        while len(self._buf) - self._pos < n:
            if not self._more() and len(self._buf) - self._pos < n:
                raise _Corrupt("the records end before the batch says")

    def byte(self) -> int:
        self._need(1)
        b = self._buf[self._pos]
        self._pos += 1
        self.position += 1
        return b

    def varint(self) -> int:
        """A zigzag varint, as Kafka's records carry them."""
        value, shift = 0, 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
            if shift > 63:
                raise _Corrupt("a varint longer than ten bytes")

    def take(self, n: int) -> bytes:
        self._need(n)
        out = bytes(self._buf[self._pos:self._pos + n])
        self._pos += n
        self.position += n
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            step = min(n, CHUNK)
            self.take(step)
            n -= step
