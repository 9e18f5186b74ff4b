"""Turning request tensors into the model's ONNX inputs (tokenization for text models)."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer


def encode_texts(tokenizer: Tokenizer, texts: list[str], max_length: int) -> dict[str, np.ndarray]:
    """Token ids and attention mask, padded to the longest text in the batch."""
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask}
