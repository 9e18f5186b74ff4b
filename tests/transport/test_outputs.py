"""A stage's outputs become records keyed the way readers expect."""

from __future__ import annotations

from kip.schemas.codec import TYPE_HEADER, decode
from kip.schemas.errors import InvalidRequest
from kip.schemas.messages import InferenceResult, Status
from kip.schemas.endings import Coordinates, undecodable_ending
from kip.topics.names import TopicNames
from kip.transport.outputs import Document, Output, Sealing, ending, signed_records
from kip.schemas.result_signatures import ResultSigningKey

NAMES = TopicNames("t")
TRACE = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
SIGNING_KEY = ResultSigningKey.generate()
SEALING = Sealing(SIGNING_KEY.signer())


def records(outputs: list[Output], sealing: Sealing) -> list:
    """The records of one request's outputs, as a stage signs them."""
    return signed_records([outputs], sealing)[0]


def test_an_ending_is_result_audit_and_dead_letter_each_keyed_for_its_reader():
    end = undecodable_ending(b'{"request_id": "r-9", "reply_to": "t.results.mine"}',
                      Coordinates("t.requests.batch", 1, 7), InvalidRequest("bad"),
                      stage="pipeline", status=Status.REJECTED, now_ms=5)
    assert end.reply_to == "t.results.mine"   # read off the payload, not yet trusted
    out = records(ending(NAMES, NAMES.results, end.result, end.audit, end.deadletter), SEALING)
    anyones = b"undecodable.t.requests.batch.1.7"   # an id merely read off it is no one's
    assert [(r.topic, r.key) for r in out] == [
        ("t.results", anyones), ("t.audit", anyones), ("t.deadletter", b"t.requests.batch")]
    assert end.deadletter.request_id == "r-9"   # kept for the operator
    assert decode(InferenceResult, out[0].value).error.code == "INVALID_REQUEST"
    assert [dict(r.headers)[TYPE_HEADER] for r in out] == [
        b"inference-result", b"audit-record", b"dead-letter"]


def test_audit_records_name_pseudonyms_where_the_operator_keeps_a_key():
    from kip.schemas.messages import AuditRecord
    from kip.schemas.pseudonyms import PseudonymKey

    key = PseudonymKey.generate("p1")
    audit = AuditRecord(request_id="r-1", stage="pipeline", decision="routed", final=False,
                        tenant="acme", key_id="acme-k1", payload_bytes=3, at_ms=1)
    sealed = decode(AuditRecord, records([Output("t.audit", audit)],
                                         Sealing(SIGNING_KEY.signer(), pseudonym_key=key))[0].value)
    assert sealed.tenant == key.of("tenant", "acme") != key.of("key_id", "acme")
    assert sealed.key_id == key.of("key_id", "acme-k1")
    assert sealed.tenant.startswith("ps.p1.") and len(sealed.tenant) == len("ps.p1.") + 24
    assert PseudonymKey.generate("p1").of("tenant", "acme") != sealed.tenant   # keyed
    plain = decode(AuditRecord, records([Output("t.audit", audit)], SEALING)[0].value)
    assert (plain.tenant, plain.key_id) == ("acme", "acme-k1")


def _result(request_id: str) -> InferenceResult:
    from kip.schemas.messages import Timings
    return InferenceResult(request_id=request_id, status=Status.OK,
                           timings=Timings(total_ms=1.0), produced_at_ms=1)


def test_a_batchs_results_share_one_signature_and_each_verifies_alone():
    from kip.schemas.result_signatures import ResultKeys
    groups = [[Output("t.results", _result(f"r-{i}")), Output("t.audit", _audit(f"r-{i}"))]
              for i in range(5)]
    built = signed_records(groups, SEALING)
    signatures = [dict(group[0].headers)["kip-signature"].decode() for group in built]
    assert {s.split(":")[2] for s in signatures} == {signatures[0].split(":")[2]}
    assert [s.split(":")[3:5] for s in signatures] == [[str(i), "5"] for i in range(5)]
    assert all("kip-signature" not in dict(group[1].headers) for group in built)
    verifier = ResultKeys(keys={SIGNING_KEY.key_id: SIGNING_KEY.public()}).verifier()
    fresh = ResultKeys(keys={SIGNING_KEY.key_id: SIGNING_KEY.public()}).verifier
    assert all(fresh().valid(group[0].value, group[0].headers) for group in built)
    assert all(verifier.valid(group[0].value, group[0].headers) for group in built)
    swapped = built[1][0].value, built[2][0].headers
    assert not verifier.valid(*swapped) and not fresh().valid(*swapped)


def test_a_lone_result_keeps_the_single_result_signature():
    (record,) = records([Output("t.results", _result("r-1"))], SEALING)
    scheme = dict(record.headers)["kip-signature"].decode().split(":")[0]
    assert scheme == "ed25519"


def _audit(request_id: str):
    from kip.schemas.messages import AuditRecord
    return AuditRecord(request_id=request_id, stage="worker", decision="ok", final=True,
                       payload_bytes=0, at_ms=1)


def test_a_document_is_sealed_as_its_message_would_be():
    """A message written as the document of its fields (``Document``) is kept, keyed
    and encoded as the same message written as a model."""
    from kip.schemas.messages import AuditRecord, DeadLetterRecord
    from kip.schemas.pseudonyms import PseudonymKey

    audit = AuditRecord(request_id="r-1", stage="worker", decision="ok", final=True,
                        tenant="acme", key_id="acme-k1", payload_bytes=0, at_ms=1)
    dead = DeadLetterRecord(request_id="r-1", origin_topic="t.work.m.batch", origin_partition=0,
                            origin_offset=3, error_code="INVALID_REQUEST", reason="bad",
                            payload_b64="e30=", payload_sha256="0" * 64, payload_bytes=2,
                            at_ms=1)
    keyed = Sealing(SIGNING_KEY.signer(), pseudonym_key=PseudonymKey.generate("p1"))
    for sealing in (SEALING, keyed, Sealing(SIGNING_KEY.signer(), keep_payloads=True)):
        for message in (audit, dead):
            fields = message.model_dump(mode="json", exclude_none=True)
            document = Document("t.x", type(message), fields, TRACE)
            assert document.record(sealing) == Output(
                "t.x", message, document.traceparent).record(sealing)
