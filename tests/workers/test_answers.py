"""A batch answered by ``workers.answers`` on the real digits model: a malformed work item,
even one carrying a valid stamp (as a pipeline that read it differently would send),
ends alone; every valid item in its batch is served, on its own reply topic."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from kip.schemas.codec import now_ms
from kip.schemas.messages import InferenceRequest, InferenceResult, Route
from kip.schemas.stamps import StampKeys, canonical_fields, stamp_mac
from kip.schemas.tensors import Tensor
from kip.topics.names import TopicNames
from kip.transport.outputs import Document, Output
from kip.workers.answers import Answering, answer
from kip.workers.pace import Pace
from kip.workers.sessions import Sessions

NAMES = TopicNames("kip")
TENANTS = ("acme", "bob", "carol")
KEYS = StampKeys.generate()


def _pixels(rows: int) -> dict:
    return {"name": "pixels", "datatype": "FP32", "shape": [rows, 64],
            "raw": base64.b64encode(np.random.rand(rows, 64).astype("<f4").tobytes()).decode()}


MALFORMED = {   # the request's inputs, as a document: each wrong for digits in one way
    "a name given twice, the first a scalar": lambda: [
        {"name": "pixels", "datatype": "FP32", "shape": [], "data": [0.5]}, _pixels(1)],
    "a name given twice, both valid": lambda: [_pixels(1), _pixels(2)],
    "scalar": lambda: [{"name": "pixels", "datatype": "FP32", "shape": [], "data": [0.5]}],
    "wrong datatype": lambda: [{"name": "pixels", "datatype": "FP64", "shape": [1, 64],
                                "raw": base64.b64encode(bytes(512)).decode()}],
    "too many rows": lambda: [_pixels(257)],
    "zero rows": lambda: [{"name": "pixels", "datatype": "FP32", "shape": [0, 64], "raw": ""}],
    "an extra input": lambda: [_pixels(1), {**_pixels(1), "name": "extra"}],
    "another input's name": lambda: [{**_pixels(1), "name": "image"}],
    "text": lambda: [{"name": "pixels", "datatype": "BYTES", "shape": [1], "data": ["x"]}],
    "three dimensions": lambda: [{"name": "pixels", "datatype": "FP32", "shape": [1, 8, 8],
                                  "raw": base64.b64encode(bytes(256)).decode()}],
    "one column short": lambda: [{"name": "pixels", "datatype": "FP32", "shape": [1, 63],
                                  "raw": base64.b64encode(bytes(252)).decode()}],
    "elements short of the shape": lambda: [{"name": "pixels", "datatype": "FP32",
                                             "shape": [2, 64],
                                             "raw": base64.b64encode(bytes(256)).decode()}],
    "NaN": lambda: [{"name": "pixels", "datatype": "FP32", "shape": [1, 64],
                     "data": [float("nan")] * 64}],
}


@pytest.fixture(scope="module")
def how(registry):
    async def build():
        sessions = Sessions(registry, device="cpu")
        manifest = registry.resolve("digits").manifest
        await sessions.get("digits", manifest.version)
        return sessions, manifest
    loop = asyncio.new_event_loop()
    sessions, manifest = loop.run_until_complete(build())
    answering = Answering("digits", KEYS, sessions, None, Pace(50.0), False, (1, 8), NAMES)
    try:
        yield answering, manifest, loop
    finally:
        sessions.close()
        loop.close()


def _item_bytes(manifest, tenant: str, inputs: list[dict], n: int,
                digest: str | None = None) -> bytes:
    """A work item document for ``inputs`` (valid or not), stamped with ``KEYS``."""
    request = {"schema_version": 1, "request_id": f"{tenant}-{n}", "tenant": tenant,
               "key_id": f"{tenant}-k", "signature": "0" * 64, "issued_at_ms": now_ms(),
               "priority": "standard", "model": "digits", "inputs": inputs}
    route = Route(alias="digits", model_name="digits", model_version=manifest.version,
                  artifact_sha256=digest or manifest.artifact_sha256)
    routed, deadline, reply_to = now_ms(), now_ms() + 60_000, NAMES.reply_topic(tenant)
    lines = canonical_fields(_unchecked(request), route, routed, deadline, reply_to, "a" * 64,
                             0)
    return orjson.dumps({"request": request, "route": route.model_dump(mode="json"),
                         "routed_at_ms": routed, "deadline_ms": deadline,
                         "reply_to": reply_to, "request_sha256": "a" * 64,
                         "work_partition": 0,
                         "stamp": {"key_id": KEYS.current, "mac": stamp_mac(lines, KEYS)}})


def _unchecked(doc: dict) -> InferenceRequest:
    """The request as the stamp reads it, built without validation (it may be invalid),
    each tensor's digest computed as ``Tensor.digest`` does from the bytes it carries."""
    tensors = []
    for t in doc["inputs"]:
        tensor = Tensor.model_construct(**t)
        tensor.__dict__["_content_digest"] = _digest(t)
        tensors.append(tensor)
    return InferenceRequest.model_construct(**{**doc, "inputs": tensors})


