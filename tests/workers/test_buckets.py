"""Length buckets: which rows of a text batch share an inference call."""

import numpy as np

from kip.workers.buckets import CPU_CALL_TOKENS, CUDA_CALL_TOKENS, length_buckets, padded_tokens


def _rows(buckets) -> list[int]:
    return sorted(int(i) for rows in buckets for i in rows)


def test_every_row_is_in_exactly_one_bucket():
    lengths = np.random.default_rng(0).integers(1, 129, 300)
    buckets = length_buckets(lengths, CPU_CALL_TOKENS)
    assert _rows(buckets) == list(range(300))


def test_texts_of_similar_length_share_one_call():
    assert len(length_buckets([12, 9, 14, 16, 11], CPU_CALL_TOKENS)) == 1


def test_short_texts_are_not_padded_to_a_long_one():
    lengths = [12] * 48 + [100] * 16
    buckets = length_buckets(lengths, CPU_CALL_TOKENS)
    assert [len(b) for b in buckets] == [48, 16]
    assert padded_tokens(lengths, buckets) == 48 * 12 + 16 * 100
    assert padded_tokens(lengths, [np.arange(64)]) == 64 * 100


def test_a_split_that_saves_less_than_a_call_is_not_made():
    # a row of 7 tokens beside rows of 16: padding it costs 9 tokens, a call 10
    assert len(length_buckets([7] + [16] * 10, call_tokens=10)) == 1
    assert len(length_buckets([7] * 2 + [16] * 10, call_tokens=10)) == 2


def test_on_a_gpu_a_batch_is_split_only_when_padding_is_most_of_it():
    assert len(length_buckets([12] * 48 + [100] * 16, CUDA_CALL_TOKENS)) == 2
    assert len(length_buckets([12] * 16 + [100] * 48, CUDA_CALL_TOKENS)) == 1
    assert len(length_buckets([30] * 64 + [60] * 64, CUDA_CALL_TOKENS)) == 1
