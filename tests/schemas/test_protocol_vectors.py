"""The test vectors printed in docs/protocol.md hold."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kip.schemas.codec import encode
from kip.schemas.messages import InferenceResult, Status, Timings
from kip.schemas.result_signatures import ResultSigner, ResultSigningKey, request_sha256
from kip.schemas.signing import body_sha256, sign
from kip.schemas.tensors import Tensor

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


def test_result_signature_vector():
    seed = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    signer = ResultSigner("r1", seed)
    assert signer.public_hex in DOC
    _, header = signer.header(b'{"request_id":"req-0001"}')
    assert header.decode().split(":")[2] in DOC


def test_batch_signature_vector():
    signer = ResultSigner("r1", Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    values = [b'{"request_id":"req-000%d"}' % i for i in (1, 2, 3)]
    assert signer.headers(values)[2][1].decode() in DOC


@pytest.mark.skipif(shutil.which("node") is None, reason="no Node.js here")
def test_the_documented_javascript_verifier_accepts_kips_results_and_nothing_else(tmp_path):
    """The snippet of docs/protocol.md, run as printed, on real signed results: one
    written alone, and three of a batch."""
    snippet = DOC.split("```js\n", 1)[1].split("```", 1)[0]
    key = ResultSigningKey.generate("r1")
    sent = [b'{"request": "as sent %d"}' % i for i in range(4)]
    values = [encode(InferenceResult(request_id=f"req-{i}", status=Status.OK,
                                     request_sha256=request_sha256(sent[i]),
                                     timings=Timings(total_ms=1.0), produced_at_ms=1))
              for i in range(4)]
    single = key.signer().header(values[0])[1]
    batch = [header for _, header in key.signer().headers(values[1:])]
    colon = ResultSigningKey.generate("team:r2")   # key ids may hold ':'
    colon_batch = colon.signer().headers(values[:2])[1][1]
    cases = {"kip's": (values[0], single, sent[0], 0),
             "another message's": (values[0], single, b"{}", 0),
             "altered": (values[0].replace(b"ok", b"failed"), single, sent[0], 0),
             **{f"batch {i}": (values[i], batch[i - 1], sent[i], i) for i in (1, 2, 3)},
             "batch, another's path": (values[2], batch[0], sent[2], 2),
             "batch, altered": (values[3].replace(b"ok", b"failed"), batch[2], sent[3], 3),
             "batch, signed alone": (values[1], batch[0].replace(b"ed25519-batch", b"ed25519")
                                     .rsplit(b":", 3)[0], sent[1], 1),
             "a key id with ':'": (values[0], colon.signer().header(values[0])[1], sent[0], 0),
             "a key id with ':', batch": (values[1], colon_batch, sent[1], 1),
             "an unknown key id": (values[0], single.replace(b":r1:", b":toString:"),
                                   sent[0], 0)}
    script = snippet + (f"\nconst keys = {{r1: '{key.public()}', "
                        f"'team:r2': '{colon.public()}'}};\n")
    for name, (body, header, request, i) in cases.items():
        script += (f"console.log({json.dumps(name)}, answers({{value: "
                   f"Buffer.from('{body.hex()}', 'hex'), headers: {{'kip-signature': "
                   f"Buffer.from('{header.hex()}', 'hex')}}}}, Buffer.from('{request.hex()}',"
                   f" 'hex'), 'req-{i}', keys));\n")
    (tmp_path / "verify.js").write_text(script)
    out = subprocess.run(["node", str(tmp_path / "verify.js")], capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert out[:12] == ["kip's true", "another message's false", "altered false",
                       "batch 1 true", "batch 2 true", "batch 3 true",
                       "batch, another's path false", "batch, altered false",
                       "batch, signed alone false", "a key id with ':' true",
                       "a key id with ':', batch true", "an unknown key id false"]


def test_envelope_vector():
    from kip.schemas.envelopes import envelope
    value = b'{"request_id":"req-0001"}'
    assert request_sha256(value) in DOC
    _, header = envelope(b"example-secret", "acme-k1", "kip.requests.interactive", "acme",
                         "req-0001", request_sha256(value))
    assert header.decode() in DOC
