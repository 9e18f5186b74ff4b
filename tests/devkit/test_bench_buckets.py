"""``kip bench buckets`` on a small scale: the mixed texts run fewer tokens in buckets,
the uniform ones as many, and both give the same embeddings either way (speed is for
docs/benchmarks.md, not for a test)."""

from kip.devkit import bench_buckets
from kip.workers.session import ModelSession


def test_buckets_run_fewer_tokens_on_mixed_texts_and_the_same_embeddings(registry):
    session = ModelSession(registry.load_alias("minilm"), device="cpu")
    mixed = bench_buckets.measure(session, bench_buckets.mixed_texts(32), 16, 1)
    uniform = bench_buckets.measure(session, bench_buckets.sentences(32), 16, 1)
    assert mixed["tokens_per_text"]["buckets"] < mixed["tokens_per_text"]["longest"] / 1.5
    assert uniform["tokens_per_text"]["buckets"] == uniform["tokens_per_text"]["longest"]
    assert mixed["max_abs_difference"] < 1e-4 and uniform["max_abs_difference"] < 1e-4
    assert set(mixed["sequences_per_s"]) == {"buckets", "longest"}
    assert "mixed" in bench_buckets.render({"mixed": mixed})
