"""``kip audit verify`` on the real broker: audit records written by a stage's own
transactions (two owners of the input partition in turn, so the chain crosses a move)
verify; copies of that topic with one record altered, dropped, inserted by a writer
without the key, or two swapped, or its last transaction dropped, fail, naming the
record.

The writer's consumer group is named for the copies' deployment (``<prefix>x``), so
verifying a copy also checks it against the chain head the writer committed."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from kip.audit.reading import committed_metadata, kafka_records, verify
from kip.schemas.audit_chain import CHAIN_HEADER, ChainHead, Link
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey
from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec
from kip.topics.names import TopicNames
from kip.transport.outputs import Chaining, Record
from kip.transport.transactions import Entry, PartitionTransactions

pytestmark = pytest.mark.broker
KEY = ResultSigningKey.generate("r1")
TRUSTED = ResultKeys(keys={"r1": KEY.public()}).verifier()
AUDIT_PARTITIONS = 2


async def _create(broker, topics: dict[str, int]) -> None:
    await apply(broker.kafka, [TopicSpec(t, n, "test", "test") for t, n in topics.items()])


async def _write_genuine(broker, prefix: str) -> TopicNames:
    """Ten transactions of audit records (and results) from one input partition, the
    partition moving to a second owner half way."""
    names = TopicNames(prefix)
    await _create(broker, {f"{prefix}.in": 1, names.audit: AUDIT_PARTITIONS,
                                     names.results: 1})
    tp = TopicPartition(f"{prefix}.in", 0)
    for owner in range(2):
        async with PartitionTransactions(broker.kafka, f"{prefix}x-g", 3_000,
                                         chaining=Chaining(names.audit, KEY.signer())) as tx:
            for n in range(owner * 5, owner * 5 + 5):
                entries = [Entry(n * 3 + i, [
                    Record(names.audit, f"r{n}.{i}".encode(), f'{{"n":{n},"i":{i}}}'.encode(), []),
                    Record(names.results, f"r{n}.{i}".encode(), b"result", [])])
                    for i in range(3)]
                assert await tx.commit(tp, entries)
    return names


async def _copy(broker, names: TopicNames, prefix: str, tamper) -> TopicNames:
    """The audit topic's records, partition by partition, written to ``prefix``'s audit
    topic by a plain producer (a writer without the key) after ``tamper`` changed them."""
    copy = TopicNames(prefix)
    await _create(broker, {copy.audit: AUDIT_PARTITIONS})
    by_partition: dict[int, list[Record]] = {p: [] for p in range(AUDIT_PARTITIONS)}
    async for r in kafka_records(broker.kafka, names, 0):
        by_partition[r.partition].append(Record(copy.audit, r.key, r.value, list(r.headers),
                                                r.partition))
    tamper(by_partition)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for partition, records in by_partition.items():
            for r in records:
                await producer.send_and_wait(copy.audit, r.value, key=r.key,
                                             headers=r.headers, partition=partition)
    finally:
        await producer.stop()
    return copy


def _problems(broker, names: TopicNames) -> list[tuple[int, int, str]]:
    summary = asyncio.run(verify(broker.kafka, names, TRUSTED, 0))
    return [(p.where.partition, p.where.offset, p.what) for p in summary.problems]


def _seq(record: Record) -> int:
    return Link.read(record.value, record.headers).seq


def _altered(parts) -> str:
    r = parts[0][1]
    parts[0][1] = r._replace(value=r.value.replace(b'"i"', b'"j"'))
    return "record [0]@1"


def _dropped(parts) -> str:
    gone = parts[0].pop(2)
    return f"seq {_seq(gone)} missing"


def _inserted(parts) -> str:
    """A record appended to the chain's end, linked as a writer would link it."""
    partition, last = max(((p, r) for p, rs in parts.items() for r in rs),
                          key=lambda pr: _seq(pr[1]))
    link = Link.read(last.value, last.headers)
    parts[partition].append(Record("", b"forged", b'{"n":99}', [
        (CHAIN_HEADER, f"{link.chain_id} {link.seq + 1} {link.hash}".encode())]))
    return f"record [{partition}]@{len(parts[partition]) - 1}"


def _truncated(parts) -> str:
    """The last transaction's records gone: nothing after them points back."""
    last = max(_seq(r) for rs in parts.values() for r in rs)
    for partition in parts:
        parts[partition] = [r for r in parts[partition] if _seq(r) < last - 2]
    return f"seq {last - 2}-{last} dropped from its end"


def _swapped(parts) -> str:
    parts[1][1], parts[1][2] = parts[1][2], parts[1][1]
    return "record [1]@2"


def test_the_chain_of_a_stages_transactions_verifies_across_an_owner_change(broker, prefix):
    names = asyncio.run(_write_genuine(broker, prefix))
    summary = asyncio.run(verify(broker.kafka, names, TRUSTED, 0))
    assert summary.ok, summary.problems
    assert (summary.records, summary.chains, summary.sealed) == (30, 1, 10)
    untrusted = ResultKeys(keys={"r1": ResultSigningKey.generate("r1").public()})
    assert not asyncio.run(verify(broker.kafka, names, untrusted.verifier(), 0)).ok
    copy = asyncio.run(_copy(broker, names, f"{prefix}x", lambda parts: None))
    summary = asyncio.run(verify(broker.kafka, copy, TRUSTED, 0))
    assert summary.ok and summary.heads == 1, summary.problems


