"""The fault report's counting, on hand-made topic contents: each defect it must catch."""

from __future__ import annotations

from kip.devkit.faults_report import Tally
from kip.schemas.codec import encode
from kip.schemas.messages import (AuditRecord, DeadLetterRecord, ErrorInfo, InferenceResult,
                                  Status, Timings)
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames

NAMES = TopicNames("t")
TRUSTED = ResultKeys(keys={"r1": ResultSigningKey.generate("r1").public()}).verifier()


def _result(request_id: str) -> bytes:
    return encode(InferenceResult(request_id=request_id, status=Status.OK,
                                  timings=Timings(total_ms=1.0), produced_at_ms=1))


def _overloaded(request_id: str, code: str = "OVERLOADED") -> bytes:
    return encode(InferenceResult(request_id=request_id, status=Status.REJECTED,
                                  error=ErrorInfo(code=code, message="busy"),
                                  timings=Timings(total_ms=1.0), produced_at_ms=1))


def _audit(request_id: str, final: bool = True) -> bytes:
    return encode(AuditRecord(request_id=request_id, stage="worker", decision="ok",
                              final=final, payload_bytes=0, at_ms=1))


def _dead(request_id: str) -> bytes:
    return encode(DeadLetterRecord(origin_topic="t.work.digits.standard", origin_partition=0,
                                   origin_offset=3, error_code="INFERENCE_FAILED",
                                   reason="NaN", request_id=request_id, payload_b64="",
                                   payload_bytes=0, at_ms=1))


def _tally(records: list[tuple[str, bytes]]) -> Tally:
    tally = Tally(KafkaConnection(bootstrap="unused:9092"), NAMES, TRUSTED)
    for topic, value in records:
        tally._count(topic, value)
    return tally


def test_a_clean_run_passes():
    t = _tally([(NAMES.results, _result("a")), (NAMES.audit, _audit("a", final=False)),
                (NAMES.audit, _audit("a")), (NAMES.results, _result("p")),
                (NAMES.audit, _audit("p")), (NAMES.deadletter, _dead("p"))])
    report = t.report({"a": "normal", "p": "overflowing-input"}, failed_sends=0)
    assert (report.lost, report.duplicated, report.unseen, report.orphaned) == (0, 0, 0, 0)
    assert report.poison == report.poison_deadlettered_once == 1
    assert report.passed


def test_each_defect_is_counted():
    t = _tally([
        (NAMES.results, _result("dup")), (NAMES.results, _result("dup")),
        (NAMES.audit, _audit("dup")),
        (NAMES.audit, _audit("seen-only", final=False)),          # lost, but seen
        (NAMES.results, _result("no-audit")),                     # orphaned
        (NAMES.results, _result("p")), (NAMES.audit, _audit("p")),
        (NAMES.deadletter, _dead("p")), (NAMES.deadletter, _dead("p")),   # twice
        (NAMES.results, _result("good")), (NAMES.audit, _audit("good")),
        (NAMES.deadletter, _dead("good"))])                       # good request dead-lettered
    report = t.report({"dup": "normal", "seen-only": "normal", "never": "normal",
                       "no-audit": "normal", "p": "bad-request", "good": "normal"},
                      failed_sends=0)
    assert report.duplicated == 1
    assert report.lost == 2 and report.unseen == 1
    assert report.orphaned == 1
    assert report.poison == 1 and report.poison_deadlettered_once == 0
    assert report.deadletters_not_poison == 1
    assert not report.passed


def test_an_audit_record_outside_the_chains_fails_the_run():
    t = _tally([(NAMES.results, _result("a")), (NAMES.audit, _audit("a"))])
    t.chains.add(0, 0, _audit("a"), [])   # as poll() feeds it: no chain header
    report = t.report({"a": "normal"}, failed_sends=0)
    assert not report.passed and "not written by a kip stage" in report.audit_chain_problems[0]


def test_poison_that_admission_turned_away_owes_no_dead_letter():
    """A worker outage can make admission reject a request OVERLOADED, or with no live
    worker MODEL_UNAVAILABLE, before any check runs on it: for poison, that is its one
    ending, and no dead letter is due; one that was dead-lettered anyway is a defect."""
    t = _tally([(NAMES.results, _overloaded("away")), (NAMES.audit, _audit("away")),
                (NAMES.results, _overloaded("closed", "MODEL_UNAVAILABLE")),
                (NAMES.audit, _audit("closed")),
                (NAMES.results, _result("p")), (NAMES.audit, _audit("p")),
                (NAMES.deadletter, _dead("p"))])
    report = t.report({"away": "overflowing-input", "closed": "overflowing-input",
                       "p": "overflowing-input"}, failed_sends=0)
    assert (report.poison, report.poison_deadlettered_once, report.poison_turned_away) == (3, 1, 2)
    assert report.passed and "2 more rejected OVERLOADED or MODEL_UNAVAILABLE" in \
        "\n".join(report.lines())
    t = _tally([(NAMES.results, _overloaded("away")), (NAMES.audit, _audit("away")),
                (NAMES.deadletter, _dead("away"))])
    assert not t.report({"away": "overflowing-input"}, failed_sends=0).passed
