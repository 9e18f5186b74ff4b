"""Real ONNX Runtime sessions on the real reference models."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kip.models.export.digits import dataset
from kip.schemas.errors import InferenceFailed
from kip.schemas.tensors import Tensor
from kip.workers.session import CPU, ModelSession, choose_providers


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


def _texts(lengths: list[int]) -> list[str]:
    words = "kip routes every request through Kafka and answers it once".split()
    return [" ".join(words[i % len(words)] for i in range(n)) for n in lengths]


def test_texts_of_mixed_length_run_in_buckets_with_the_same_embeddings(registry):
    session = _session(registry, "minilm")
    texts = _texts([3, 40, 5, 4, 45, 6, 2, 42])   # short and long, interleaved
    calls = []
    real_run = session.session.run
    session.session.run = lambda names, feeds: calls.append(feeds) or real_run(names, feeds)
    [[bucketed]] = session.run([[Tensor.text("text", texts)]])
    shapes = sorted((f["input_ids"].shape for f in calls), key=lambda s: s[1])
    longest = shapes[-1][1]
    assert len(shapes) > 1 and shapes[-1][0] == 3   # the long texts alone
    assert sum(rows * width for rows, width in shapes) < 8 * longest / 2
    session.call_tokens = 10**9   # never split: every text padded to the longest
    [[whole]] = session.run([[Tensor.text("text", texts)]])
    assert calls[-1]["input_ids"].shape == (8, longest)
    np.testing.assert_allclose(bucketed.array, whole.array, atol=1e-5)
    alone = [session.run([[Tensor.text("text", [t])]])[0][0].array[0] for t in texts]
    np.testing.assert_allclose(bucketed.array, np.stack(alone), atol=1e-5)


@pytest.mark.parametrize("alias,inputs", [
    ("digits", lambda: [Tensor.from_array("pixels", dataset()[2][:5])]),
    ("minilm", lambda: [Tensor.text("text", _texts([4, 60, 7]))]),
])
def test_a_run_through_an_io_binding_gives_the_plain_run_s_outputs(registry, alias, inputs):
    plain = _session(registry, alias)
    bound = ModelSession(registry.load_alias(alias), device="cpu", io_binding=True)
    assert not plain.io_binding and bound.io_binding   # by default: on CUDA only
    for a, b in zip(plain.run([inputs()])[0], bound.run([inputs()])[0]):
        assert a.name == b.name
        np.testing.assert_allclose(a.array, b.array, atol=1e-6)


def test_a_chunk_prepared_in_another_thread_runs_as_it_would_in_one_step(registry):
    session = _session(registry, "minilm")
    first = [[Tensor.text("text", _texts([5, 30]))], [Tensor.text("text", _texts([8]))]]
    second = [[Tensor.text("text", _texts([12, 3, 50]))]]
    expected = [session.run(first), session.run(second)]
    with ThreadPoolExecutor(1) as ahead:
        prepared = session.prepare(first)
        upcoming = ahead.submit(session.prepare, second)
        got = [session.execute(prepared), session.execute(upcoming.result())]
    assert prepared.rows == [2, 1] and prepared.arrays is None
    lengths = [len(ids) for ids in prepared.ids]
    assert lengths[0] < lengths[2] < lengths[1]   # each text's own tokens: not padded
    assert all(ids[-1] == 102 for ids in prepared.ids)   # each ends in [SEP]
    for want, have in zip(expected, got):
        for a, b in zip(sum(want, []), sum(have, [])):
            np.testing.assert_allclose(a.array, b.array, atol=1e-6)


def test_tensors_are_prepared_as_their_rows_joined(registry):
    session = _session(registry, "digits")
    pixels = dataset()[2][:3]
    prepared = session.prepare([[Tensor.from_array("pixels", pixels[:1])],
                                [Tensor.from_array("pixels", pixels[1:])]])
    assert prepared.rows == [1, 2] and prepared.ids is None
    np.testing.assert_array_equal(prepared.arrays["pixels"], pixels)


def test_only_text_prepares_ahead_and_on_cpu_only_when_asked(registry):
    assert not _session(registry, "minilm").prepare_ahead   # on CUDA by default
    asked = {alias: ModelSession(registry.load_alias(alias), device="cpu",
                                 prepare_ahead=True).prepare_ahead
             for alias in ("minilm", "digits")}
    assert asked == {"minilm": True, "digits": False}   # tensors: no tokenizer to overlap
