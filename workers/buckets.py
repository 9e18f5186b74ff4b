"""Length buckets: a batch of texts is run as groups of similar token counts.

A transformer's cost grows with rows x padded width, and a batch padded to its longest
text pays for the padding of every shorter one: 48 short queries of ~12 tokens beside
16 passages of ~100 are 6,400 tokens padded, 2,176 unpadded. Each inference call also
has a fixed cost, so splitting pays only where the padding saved outweighs it.

``length_buckets`` puts each row in the class of the next power of two at or above its
token count (up to 8 tokens share one class), then merges neighbouring classes while a
merge costs less than the call it saves. The cost of a call is estimated in tokens:
``call_tokens`` for the call plus rows x its longest row: on a CPU a call is worth a few
tokens (``CPU_CALL_TOKENS``, from MiniLM's call and token costs on a 2-core machine). On
a GPU a token is far cheaper than a kernel
launch sequence, so a call is worth thousands (``CUDA_CALL_TOKENS``, an estimate, not
yet measured on a GPU): a batch is split only when its padding
is most of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CPU_CALL_TOKENS = 8
CUDA_CALL_TOKENS = 2048
SMALLEST_CLASS = 8   # texts of up to this many tokens share one class


def length_buckets(lengths: Sequence[int], call_tokens: int) -> list[np.ndarray]:
    """Row indices per inference call, shortest texts first; every row in exactly one."""
    lengths = np.asarray(lengths, dtype=np.int64)
    classes = np.maximum(SMALLEST_CLASS, 1 << np.ceil(
        np.log2(np.maximum(lengths, 1))).astype(np.int64))
    buckets = [np.flatnonzero(classes == c) for c in np.unique(classes)]
    widths = [int(lengths[rows].max()) for rows in buckets]
    while len(buckets) > 1:
        saved = [call_tokens - len(buckets[i]) * (widths[i + 1] - widths[i])
                 for i in range(len(buckets) - 1)]
        best = int(np.argmax(saved))
        if saved[best] <= 0:
            break
        buckets[best:best + 2] = [np.concatenate(buckets[best:best + 2])]
        widths[best:best + 2] = [widths[best + 1]]
    return buckets


def padded_tokens(lengths: Sequence[int], buckets: list[np.ndarray]) -> int:
    """Tokens run, padding included, when ``buckets`` are run one call each."""
    lengths = np.asarray(lengths)
    return sum(len(rows) * int(lengths[rows].max()) for rows in buckets)
