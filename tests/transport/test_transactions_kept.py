"""Transactions kept begun between commits (``keep_begun``, as the pipeline runs them),
on the real broker: the next commit finds its group and partitions added, a partition
it lacks is added before any produce goes, and one kept idle is aborted by the stage
before the broker's timeout would fence its producer, and begun again for a while."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings

import pytest
from aiokafka import TopicPartition

from tests.e2e.conftest import read_topic
from tests.transport.test_transactions import (TIMEOUT_MS, TRANSACTION_REQUESTS, _committed,
                                            _create, _requests_sent, _round,
                                            beside_then_end)
from kip.transport.outputs import Record
from kip.transport import transactions
from kip.transport.transactions import Entry, PartitionTransactions

pytestmark = pytest.mark.broker


async def _topics(bootstrap: str, prefix: str) -> tuple[str, str, str]:
    """Two topics placed freely and one by key, 3 partitions each."""
    await _create(bootstrap, {f"{prefix}.in": 1, f"{prefix}.free": 3,
                              f"{prefix}.extra": 3, f"{prefix}.keyed": 3})
    return f"{prefix}.free", f"{prefix}.extra", f"{prefix}.keyed"


def _kept(broker, prefix: str, timeout_ms: int = TIMEOUT_MS) -> PartitionTransactions:
    return PartitionTransactions(broker.kafka, f"{prefix}.g", timeout_ms, keep_begun=True,
                                 any_partition=lambda t: not t.endswith(".keyed"))


def _in(prefix: str) -> TopicPartition:
    return TopicPartition(f"{prefix}.in", 0)


def _with_extra(entries: list[Entry], extra: str) -> list[Entry]:
    last = entries[-1]
    return [*entries[:-1], Entry(last.offset, [*last.outputs, Record(extra, b"x", b"x", [])])]


def _transactional(sent: list[str]) -> list[str]:
    return [n for n in sent if n in TRANSACTION_REQUESTS]


def test_a_kept_transaction_carries_the_next_commit(broker, prefix):
    """Once a commit is done the next transaction begins with the group, a fresh
    partition of each free topic and every partition of the keyed one: the next
    commit, to more keys, sends only the produce and TxnOffsetCommit, side by side,
    and EndTxn. A partition named by ``begin_early`` meanwhile is added to the kept
    transaction."""
    async def scenario():
        free, extra, keyed = await _topics(broker.bootstrap, prefix)
        tp = _in(prefix)
        async with _kept(broker, prefix) as tx:
            assert await tx.commit(tp, _round(free, keyed, 0, b"first"))
            await asyncio.sleep(0.5)   # the next request has not come yet
            tx.begin_early(tp, [(extra, None)])
            await asyncio.sleep(0.2)
            entries = _with_extra(_round(free, keyed, 5, b"next", count=8), extra)
            with _requests_sent(tx._producers[tp]) as sent:
                assert await tx.commit(tp, entries)
            assert beside_then_end(sent)
            assert await _committed(tx, tp, 13) == 13
        values = [r.value for t in (free, keyed) for r in await read_topic(broker.kafka, t)]
        assert sorted(values) == [b"first"] * 10 + [b"next"] * 16
        assert [r.value for r in await read_topic(broker.kafka, extra)] == [b"x"]
    asyncio.run(scenario())


def test_a_partition_the_kept_transaction_lacks_is_added_before_any_produce(broker, prefix):
    """Beside an AddPartitionsToTxn, a produce to the partitions added already would meet
    it at the coordinator (transport/transactions.py): the commit adds the new one first,
    and then sends one produce for them all, beside its TxnOffsetCommit."""
    async def scenario():
        free, extra, keyed = await _topics(broker.bootstrap, prefix)
        tp = _in(prefix)
        async with _kept(broker, prefix) as tx:
            assert await tx.commit(tp, _round(free, keyed, 0, b"first"))
            await asyncio.sleep(0.5)
            with _requests_sent(tx._producers[tp]) as sent:
                assert await tx.commit(tp, _with_extra(_round(free, keyed, 5, b"n"), extra))
            assert _transactional(sent)[0] == "AddPartitionsToTxnRequest"
            assert beside_then_end(_transactional(sent)[1:])
            assert await _committed(tx, tp, 10) == 10
    asyncio.run(scenario())


@pytest.mark.parametrize("keep_for_s", [60.0, 0.9], ids=["begun-again", "idle-too-long"])
def test_a_kept_transaction_left_idle_is_aborted_before_the_broker_would(
        broker, prefix, caplog, monkeypatch, keep_for_s):
    """At a third of the transaction timeout the stage aborts the kept transaction
    itself, and begins it again while the partition's last commit is under
    ``KEEP_FOR_S`` old: the next commit, seconds later, finds one begun and needs no
    new producer (the broker's own abort would have fenced the old one). Idle longer,
    none is begun until the next commit."""
    monkeypatch.setattr(transactions, "KEEP_FOR_S", keep_for_s)

    async def scenario():
        free, _, keyed = await _topics(broker.bootstrap, prefix)
        tp = _in(prefix)
        async with _kept(broker, prefix, timeout_ms=1_500) as tx:
            assert await tx.commit(tp, _round(free, keyed, 0, b"first"))
            producer = tx._producers[tp]
            with _requests_sent(producer) as idle:
                await asyncio.sleep(1.8)   # kept at once, aborted ~0.5 s after each begin
            renewed = keep_for_s > 1.8
            assert _transactional(idle).count("EndTxnRequest") >= 2
            assert producer._txn_manager.is_in_transaction() == renewed
            with _requests_sent(producer) as sent:
                assert await tx.commit(tp, _round(free, keyed, 5, b"later"))
            assert beside_then_end(sent) == renewed
            assert tx._producers[tp] is producer
            assert await _committed(tx, tp, 10) == 10
    caplog.set_level(logging.INFO, logger="kip.transactions")
    asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records if r.name == "kip.transactions"] == []


@pytest.mark.parametrize("after_s", [0.0, 0.003], ids=["before-it-begins", "while-it-begins"])
def test_a_partition_released_while_its_next_is_kept_leaves_nothing_running(broker, prefix,
                                                                           after_s):
    """Released (revoked) before its kept transaction begins, or while it begins: its
    timer and background step end with the producer, nothing reports a lost error or a
    step never run, and the next owner's commit goes through."""
    lost: list = []

    async def scenario():
        asyncio.get_running_loop().set_exception_handler(lambda _, c: lost.append(c))
        free, _, keyed = await _topics(broker.bootstrap, prefix)
        tp = _in(prefix)
        async with _kept(broker, prefix) as tx:
            assert await tx.commit(tp, _round(free, keyed, 0, b"first"))
            await asyncio.sleep(after_s)
            await tx.release(tp)
            assert tp not in tx._beginning and tp not in tx._begun
            await asyncio.sleep(0.1)
            assert tp not in tx._producers   # nothing began it again
            assert await tx.commit(tp, _round(free, keyed, 5, b"next"))
            assert await _committed(tx, tp, 10) == 10
        gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(scenario())
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert [c["message"] for c in lost] == []


def test_a_partition_whose_rounds_come_back_to_back_keeps_none(broker, prefix):
    """A round that comes within ``KEEP_WHEN_IDLE_S`` of its partition's last commit
    would wait for a kept transaction to begin: none is kept after it, and a round that
    comes after a pause keeps one again."""
    async def scenario():
        free, _, keyed = await _topics(broker.bootstrap, prefix)
        tp = _in(prefix)
        async with _kept(broker, prefix) as tx:
            for first in (0, 5, 10):   # the first after no commit at all: kept, then not
                assert await tx.commit(tp, _round(free, keyed, first, b"v"))
            await asyncio.sleep(0.3)
            assert tp not in tx._begun
            assert await tx.commit(tp, _round(free, keyed, 15, b"v"))   # after a pause
            await asyncio.sleep(0.3)
            assert tp in tx._begun
    asyncio.run(scenario())
