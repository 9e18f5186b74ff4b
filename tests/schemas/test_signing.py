import numpy as np

from kip.schemas.signing import body_sha256, canonical_string, sign, signature_matches
from kip.schemas.tensors import Tensor

FIELDS = dict(request_id="r-1", tenant="acme", key_id="k1", issued_at_ms=1700000000000,
              priority="standard", model="digits", deadline_ms=None, reply_to=None)


def test_canonical_string_is_documented_layout():
    inputs = [Tensor.text("text", ["a"])]
    lines = canonical_string(**FIELDS, inputs=inputs).decode().split("\n")
    assert lines == ["kip-request-v1", "r-1", "acme", "k1", "1700000000000", "standard",
                     "digits", "", "", body_sha256(inputs)]


def test_signature_covers_fields_and_body():
    inputs = [Tensor.from_array("pixels", np.zeros((1, 64), np.float32))]
    sig = sign(b"secret", **FIELDS, inputs=inputs)
    assert signature_matches(b"secret", sig, **FIELDS, inputs=inputs)
    assert not signature_matches(b"other", sig, **FIELDS, inputs=inputs)
    assert not signature_matches(b"secret", sig, **(FIELDS | {"model": "minilm"}),
                                 inputs=inputs)
    changed = [Tensor.from_array("pixels", np.ones((1, 64), np.float32))]
    assert not signature_matches(b"secret", sig, **FIELDS, inputs=changed)


def test_body_digest_ignores_json_spelling():
    as_list = Tensor(name="x", datatype="FP32", shape=[2], data=[1, 2.0])
    as_raw = Tensor.from_array("x", np.array([1, 2], np.float32))
    assert body_sha256([as_list]) == body_sha256([as_raw])
