import json

import pytest

from kip.models.registry import Registry
from kip.schemas.errors import InvalidRequest, ModelNotFound, ModelUnverified
from kip.schemas.tensors import Tensor
from tests.pipeline.conftest import DIGITS_MANIFEST

import numpy as np


def _publish(tmp_path, content: bytes = b"model-bytes"):
    reg = Registry(tmp_path / "reg")
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(content)
    return reg, reg.publish(artifact, DIGITS_MANIFEST, {})


def test_versions_are_named_by_their_digest_and_immutable(tmp_path):
    reg, mv = _publish(tmp_path)
    assert mv.manifest.artifact_sha256.startswith(mv.manifest.version)
    again = reg.publish(mv.artifact, DIGITS_MANIFEST, {})
    assert again.path == mv.path
    reg.set_alias("digits", f"digits@{mv.manifest.version}")
    assert reg.resolve("digits").path == mv.path
    assert reg.resolve(f"digits@{mv.manifest.version}").path == mv.path


def test_a_tampered_artifact_is_refused(tmp_path):
    reg, mv = _publish(tmp_path)
    mv.artifact.write_bytes(b"something else")
    with pytest.raises(ModelUnverified, match="does not match"):
        reg.load("digits", mv.manifest.version)


def test_unknown_models_and_path_tricks_are_not_found(tmp_path):
    reg, _ = _publish(tmp_path)
    for alias in ("nope", "digits@0000", "../digits@x"):
        with pytest.raises(ModelNotFound):
            reg.resolve(alias)


def test_manifest_checks_request_inputs(tmp_path):
    _, mv = _publish(tmp_path)
    m = mv.manifest
    assert m.check_inputs([Tensor.from_array("pixels", np.zeros((3, 64), np.float32))]) == 3
    for bad in ([Tensor.from_array("pixels", np.zeros((3, 64), np.float64))],
                [Tensor.from_array("pixels", np.zeros((0, 64), np.float32))],
                [Tensor.from_array("pixels", np.zeros((64,), np.float32))],
                [Tensor.from_array("other", np.zeros((1, 64), np.float32))]):
        with pytest.raises(InvalidRequest):
            m.check_inputs(bad)


def test_reference_registry_has_both_models(registry):
    aliases = registry.aliases()
    assert set(aliases) >= {"minilm", "digits"}   # e2e tests publish models of their own
    manifest = json.loads((registry.resolve("minilm").path / "manifest.json").read_text())
    assert manifest["preprocessing"]["tokenizer_file"] == "tokenizer.json"
    assert registry.load(*aliases["minilm"].split("@")).manifest.files_sha256


def test_the_manifest_check_refuses_an_input_named_twice():
    from kip.models.manifest import Manifest
    manifest = Manifest(name="digits", version="1", artifact_sha256="a" * 64,
                        inputs=[{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}],
                        outputs=[{"name": "label", "datatype": "INT64", "shape": [-1]}],
                        max_batch=8, memory_estimate_bytes=1)
    one = Tensor.from_array("pixels", np.zeros((1, 64), np.float32))
    assert manifest.check_inputs([one]) == 1
    with pytest.raises(InvalidRequest, match="given more than once: \\['pixels'\\]"):
        manifest.check_inputs([one, one])