@pytest.mark.parametrize("tamper", [_altered, _dropped, _inserted, _swapped, _truncated])
def test_a_tampered_copy_fails_naming_the_record(broker, prefix, tamper):
    names = asyncio.run(_write_genuine(broker, prefix))
    named: list[str] = []

    def tampered(parts) -> None:
        named.append(tamper(parts))
    copy = asyncio.run(_copy(broker, names, f"{prefix}x", tampered))
    summary = asyncio.run(verify(broker.kafka, copy, TRUSTED, 0))
    assert not summary.ok
    assert any(named[0] in str(p) for p in summary.problems), (named, summary.problems)


def test_the_command_names_the_first_broken_record(broker, prefix, tmp_path, monkeypatch,
                                                   capsys):
    from kip.cli import main

    names = asyncio.run(_write_genuine(broker, prefix))
    copy = asyncio.run(_copy(broker, names, f"{prefix}y", _swapped))
    keys = tmp_path / "result-public.json"
    keys.write_text(ResultKeys(keys={"r1": KEY.public()}).model_dump_json())
    monkeypatch.setenv("KIP_BOOTSTRAP", broker.bootstrap)
    untouched = asyncio.run(_copy(broker, names, f"{prefix}x", lambda parts: None))
    for topics, status in ((untouched, 0), (copy, 1)):
        monkeypatch.setenv("KIP_TOPIC_PREFIX", topics.prefix)
        assert main(["audit", "verify", "--keys", str(keys)]) == status
    out = capsys.readouterr()
    assert "30 records in 1 chains, 10 seals, 1 committed heads" in out.out and "every chain holds" in out.out
    assert f"BROKEN at {copy.audit}[1]@2: chain" in out.err


def _commit_metadata(broker, group: str, topic: str, metadata: str) -> None:
    """Offset metadata committed in ``group`` by a plain client, as anyone the cluster
    lets into a group can."""
    async def go():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(1, metadata)})
        finally:
            await consumer.stop()
    asyncio.run(go())


def _genuine_head(broker, names: TopicNames) -> ChainHead:
    """The head the genuine writer committed (its group is the copies' deployment's)."""
    committed = asyncio.run(committed_metadata(broker.kafka, TopicNames(f"{names.prefix}x")))
    [head] = [ChainHead.parse(m) for _, _, m in committed if m]
    return head


@pytest.mark.parametrize("forged", ["malformed", "unsealed", "sealed by another key",
                                    "a real seal under a higher seq"])
def test_committed_metadata_that_is_not_an_authentic_head_is_set_aside(
        broker, prefix, forged, tmp_path, monkeypatch, capsys):
    """A head in offset metadata proves nothing unless its seal verifies: a malformed
    one, or one claiming the chain went further than it did, is reported and set aside,
    and no record is called dropped."""
    from kip.cli import main

    names = asyncio.run(_write_genuine(broker, prefix))
    copy = asyncio.run(_copy(broker, names, f"{prefix}x", lambda parts: None))
    real = _genuine_head(broker, names)
    further = ChainHead(real.chain_id, real.seq + 10, "f" * 64)
    other = ResultSigningKey.generate("r1").signer()
    metadata = {
        "malformed": "kip-chain-v2 only two",
        "unsealed": ChainHead(real.chain_id, real.seq + 10, "f" * 64).metadata(),
        "sealed by another key": ChainHead(
            real.chain_id, further.seq, further.last,
            other.signature(further.sealed_message())).metadata(),
        "a real seal under a higher seq": ChainHead(
            real.chain_id, real.seq + 10, real.last, real.seal).metadata(),
    }[forged]
    _commit_metadata(broker, f"{prefix}x-forger", f"{prefix}.in", metadata)
    summary = asyncio.run(verify(broker.kafka, copy, TRUSTED, 0))
    assert summary.ok, summary.problems
    [aside] = summary.heads_set_aside
    assert ("malformed" if forged == "malformed" else "not authenticated") in aside
    keys = tmp_path / "result-public.json"
    keys.write_text(ResultKeys(keys={"r1": KEY.public()}).model_dump_json())
    monkeypatch.setenv("KIP_BOOTSTRAP", broker.bootstrap)
    monkeypatch.setenv("KIP_TOPIC_PREFIX", copy.prefix)
    assert main(["audit", "verify", "--keys", str(keys)]) == 0
    out = capsys.readouterr()
    assert "every chain holds" in out.out and "set aside" in out.err


def test_an_authentic_head_still_catches_a_dropped_end_beside_a_forged_one(broker, prefix):
    names = asyncio.run(_write_genuine(broker, prefix))
    real = _genuine_head(broker, names)
    copy = asyncio.run(_copy(broker, names, f"{prefix}x", _truncated))
    _commit_metadata(broker, f"{prefix}x-forger", f"{prefix}.in",
                     ChainHead(real.chain_id, 2, "e" * 64).metadata())
    summary = asyncio.run(verify(broker.kafka, copy, TRUSTED, 0))
    assert any("dropped from its end" in p.what for p in summary.problems)
