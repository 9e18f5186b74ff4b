"""Turning request tensors into the model's ONNX inputs (tokenization for text models)."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer


def encode_texts(tokenizer: Tokenizer, texts: list[str], max_length: int) -> dict[str, np.ndarray]:
    """Token ids and attention mask, padded to the longest text in the batch."""
    return padded(token_ids(tokenizer, texts, max_length))


def token_ids(tokenizer: Tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """Each text's token ids, truncated to ``max_length`` and not padded."""
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    return [e.ids for e in tokenizer.encode_batch(texts)]


def padded(ids: list[list[int]]) -> dict[str, np.ndarray]:
    """``input_ids`` padded with 0 (BERT's [PAD]) to the longest row, and the
    ``attention_mask`` that is 1 over each row's own tokens."""
    width = max(map(len, ids))
    out = np.zeros((len(ids), width), np.int64)
    mask = np.zeros((len(ids), width), np.int64)
    for i, row in enumerate(ids):
        out[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return {"input_ids": out, "attention_mask": mask}