def _digest(t: dict) -> bytes:
    h = hashlib.sha256(f"{t['name']}\n{t['datatype']}\n{','.join(map(str, t['shape']))}\n"
                       .encode())
    if t["datatype"] == "BYTES":
        for text in t["data"]:
            h.update(len(text.encode()).to_bytes(4, "little") + text.encode())
    elif "raw" in t:
        h.update(base64.b64decode(t["raw"]))
    else:
        h.update(np.array(t["data"], "<f4").tobytes())
    return h.digest()


def _record(value: bytes, offset: int) -> ConsumerRecord:
    return ConsumerRecord("kip.work.digits.standard", 0, offset, now_ms(), 0, None, value,
                          None, 0, len(value), [])


def _result(outputs: list) -> tuple[str, InferenceResult]:
    for o in outputs:
        if isinstance(o, Document) and o.kind is InferenceResult:
            return o.topic, InferenceResult.model_validate(o.fields)
        if isinstance(o, Output) and isinstance(o.message, InferenceResult):
            return o.topic, o.message
    raise AssertionError(f"no result among {outputs}")


def _answer(how, records):
    """``records`` answered, in an inference thread of this call's own."""
    answering, _, loop = how
    with ThreadPoolExecutor(1, thread_name_prefix="kip-infer-test") as executor:
        answering.executor = executor
        return loop.run_until_complete(answer(records, float(now_ms()), answering))


def test_a_duplicated_input_name_among_twenty_valid_requests_fails_alone(how):
    _, manifest, _ = how
    records = [_record(_item_bytes(manifest, TENANTS[n % 2], [_pixels(1 + n % 3)], n), n)
               for n in range(20)]
    bad = _record(_item_bytes(manifest, "carol", MALFORMED[
        "a name given twice, the first a scalar"](), 99), 20)
    records.insert(7, bad)
    answers = _answer(how, records)
    assert set(answers) == {id(r) for r in records}
    for r in records:
        topic, result = _result(answers[id(r)])
        if r is bad:
            assert result.status == "failed" and result.error.code == "INVALID_REQUEST"
            assert topic == NAMES.results   # it did not decode: nothing says whose it is
        else:
            assert result.status == "ok", result.error
            assert topic == NAMES.reply_topic(result.tenant)


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_mixed_batches_never_end_a_valid_item_other_than_ok(how, seed):
    """Random batches of valid items and stamped malformed ones (every kind), in random
    order: every record gets one ending, every valid one ``ok`` with its own rows on
    its own reply topic, no malformed one ``ok``."""
    _, manifest, _ = how
    rng = random.Random(seed)
    np.random.seed(seed)
    for batch in range(8):
        records, valid = [], {}
        for n in range(rng.randint(2, 40)):
            tenant = rng.choice(TENANTS)
            if rng.random() < 0.6:
                rows = rng.randint(1, 4)
                value = _item_bytes(manifest, tenant, [_pixels(rows)], n)
                valid[n] = rows
            elif rng.random() < 0.15:
                value = _item_bytes(manifest, tenant, [_pixels(1)], n, digest="b" * 64)
            else:
                value = _item_bytes(manifest, tenant, rng.choice(list(MALFORMED.values()))(), n)
            records.append(_record(value, n))
        answers = _answer(how, records)
        assert set(answers) == {id(r) for r in records}
        for r in records:
            topic, result = _result(answers[id(r)])
            if r.offset in valid:
                assert result.status == "ok", (seed, batch, result.error)
                assert result.outputs[0].shape[0] == valid[r.offset]
                assert topic == NAMES.reply_topic(result.tenant)
            else:
                assert result.status == "failed", (seed, batch, result)
                assert result.error.code != "INTERNAL", result.error


def test_a_defect_in_one_requests_inference_fails_that_request_alone(how):
    """A defect (not a refusal) while running one request: the chunk runs again one by
    one, and only that request ends INTERNAL, on its own reply topic."""
    answering, manifest, _ = how
    session = next(iter(answering.sessions.loaded.values()))
    records = [_record(_item_bytes(manifest, TENANTS[n % 3], [_pixels(1)], n), n)
               for n in range(10)]
    real = session.execute_documents
    bad = _record(_item_bytes(manifest, "bob", [{
        "name": "pixels", "datatype": "FP32", "shape": [1, 64],
        "raw": base64.b64encode(np.full((1, 64), -1.0, "<f4").tobytes()).decode()}], 4), 10)
    records[4] = bad
    session.execute_documents = lambda p: (_raise() if (p.arrays["pixels"] < 0).any()
                                           else real(p))
    try:
        answers = _answer(how, records)
    finally:
        session.execute_documents = real
    for r in records:
        topic, result = _result(answers[id(r)])
        assert topic == NAMES.reply_topic(result.tenant)
        if r is bad:
            assert result.status == "failed" and result.error.code == "INTERNAL"
        else:
            assert result.status == "ok"


def _raise():
    raise ZeroDivisionError("a defect")
