"""Real ONNX Runtime sessions on the real reference models."""

import numpy as np
import pytest

from models.export.digits import dataset
from schemas.errors import InferenceFailed
from schemas.tensors import Tensor
from workers.session import CPU, ModelSession, choose_providers


def _session(registry, alias: str) -> ModelSession:
    return ModelSession(registry.load_alias(alias), device="cpu")


def test_minilm_embeds_sentences_like_the_torch_reference(registry):
    session = _session(registry, "minilm")
    out = session.run([[Tensor.text("text", ["A man is eating food."])],
                       [Tensor.text("text", ["A man is eating a piece of bread.",
                                             "The girl is carrying a baby."])]])
    assert [len(o) for o in out] == [1, 1]
    first, second = out[0][0].array, out[1][0].array
    assert first.shape == (1, 384) and second.shape == (2, 384)
    assert abs(float(first[0] @ second[0]) - 0.7553) < 1e-3
    assert float(first[0] @ second[1]) < 0.2
    np.testing.assert_allclose(np.linalg.norm(second, axis=1), 1.0, atol=1e-5)


def test_digits_classifies_held_out_images(registry):
    session = _session(registry, "digits")
    _, _, images, labels = dataset()
    out = session.run([[Tensor.from_array("pixels", images[i:i + 1])] for i in range(200)])
    predicted = np.array([int(o[1].array[0]) for o in out])
    assert (predicted == labels[:200]).mean() >= 0.95
    assert out[0][0].name == "probabilities" and out[0][0].array.shape == (1, 10)


def test_the_session_reports_the_provider_it_got(registry):
    assert _session(registry, "digits").provider == CPU
    assert choose_providers("cpu") == [CPU]


def test_requiring_cuda_where_there_is_none_is_refused(registry):
    mv = registry.load_alias("digits")
    with pytest.raises(RuntimeError, match="CUDA"):
        ModelSession(mv, device="cuda")


def test_outputs_with_nan_fail_the_batch_with_a_code(registry, monkeypatch):
    session = _session(registry, "digits")
    real_run = session.session.run

    def nan_run(names, feeds):
        outs = real_run(names, feeds)
        outs[0][:] = np.nan
        return outs
    monkeypatch.setattr(session.session, "run", nan_run)
    with pytest.raises(InferenceFailed, match="NaN"):
        session.run([[Tensor.from_array("pixels", np.zeros((2, 64), np.float32))]])


def test_outputs_with_the_wrong_row_count_fail_the_batch(registry, monkeypatch):
    session = _session(registry, "digits")
    real_run = session.session.run
    monkeypatch.setattr(session.session, "run",
                        lambda names, feeds: [o[:1] for o in real_run(names, feeds)])
    with pytest.raises(InferenceFailed, match="1 rows for 2 inputs"):
        session.run([[Tensor.from_array("pixels", np.zeros((2, 64), np.float32))]])
