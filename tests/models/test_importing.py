"""``kip models import`` and ``kip models export``: a graph is published only when the
manifest describes it; a torch module is exported, checked against torch, and served."""

from __future__ import annotations

import json

import numpy as np

from kip.cli import main
from kip.models.registry import Registry
from kip.schemas.tensors import Tensor
from kip.workers.session import ModelSession


def _env(monkeypatch, tmp_path) -> Registry:
    registry = Registry(tmp_path / "registry")
    monkeypatch.setenv("KIP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KIP_REGISTRY_DIR", str(registry.root))
    return registry


def test_an_onnx_file_is_imported_only_when_its_manifest_describes_it(
        registry, tmp_path, monkeypatch, capsys):
    own = _env(monkeypatch, tmp_path)
    digits = registry.resolve("digits")
    fields = digits.manifest.model_dump(exclude={"version", "artifact_sha256",
                                                 "files_sha256"}) | {"name": "imported"}
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(fields))
    wrong = fields | {"outputs": [{"name": "scores", "datatype": "FP32", "shape": [-1, 10]}]}
    bad.write_text(json.dumps(wrong))
    assert main(["models", "import", str(digits.artifact), "--manifest", str(bad)]) != 0
    assert "the manifest's output 'scores' is not in the graph" in capsys.readouterr().err
    assert main(["keys", "init"]) == 0
    assert main(["models", "import", str(digits.artifact), "--manifest", str(good),
                 "--alias", "imported", "--sign"]) == 0
    assert own.resolve("imported").manifest.artifact_sha256 == digits.manifest.artifact_sha256
    assert main(["models", "verify", "imported"]) == 0


def test_a_torch_module_is_exported_checked_and_served(tmp_path, monkeypatch, capsys):
    own = _env(monkeypatch, tmp_path)
    assert main(["models", "export", "tests.models.tiny_torch:linear", "--alias", "tiny"]) == 0
    assert "tiny: ONNX Runtime matches torch" in capsys.readouterr().out
    session = ModelSession(own.load_alias("tiny"), device="cpu")
    [[probabilities]] = session.run([[Tensor.from_array("x", np.ones((2, 4), np.float32))]])
    assert probabilities.shape == [2, 3]
    assert np.allclose(probabilities.array.sum(axis=1), 1.0, atol=1e-5)
