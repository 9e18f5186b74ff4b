"""Per-input-partition transactions on the real broker: outputs and offset commit together,
a new owner fences the old one, and a fresh producer skips what is already committed."""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import asynccontextmanager, contextmanager

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import GroupCoordinatorNotAvailableError

from tests.e2e.conftest import read_topic
from kip.transport.clients import KafkaConnection
from kip.transport.outputs import Record
from kip.transport.transactions import Entry, PartitionTransactions

pytestmark = pytest.mark.broker
TIMEOUT_MS = 3_000


async def _create(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
    finally:
        await admin.close()


async def _topics(bootstrap: str, prefix: str) -> tuple[str, str]:
    await _create(bootstrap, {f"{prefix}.in": 1, f"{prefix}.out": 1})
    return f"{prefix}.in", f"{prefix}.out"


def _entries(out: str, offsets, tag: str = "v") -> list[Entry]:
    return [Entry(i, [Record(out, b"k", f"{tag}{i}".encode(), [])]) for i in offsets]


async def _committed(tx: PartitionTransactions, tp: TopicPartition, expected: int) -> int:
    """The committed offset once it reads ``expected`` (or after 10 s). A commit returns
    when the transaction is decided; its offsets are readable once the broker has
    written the markers, a moment later."""
    for _ in range(100):
        found = await tx.committed(tp)
        if found == expected:
            break
        await asyncio.sleep(0.1)
    return found


async def _group_known(tx: PartitionTransactions, tp: TopicPartition) -> None:
    """Once the broker has a coordinator for the group (a new group has none at first)."""
    for _ in range(100):
        try:
            await tx.committed(tp)
            return
        except GroupCoordinatorNotAvailableError:
            await asyncio.sleep(0.1)


async def _values(bootstrap: str, topic: str) -> list[bytes]:
    return [r.value for r in await read_topic(KafkaConnection(bootstrap=bootstrap), topic)]


def test_outputs_become_visible_with_the_offset_commit(broker, prefix):
    async def scenario():
        inp, out = await _topics(broker.bootstrap, prefix)
        tp = TopicPartition(inp, 0)
        async with PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as tx:
            assert await tx.commit(tp, _entries(out, range(5)))
            assert await _committed(tx, tp, 5) == 5
        assert await _values(broker.bootstrap, out) == [f"v{i}".encode() for i in range(5)]
    asyncio.run(scenario())


@asynccontextmanager
async def _old_and_new_owner(broker, prefix: str, owner: dict[str, bool]):
    """One input partition, its old owner (owning while ``owner["old"]``) and its new
    one, in the same group."""
    inp, out = await _topics(broker.bootstrap, prefix)
    async with (PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS,
                                      owned=lambda _: owner["old"]) as old,
                PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as new):
        yield TopicPartition(inp, 0), out, old, new


@pytest.mark.parametrize("early", [False, True], ids=["", "begun-early"])
def test_a_new_owner_fences_the_old_one(broker, prefix, early):
    """With ``early``, the old owner began its transaction before it slept, and its
    AddPartitionsToTxn is fenced before its commit starts: the commit must fail like any
    fenced one, not on the producer's state (the worker would crash instead of leaving
    the records to the new owner)."""
    lost = []

    async def scenario():
        asyncio.get_running_loop().set_exception_handler(lambda _, c: lost.append(c))
        owner = {"old": True}
        async with _old_and_new_owner(broker, prefix, owner) as (tp, out, old, new):
            assert await old.commit(tp, _entries(out, range(3)))
            owner["old"] = False   # the group moved the partition; the old owner slept
            assert await new.commit(tp, _entries(out, range(3, 6)))
            if early:
                old.begin_early(tp, [(out, b"k")])
                await asyncio.sleep(0.5)   # its AddPartitionsToTxn: fenced
            assert not await old.commit(tp, _entries(out, [6], tag="zombie"))
            assert await _committed(new, tp, 6) == 6
        assert await _values(broker.bootstrap, out) == [f"v{i}".encode() for i in range(6)]
        gc.collect()   # a failed future nobody read is reported when it is collected
    asyncio.run(scenario())
    # The fenced producer's internal futures are read when it is dropped, so asyncio
    # reports no "exception was never retrieved" for them.
    assert [c["message"] for c in lost] == []


