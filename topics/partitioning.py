"""Where a keyed record goes: Kafka's default partitioner, murmur2 of the key.

Every Kafka client places a keyed record at ``(murmur2(key) & 0x7fffffff) % partitions``
(Java's ``Utils.murmur2``), so records a kip stage writes land where any other producer
of the same key would put them. aiokafka's murmur2 works a byte at a time with a mask
after every step; this one reads the key's 4-byte words in one ``struct`` call and
masks only where a product can overflow: twice as fast, and the same hash
(tests/topics/test_partitioning.py checks it against aiokafka's on random keys). The
pipeline and the workers place an audit record by its request id, one per request.

It still costs ~3 µs a 32-byte key, and a stage places every key twice in a row: the
pipeline a request's work item and its audit record, a worker its result and its audit
record, all under the request id. ``key_partition`` keeps the last keys' hashes
(``RECENT_KEYS``), so the second costs a lookup.
"""

from __future__ import annotations

import struct
from functools import lru_cache

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
RECENT_KEYS = 1024


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
    return partitions[(_recent_murmur2(key) & 0x7FFFFFFF) % len(partitions)]


_recent_murmur2 = lru_cache(maxsize=RECENT_KEYS)(murmur2)
