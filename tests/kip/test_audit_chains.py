"""The audit chains' check, on records built by the writers' own linking (transport.outputs.
Chaining): a true chain holds, and each kind of tampering is named at its record. The
same check on the real broker, through ``kip audit verify``, is in test_audit_verify.py."""

from __future__ import annotations

from kip.schemas.audit_chain import CHAIN_HEADER, SEAL_HEADER, ChainHead, Link, link_hash
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey
from kip.audit.chains import ChainCheck
from kip.transport.outputs import Chaining, Record

KEY = ResultSigningKey.generate("r1")
TRUSTED = ResultKeys(keys={"r1": KEY.public()}).verifier()
CHAINING = Chaining("t.audit", KEY.signer())


def _written(transactions: list[int], head: ChainHead | None = None) -> list[Record]:
    """One writer's audit records: transactions of the given sizes, with a result record
    (not chained) between them."""
    head = head or ChainHead.start("g.t.requests.0")
    out: list[Record] = []
    for number, size in enumerate(transactions):
        batch = [Record("t.audit", b"k", f'{{"tx":{number},"i":{i}}}'.encode(), [])
                 for i in range(size)] + [Record("t.results", b"k", b"result", [])]
        linked, head = CHAINING.link(head, batch)
        out += [r for r in linked if r.topic == "t.audit"]
    return out


def _check(records: list[Record], complete: bool = True):
    check = ChainCheck(TRUSTED, complete)
    for offset, record in enumerate(records):
        check.add(0, offset, record.value, record.headers)
    return check.finish()


def test_a_true_chain_holds_and_only_each_transactions_last_record_is_sealed():
    records = _written([3, 1, 4])
    summary = _check(records)
    assert summary.ok and summary.chains == 1 and summary.records == 8
    assert summary.sealed == 3
    assert [SEAL_HEADER in dict(r.headers) for r in records] == [
        False, False, True, True, False, False, False, True]


def test_a_chain_continues_from_the_head_committed_with_the_offset():
    first = ChainHead.start("g.t.requests.0")
    records = _written([2, 2], first)
    _, head = CHAINING.link(first, [Record("t.audit", b"k", r.value, []) for r in records])
    again = ChainHead.from_metadata(head.metadata(), "g.t.requests.0")
    assert again == head
    assert _check(records + _written([2], again)).ok
    assert ChainHead.from_metadata("", "g.t.requests.0").chain_id != first.chain_id


def test_an_altered_record_is_named():
    records = _written([3, 3])
    records[1] = records[1]._replace(value=records[1].value.replace(b'"i":1', b'"i":9'))
    problems = _check(records).problems
    assert [p.where.offset for p in problems] == [1]
    assert "seq 1 does not link into seq 2" in problems[0].what


def test_an_altered_sealed_record_is_named_by_its_seal():
    records = _written([3, 3])
    records[2] = records[2]._replace(value=b'{"tx":0,"i":2,"decision":"ok"}')
    problems = _check(records).problems
    assert {p.where.offset for p in problems} == {2}
    assert any("seal does not verify" in p.what for p in problems)


def test_a_dropped_record_leaves_a_gap():
    records = _written([3, 3])
    del records[4]
    problems = _check(records).problems
    assert [p.where.offset for p in problems] == [3, 4]   # the break, then the gap
    assert "seq 3: no seal covers it" in problems[0].what
    assert "seq 4 missing" in problems[1].what


def test_a_dropped_seal_leaves_its_transaction_uncovered():
    records = _written([3, 3])
    del records[5]
    problems = _check(records).problems
    assert [p.where.offset for p in problems] == [3]
    assert "seq 3-4: no seal covers it" in problems[0].what


def test_a_record_inserted_without_the_key_is_named():
    records = _written([2, 2])
    last = Link.read(records[-1].value, records[-1].headers)
    forged_value = b'{"forged":true}'
    forged = Record("t.audit", b"k", forged_value, [
        (CHAIN_HEADER, f"{last.chain_id} {last.seq + 1} {last.hash}".encode())])
    problems = _check(records + [forged]).problems
    assert [p.where.offset for p in problems] == [4] and "no seal" in problems[0].what
    other = ResultSigningKey.generate("r1").signer()   # same key id, another key
    sealed = forged._replace(headers=[*forged.headers, (SEAL_HEADER, other.signature(
        b"kip-audit-seal-v1\n" + link_hash(last.chain_id, last.seq + 1, last.hash,
                                           forged_value).encode()).encode())])
    assert "seal does not verify" in _check(records + [sealed]).problems[0].what


def test_two_swapped_records_are_named():
    records = _written([4])
    records[1], records[2] = records[2], records[1]
    problems = _check(records).problems
    assert [p.where.offset for p in problems] == [2] and "reordered" in problems[0].what


def test_a_copied_record_and_an_unchained_one_are_named():
    records = _written([2, 2])
    problems = _check(records + [records[1], Record("t.audit", b"k", b"{}", [])]).problems
    assert [p.where.offset for p in problems] == [4, 4, 5]
    assert {p.what.split(": ")[-1] for p in problems} == {
        "records reordered or copied", "copied, or inserted",
        "not written by a kip stage"}


def test_a_range_that_ends_early_counts_its_unsealed_tail_instead_of_failing():
    records = _written([3, 3])[:5]
    assert not _check(records).ok
    summary = _check(records, complete=False)
    assert summary.ok and summary.unsealed_in_range == 2


def test_a_chain_that_ends_before_its_committed_head_lost_its_last_transaction():
    head = ChainHead.start("g.t.requests.0")
    records = _written([3, 3], head)
    _, committed = CHAINING.link(head, [Record("t.audit", b"k", r.value, []) for r in records])
    assert ChainCheck(TRUSTED, heads={committed.chain_id: committed}).finish().ok is True

    def checked(kept: list[Record], complete: bool = True):
        check = ChainCheck(TRUSTED, complete, heads={committed.chain_id: committed})
        for offset, record in enumerate(kept):
            check.add(0, offset, record.value, record.headers)
        return check.finish()
    assert checked(records).ok and checked(records).heads == 1
    problems = checked(records[:3]).problems
    assert [p.where.offset for p in problems] == [2] and "seq 3-5 dropped" in problems[0].what
    assert checked(records[:3], complete=False).ok   # a range that ends early: not checked


def test_a_writer_finding_metadata_that_is_not_a_head_starts_a_new_chain():
    """Offset metadata is anyone's to commit: a stage must not stop on a malformed one."""
    for metadata in ("kip-chain-v2 a b", "kip-chain-v1 c 1 xyz", "kip-chain-v9 c 1 " + "0" * 64,
                     "kip-chain-v1 c -1 " + "0" * 64, "something else", "", None):
        head = ChainHead.from_metadata(metadata, "writer")
        assert head.chain_id.startswith("writer~") and head.seq == 0
    kept = ChainHead("c", 3, "a" * 64, "ed25519:r1:" + "b" * 128)
    assert ChainHead.from_metadata(kept.metadata(), "writer") == kept
