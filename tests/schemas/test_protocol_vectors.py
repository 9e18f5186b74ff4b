"""The test vectors printed in docs/protocol.md hold."""

from pathlib import Path

from schemas.signing import body_sha256, sign
from schemas.tensors import Tensor

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
FIELDS = dict(request_id="req-0001", tenant="acme", key_id="acme-k1",
              issued_at_ms=1767225600000, priority="interactive", model="digits",
              deadline_ms=1767225601000, reply_to=None)


def test_signature_vector():
    pixels = Tensor(name="pixels", datatype="FP32", shape=[1, 4], data=[0.0, 0.5, 1.0, 0.25])
    assert pixels.raw is None and Tensor.from_array("pixels", pixels.array).raw in DOC
    assert pixels.digest().hex() in DOC
    assert body_sha256([pixels]) in DOC
    assert sign(b"example-secret", **FIELDS, inputs=[pixels]) in DOC


def test_bytes_vector():
    assert body_sha256([Tensor.text("text", ["A man is eating food."])]) in DOC
