import orjson
import pytest

from kip.schemas import (InferenceRequest, InferenceResult, InvalidRequest, Status, Tensor,
                         Timings, decode, encode, error_for_code, headers)
from kip.schemas.errors import ERROR_CODES, DeadlineExceeded, Internal
from kip.schemas.messages import PRIORITIES, Priority


def _request(**over) -> dict:
    base = dict(request_id="r-1", tenant="acme", key_id="k1", signature="0" * 64,
                issued_at_ms=1, priority="interactive", model="minilm",
                inputs=[Tensor.text("text", ["hi"]).model_dump(exclude_none=True)])
    return base | over


def test_request_round_trips_through_orjson():
    req = InferenceRequest(**_request(deadline_ms=5, traceparent="00-" + "a" * 32 + "-" +
                                      "b" * 16 + "-01"))
    assert decode(InferenceRequest, encode(req)) == req
    assert dict(headers(req, req.traceparent))["kip-type"] == b"inference-request"


@pytest.mark.parametrize("change, where", [
    ({"surprise": 1}, "surprise"),
    ({"priority": "urgent"}, "priority"),
    ({"schema_version": 2}, "schema_version"),
    ({"request_id": "has space"}, "request_id"),
    ({"inputs": []}, "inputs"),
    ({"signature": "xyz"}, "signature"),
])
def test_bad_requests_raise_invalid_request_naming_the_field(change, where):
    with pytest.raises(InvalidRequest, match=where):
        decode(InferenceRequest, orjson.dumps(_request(**change)))


def test_non_json_is_invalid_request():
    with pytest.raises(InvalidRequest):
        decode(InferenceRequest, b"\xff\x00 not json")


def test_result_rejects_nan_timings():
    with pytest.raises(ValueError):
        InferenceResult(request_id="r", status=Status.OK, produced_at_ms=0,
                        timings=Timings(total_ms=float("nan")))


def test_error_codes_are_stable_and_mapped_back():
    assert {"INVALID_REQUEST", "UNAUTHENTICATED", "FORBIDDEN", "MODEL_NOT_FOUND",
            "DEADLINE_EXCEEDED", "INTERNAL"} <= set(ERROR_CODES)
    assert error_for_code("DEADLINE_EXCEEDED") is DeadlineExceeded
    assert error_for_code("NO_SUCH_CODE") is Internal


def test_classes_are_ordered_once_highest_first():
    assert PRIORITIES == (Priority.INTERACTIVE, Priority.STANDARD, Priority.BATCH)
    assert [p.rank for p in PRIORITIES] == [0, 1, 2]
    assert Priority.STANDARD.and_above() == (Priority.INTERACTIVE, Priority.STANDARD)
    assert Priority.INTERACTIVE.below() == (Priority.STANDARD, Priority.BATCH)
    assert Priority.BATCH.below() == ()


def test_a_request_naming_an_input_twice_does_not_decode():
    doc = _request()
    doc["inputs"] = doc["inputs"] * 2
    with pytest.raises(InvalidRequest, match="input names must be unique"):
        decode(InferenceRequest, orjson.dumps(doc))