def test_a_partition_lost_while_it_had_no_producer_is_left_to_its_new_owner(broker, prefix):
    """The old owner's producer was dropped (a transaction begun early failed, say) and
    the partition moved meanwhile: its next commit builds no producer, so it neither
    fences the new owner nor publishes the records the new owner answers."""
    async def scenario():
        owner = {"old": True}
        async with _old_and_new_owner(broker, prefix, owner) as (tp, out, old, new):
            assert await old.commit(tp, _entries(out, range(3)))
            await old.release(tp)
            owner["old"] = False
            assert await new.commit(tp, _entries(out, range(3, 6)))
            producer = new._producers[tp]
            assert not await old.commit(tp, _entries(out, [6], tag="zombie"))
            assert await new.commit(tp, _entries(out, [6]))
            assert new._producers[tp] is producer, "the new owner was fenced"
            assert await _committed(new, tp, 7) == 7
        assert await _values(broker.bootstrap, out) == [f"v{i}".encode() for i in range(7)]
    asyncio.run(scenario())


def test_a_fresh_producer_skips_what_is_already_committed(broker, prefix):
    async def scenario():
        inp, out = await _topics(broker.bootstrap, prefix)
        tp = TopicPartition(inp, 0)
        async with PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as tx:
            assert await tx.commit(tp, _entries(out, range(10)))
        # A replay from an older position, as after a crash before the commit's reply:
        async with PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as tx:
            assert await tx.commit(tp, _entries(out, range(5, 15)))
            assert await tx.commit(tp, _entries(out, range(12, 16)))
        assert await _values(broker.bootstrap, out) == [f"v{i}".encode() for i in range(16)]
    asyncio.run(scenario())


async def _free_and_keyed(bootstrap: str, prefix: str) -> tuple[str, str, TopicPartition]:
    """Two output topics of 3 partitions, one placed freely and one by key, and the
    input partition."""
    await _create(bootstrap, {f"{prefix}.in": 1, f"{prefix}.free": 3, f"{prefix}.keyed": 3})
    return f"{prefix}.free", f"{prefix}.keyed", TopicPartition(f"{prefix}.in", 0)


def _placing(broker, prefix: str, free: str) -> PartitionTransactions:
    return PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS,
                                 any_partition=lambda t: t == free)


def _round(free: str, keyed: str, first: int, tag: bytes, count: int = 5) -> list[Entry]:
    return [Entry(first + i, [Record(free, f"k{i}".encode(), tag, []),
                              Record(keyed, f"k{i}".encode(), tag, [])]) for i in range(count)]


def test_records_of_an_any_partition_topic_share_one_partition_per_transaction(broker, prefix):
    async def scenario():
        free, keyed, tp = await _free_and_keyed(broker.bootstrap, prefix)
        async with _placing(broker, prefix, free) as tx:
            for round_ in range(4):
                assert await tx.commit(tp, _round(free, keyed, round_ * 30,
                                                  f"{round_}".encode(), 30))
        by_round: dict[bytes, set[int]] = {}
        for r in await read_topic(broker.kafka, free):
            by_round.setdefault(r.value, set()).add(r.partition)
        assert sorted(by_round) == [b"0", b"1", b"2", b"3"]
        assert all(len(parts) == 1 for parts in by_round.values())   # one partition a round
        keyed_parts = {r.partition for r in await read_topic(broker.kafka, keyed)}
        assert len(keyed_parts) > 1   # 30 distinct keys: spread by key, as before
    asyncio.run(scenario())


def test_a_transaction_begun_early_carries_the_next_commit(broker, prefix):
    """``begin_early`` adds the group, restates the committed position and adds the
    partitions while the stage works; the commit sends only the produce and
    TxnOffsetCommit, side by side, and EndTxn, into exactly those partitions, and its
    outputs and offset (not the restated one) become visible together."""
    async def scenario():
        free, keyed, tp = await _free_and_keyed(broker.bootstrap, prefix)
        async with _placing(broker, prefix, free) as tx:
            tx.begin_early(tp, [(free, b"k0")])   # no producer yet: the commit fences first
            assert await tx.commit(tp, _round(free, keyed, 0, b"first"))
            entries = _round(free, keyed, 5, b"early")
            tx.begin_early(tp, [(r.topic, r.key) for e in entries for r in e.outputs])
            await asyncio.sleep(0.5)   # the stage at work; AddOffsetsToTxn and
            added = set(tx._producers[tp]._txn_manager.txn_partitions)   # AddPartitions
            with _requests_sent(tx._producers[tp]) as sent:
                assert await tx.commit(tp, entries)
            assert beside_then_end(sent)
            assert await _committed(tx, tp, 10) == 10
        written = [r for topic in (free, keyed) for r in await read_topic(broker.kafka, topic)]
        assert sorted(r.value for r in written) == [b"early"] * 10 + [b"first"] * 10
        assert {TopicPartition(r.topic, r.partition) for r in written
                if r.value == b"early"} == added
    asyncio.run(scenario())


