import numpy as np
import orjson
import pytest

from kip.schemas.codec import decode, encode
from kip.schemas.errors import Unauthenticated
from kip.schemas.messages import InferenceRequest, Route, WorkItem
from kip.schemas.stamps import StampKeys, check_stamp, stamped
from kip.schemas.tensors import Tensor
from kip.schemas.work_items import encode_work_item

KEYS = StampKeys.generate("s1")
ROUTE = Route(alias="digits", model_name="digits", model_version="1", artifact_sha256="b" * 64)


def _request() -> InferenceRequest:
    return InferenceRequest(
        request_id="r-1", tenant="acme", key_id="k1", signature="0" * 64,
        issued_at_ms=1, priority="standard", model="digits", traceparent=None,
        inputs=[Tensor.from_array("pixels", np.arange(64, dtype=np.float32)[None])])


def _spliced(payload: bytes, **fields) -> bytes:
    request = decode(InferenceRequest, payload)
    return encode_work_item(payload, request, ROUTE, **({
        "routed_at_ms": 5, "deadline_ms": 9, "reply_to": "kip.results.acme",
        "request_sha256": "a" * 64, "work_partition": 2, "keys": KEYS} | fields))


def test_a_spliced_item_is_the_stamped_item_a_worker_decodes():
    payload = encode(_request())
    item = decode(WorkItem, _spliced(payload))
    check_stamp(item, KEYS)
    built = stamped(WorkItem(request=_request(), route=ROUTE, routed_at_ms=5, deadline_ms=9,
                             reply_to="kip.results.acme", request_sha256="a" * 64,
                             work_partition=2), KEYS)
    assert item == built
    moved = item.model_copy(update={"work_partition": 0})   # a copy told to run elsewhere
    with pytest.raises(Unauthenticated, match="does not match"):
        check_stamp(moved, KEYS)


def test_the_request_travels_byte_for_byte_however_its_producer_spelled_it():
    pretty = orjson.dumps(orjson.loads(encode(_request())), option=orjson.OPT_INDENT_2)
    raw = _spliced(pretty)
    assert pretty in raw
    item = decode(WorkItem, raw)
    check_stamp(item, KEYS)
    assert item.request == _request()


def test_optional_fields_are_left_out_and_a_changed_byte_breaks_the_stamp():
    raw = _spliced(encode(_request()), reply_to=None, request_sha256=None,
                   work_partition=None)
    item = decode(WorkItem, raw)
    assert item.reply_to is None and item.request_sha256 is None
    assert item.work_partition is None
    check_stamp(item, KEYS)
    other = Tensor.from_array("pixels", np.ones((1, 64), np.float32)).raw
    tampered = raw.replace(_request().inputs[0].raw.encode(), other.encode())
    with pytest.raises(Unauthenticated, match="does not match"):
        check_stamp(decode(WorkItem, tampered), KEYS)
