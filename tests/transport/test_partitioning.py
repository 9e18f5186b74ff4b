"""kip's murmur2 is Kafka's: the same partition as aiokafka's default partitioner."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from kip.transport import partitioning
from kip.transport.partitioning import key_partition, murmur2, murmur2_same_length, remember


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


def test_keys_of_one_length_hashed_together_hash_as_one_at_a_time():
    rng = random.Random(17)
    for length in range(1, 71):
        keys = [rng.randbytes(length) for _ in range(20)]
        assert murmur2_same_length(keys).tolist() == [murmur2(k) for k in keys], length


def test_remembered_keys_land_where_the_default_partitioner_puts_them():
    """Keys remembered together (many of one length, a few of others, some again) are
    placed as Kafka's partitioner places them, and kept for the lookups that follow."""
    rng = random.Random(19)
    keys = ([rng.randbytes(16).hex().encode() for _ in range(40)]
            + [rng.randbytes(rng.randrange(1, 9)) for _ in range(5)])
    remember(keys + keys[:10])
    assert all(k in partitioning._recent for k in keys)
    partitions = list(range(7))
    for key in keys:
        assert key_partition(key, partitions) == \
            DefaultPartitioner()(key, partitions, partitions)


def test_the_kept_hashes_stay_within_their_bound():
    rng = random.Random(23)
    for _ in range(3):
        remember(rng.randbytes(32) for _ in range(partitioning.RECENT_KEYS // 2 + 1))
        assert len(partitioning._recent) <= partitioning.RECENT_KEYS