def beside_then_end(sent: list[str]) -> bool:
    """Whether a commit begun early sent the produce and TxnOffsetCommit (in either
    order: they go side by side) and then EndTxn, and nothing else of a transaction."""
    names = [n for n in sent if n in TRANSACTION_REQUESTS]
    return (sorted(names[:2]) == ["ProduceRequest", "TxnOffsetCommitRequest"]
            and names[2:] == ["EndTxnRequest"])


TRANSACTION_REQUESTS = {"AddPartitionsToTxnRequest", "AddOffsetsToTxnRequest",
                        "ProduceRequest", "TxnOffsetCommitRequest", "EndTxnRequest"}


@contextmanager
def _requests_sent(producer):
    """The names of the requests ``producer`` sends meanwhile, in order (unversioned)."""
    sent: list[str] = []
    client = producer.client
    original = client.send

    async def recording(node_id, request, *args, **kwargs):
        sent.append(type(request).__name__.split("_v")[0])
        return await original(node_id, request, *args, **kwargs)
    client.send = recording
    try:
        yield sent
    finally:
        del client.send


def test_a_transaction_begun_early_for_nothing_live_is_aborted(broker, prefix):
    """A replay below the floor commits nothing: the early transaction, which restated
    the committed position, is aborted, leaving that position as it was, and the next
    commit begins its own."""
    async def scenario():
        inp, out = await _topics(broker.bootstrap, prefix)
        tp = TopicPartition(inp, 0)
        async with PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as tx:
            assert await tx.commit(tp, _entries(out, range(5)))
            with _requests_sent(tx._producers[tp]) as sent:
                tx.begin_early(tp, [(out, b"k")])
                assert await tx.commit(tp, _entries(out, range(3, 5), tag="replayed"))
            assert "TxnOffsetCommitRequest" in sent   # restated, then aborted
            await asyncio.sleep(0.5)   # the abort's markers written
            assert await tx.committed(tp) == 5
            assert await tx.commit(tp, _entries(out, [5]))
            assert await _committed(tx, tp, 6) == 6
        assert await _values(broker.bootstrap, out) == [f"v{i}".encode() for i in range(6)]
    asyncio.run(scenario())


def test_a_transaction_begun_early_that_times_out_costs_its_commit_one_retry(broker, prefix):
    """The broker times a transaction from its first AddPartitionsToTxn: one begun
    before a long inference is aborted (and its producer fenced), and the commit starts
    over with a new producer, once."""
    async def scenario():
        inp, out = await _topics(broker.bootstrap, prefix)
        tp = TopicPartition(inp, 0)
        async with PartitionTransactions(broker.kafka, f"{prefix}.g", 2_000) as tx:
            assert await tx.commit(tp, _entries(out, range(3)))
            tx.begin_early(tp, [(out, b"k")])
            await asyncio.sleep(14)   # past the timeout, and the broker's sweep (10 s)
            assert await tx.commit(tp, _entries(out, range(3, 6)))
            assert await _committed(tx, tp, 6) == 6
        assert await _values(broker.bootstrap, out) == [f"v{i}".encode() for i in range(6)]
    asyncio.run(scenario())


def test_a_claim_and_a_commit_at_once_build_one_producer(broker, prefix):
    """A worker lane claims its partitions on assignment while its fetcher may already
    hand it their records: a commit that asks for the producer meanwhile waits for the
    one being built. Two would fence each other, and one would be left unclosed."""
    async def scenario():
        inp, out = await _topics(broker.bootstrap, prefix)
        tp = TopicPartition(inp, 0)
        async with PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as tx:
            await _group_known(tx, tp)   # as for a lane: assigned, so its group exists
            built, build = [], tx._start_producer

            async def counted(tp):
                built.append(tp)
                return await build(tp)
            tx._start_producer = counted
            claim = asyncio.create_task(tx.claim(tp))
            await asyncio.sleep(0)   # the claim has begun building
            assert await tx.commit(tp, _entries(out, range(3)))
            await claim
            assert built == [tp]
            assert await _committed(tx, tp, 3) == 3
        assert await _values(broker.bootstrap, out) == [b"v0", b"v1", b"v2"]
    asyncio.run(scenario())


