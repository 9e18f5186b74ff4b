"""``kip bench prepare`` on a small scale: both ways give the same embeddings, and
preparing ahead leaves the inference thread less time outside its calls than preparing
in turn (only the first chunk waits for its tokenizing; speed is for
docs/benchmarks.md, not for a test)."""

from kip.devkit import bench_prepare
from kip.schemas.tensors import Tensor
from kip.workers.session import ModelSession


def test_preparing_ahead_gives_the_same_embeddings_and_hides_the_tokenizing(registry):
    session = ModelSession(registry.load_alias("minilm"), device="cpu")
    texts = bench_prepare.mixed_texts(64)
    chunks = [[[Tensor.text("text", [t])] for t in texts[i:i + 8]] for i in range(0, 64, 8)]
    report = bench_prepare.measure(session, chunks, 1)
    assert report["max_abs_difference"] == 0.0
    gap = report["outside_execute_ms_per_chunk"]
    assert gap["ahead"] < gap["in turn"] and report["tokenize_ms_per_chunk"] > 0
    assert "ahead" in bench_prepare.render(report | {"provider": session.provider})
