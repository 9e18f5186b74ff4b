"""kip's murmur2 is Kafka's: the same partition as aiokafka's default partitioner."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from topics.partitioning import key_partition, murmur2


def test_murmur2_matches_aiokafka_for_every_tail_length():
    rng = random.Random(7)
    keys = [b"", b"a", b"ab", b"abc", b"abcd"] + [
        rng.randbytes(rng.randrange(0, 70)) for _ in range(5000)]
    for key in keys:
        assert murmur2(key) == aiokafka_murmur2(key), key


def test_key_partition_matches_the_default_partitioner():
    rng = random.Random(11)
    for count in (1, 2, 3, 7, 12):
        partitions = list(range(count))
        for _ in range(500):
            key = rng.randbytes(32).hex().encode()
            assert key_partition(key, partitions) == \
                DefaultPartitioner()(key, partitions, partitions)


def test_known_values_of_javas_murmur2():
    # From Kafka's UtilsTest.testMurmur2 (signed ints there).
    assert murmur2(b"21") == _u32(-973932308)
    assert murmur2(b"foobar") == _u32(-790332482)
    assert murmur2(b"a-little-bit-long-string") == _u32(-985981536)
    assert murmur2(b"a-little-bit-longer-string") == _u32(-1486304829)
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == _u32(-58897971)
    assert murmur2(b"abc") == _u32(479470107)


def _u32(signed: int) -> int:
    return signed & 0xFFFFFFFF


def test_a_key_placed_again_lands_where_the_default_partitioner_puts_it():
    """The second placement of a key (a result's audit record, on a topic with another
    partition count) reads the hash kept from the first."""
    rng = random.Random(13)
    for _ in range(500):
        key = rng.randbytes(32).hex().encode()
        for count in (3, 7, 3):
            partitions = list(range(count))
            assert key_partition(key, partitions) == \
                DefaultPartitioner()(key, partitions, partitions)