@pytest.mark.parametrize("early", [False, True], ids=["begun-at-commit", "begun-early"])
def test_a_commit_never_has_its_produce_retried(broker, prefix, caplog, early):
    """Beside AddOffsetsToTxn or a transaction's first TxnOffsetCommit, the broker's
    verification of the produce (KIP-890) met the other request at the transaction
    coordinator in about one commit of twenty here, and failed it with
    NOT_ENOUGH_REPLICAS, retried by the producer after its backoff. A commit begun at
    the commit sends each request alone; one begun early restated its position
    already, so its produce goes beside a TxnOffsetCommit the broker does not verify.
    Neither had a produce retried, and each TxnOffsetCommit was answered at once."""
    caplog.set_level(logging.WARNING, logger="aiokafka.producer.sender")
    sent = asyncio.run(_one_after_another(broker, prefix, COMMITS, early))
    restated = COMMITS - 1 if early else 0
    assert sent.count("TxnOffsetCommitRequest") == COMMITS - 1 + restated
    retried = [r.getMessage() for r in caplog.records if "produce response" in r.getMessage()
               and "NotEnoughReplicas" in r.getMessage()]   # a failed verification
    assert retried == []


COMMITS = 200


def test_a_commit_right_behind_the_last_adds_its_partitions_once(broker, prefix):
    """A commit begun at the commit, right behind its partition's last, meets the
    coordinator still writing that one's markers (CONCURRENT_TRANSACTIONS). Its
    AddOffsetsToTxn goes first and is retried a millisecond apart; were its
    AddPartitionsToTxn first, aiokafka would retry it only after 20 ms, and an
    interactive round behind another waited those 20 ms in about one case of two."""
    sent = asyncio.run(_one_after_another(broker, prefix, BEHIND))
    commits = [n for n in sent if n in TRANSACTION_REQUESTS]
    assert commits.count("AddPartitionsToTxnRequest") == BEHIND - 1
    steps = [n for i, n in enumerate(commits) if i == 0 or n != commits[i - 1]]
    assert steps == (BEHIND - 1) * [   # an AddOffsetsToTxn retried counts once
        "AddOffsetsToTxnRequest", "AddPartitionsToTxnRequest", "ProduceRequest",
        "TxnOffsetCommitRequest", "EndTxnRequest"]


BEHIND = 50


async def _one_after_another(broker, prefix: str, commits: int, early: bool = False
                             ) -> list[str]:
    """``commits`` commits of one record each on one partition, each right after the
    last (with ``early``, begun early 5 ms before it); the requests sent by all but the
    first, which builds the producer and fences in its transactional id."""
    inp, out = await _topics(broker.bootstrap, prefix)
    tp = TopicPartition(inp, 0)
    async with PartitionTransactions(broker.kafka, f"{prefix}.g", TIMEOUT_MS) as tx:
        assert await tx.commit(tp, _entries(out, [0]))
        with _requests_sent(tx._producers[tp]) as sent:
            for offset in range(1, commits):
                if early:
                    tx.begin_early(tp, [(out, b"k")])
                    await asyncio.sleep(0.005)   # the stage at work
                assert await tx.commit(tp, _entries(out, [offset]))
        assert await _committed(tx, tp, commits) == commits
    return sent


def test_a_partition_is_unchanged_until_another_owner_commits_from_it(broker, prefix):
    """What lets a lane keep a partition's producer across a rebalance (workers/lane.py):
    its offset is still the last this owner committed; once another has committed from
    it, it is not, and the lane takes it over afresh."""
    async def scenario() -> list[bool]:
        src, out = await _topics(broker.bootstrap, prefix)
        tp, group = TopicPartition(src, 0), f"{prefix}.g"
        seen = []
        async with PartitionTransactions(broker.kafka, group, TIMEOUT_MS) as first:
            await _group_known(first, tp)
            seen.append(await first.unchanged(tp))   # no producer yet: nothing to keep
            assert await first.commit(tp, _entries(out, range(3)))
            await _committed(first, tp, 3)
            seen.append(await first.unchanged(tp))
            async with PartitionTransactions(broker.kafka, group, TIMEOUT_MS) as second:
                assert await second.commit(tp, _entries(out, range(3, 5), "w"))
                await _committed(second, tp, 5)
            seen.append(await first.unchanged(tp))
        return seen

    assert asyncio.run(scenario()) == [False, True, False]
