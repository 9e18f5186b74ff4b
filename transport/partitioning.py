"""Where a keyed record goes: Kafka's default partitioner, murmur2 of the key.

Every Kafka client places a keyed record at ``(murmur2(key) & 0x7fffffff) % partitions``
(Java's ``Utils.murmur2``), so records a kip stage writes land where any other producer
of the same key would put them. aiokafka's murmur2 works a byte at a time with a mask
after every step; this one reads the key's 4-byte words in one ``struct`` call and
masks only where a product can overflow: faster, and the same hash
(tests/transport/test_partitioning.py checks it against aiokafka's on random keys). The
pipeline and the workers place an audit record by its request id, one per request.

Work items and results go to any partition (``TopicNames.any_partition``), so a stage
hashes one key a request, its audit record's, when it commits. ``remember`` hashes a
transaction's keys first, as many at once as share a length: numpy runs the same steps
over a column of words per step, in about the time of a few keys one at a time, for
any number up to a few hundred. The hashes are kept (``RECENT_KEYS``) for the lookups of ``key_partition``
that follow, and for an interactive request's key, placed once as its transaction begins
early (transport/transactions.py) and again when it commits.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
RECENT_KEYS = 4096
TOGETHER_FROM = 16   # keys of one length hashed together from this many: from here
#                       numpy's fixed cost is less than the keys' one at a time


def murmur2(data: bytes) -> int:
    """Java Kafka's ``Utils.murmur2`` of ``data``, as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail, base = length & 3, words << 2
    if tail:
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def key_partition(key: bytes, partitions: list[int]) -> int:
    """The partition, of ``partitions`` (sorted), that Kafka's default places ``key`` in."""
    h = _recent.get(key)
    if h is None:
        h = _remembered(key, murmur2(key))
    return partitions[(h & 0x7FFFFFFF) % len(partitions)]


def remember(keys: Iterable[bytes]) -> None:
    """Hash those of ``keys`` not kept yet, those of one length together where there are
    ``TOGETHER_FROM`` or more, so the ``key_partition`` calls that follow look them up."""
    new = {key for key in keys if key not in _recent}
    if len(_recent) + len(new) > RECENT_KEYS:
        _recent.clear()   # what a stage places next is its newest keys, not these
    by_length: dict[int, list[bytes]] = {}
    for key in new:
        by_length.setdefault(len(key), []).append(key)
    for same in by_length.values():
        hashes = (murmur2_same_length(same).tolist() if len(same) >= TOGETHER_FROM
                  else [murmur2(key) for key in same])
        _recent.update(zip(same, hashes))


def murmur2_same_length(keys: list[bytes]) -> np.ndarray:
    """``murmur2`` of each of ``keys``, all of one length, as uint32: each step of the
    hash once for them all, on a column of their words (uint32 products wrap, as the
    masks do in ``murmur2``)."""
    count, length = len(keys), len(keys[0])
    data = np.frombuffer(b"".join(keys), np.uint8).reshape(count, length)
    h = np.full(count, (_SEED ^ length) & _MASK, np.uint32)
    m = np.uint32(_M)
    words = length >> 2
    columns = np.ascontiguousarray(data[:, :words << 2]).view("<u4")
    for j in range(words):
        k = columns[:, j] * m
        k ^= k >> np.uint32(24)
        k *= m
        h *= m
        h ^= k
    tail, base = length & 3, words << 2
    if tail:
        for i in reversed(range(tail)):   # byte i of the tail, at bit 8 * i
            h ^= data[:, base + i].astype(np.uint32) << np.uint32(8 * i)
        h *= m
    h ^= h >> np.uint32(13)
    h *= m
    return h ^ (h >> np.uint32(15))


_recent: dict[bytes, int] = {}


def _remembered(key: bytes, h: int) -> int:
    if len(_recent) >= RECENT_KEYS:
        _recent.clear()   # what a stage places next is its newest keys, not these
    _recent[key] = h
    return h
