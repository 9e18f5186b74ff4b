"""Chunked inference inside the inference thread.

Standard and batch requests run in chunks of ``background_max_batch`` rows: one chunk
is the longest an interactive request waits for the device. ``run_chunks`` runs every
chunk of a group in turn in the calling (inference) thread, so the device goes from one
chunk to the next without a round trip through the event loop: under overload that loop
is busy with fetches and commits, and waking it between chunks left the inference thread
idle (docs/architecture.md, "Chunks run back to back").

Deadlines are checked right before each chunk runs, so a request that expires while
earlier chunks run is not inferred either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")   # whatever the caller pairs with each request


@dataclass
class ChunkRun(Generic[P]):
    """One chunk's outcome: what ran, what had expired, the outputs or the error."""

    live: list[P]
    expired: list[P]
    outputs: list | None = None        # per live request, in order
    error: Exception | None = None
    started_ms: float = 0.0
    finished_ms: float = 0.0


def chunked(items: Sequence[P], size: int) -> list[list[P]]:
    size = max(1, size)
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def run_chunks(run: Callable[[list[P]], list], chunks: list[list[P]],
               deadline: Callable[[P], int]) -> list[ChunkRun[P]]:
    """Run ``run`` on each chunk's live requests in turn; an exception is kept in its
    chunk's outcome (the caller retries that chunk request by request), not raised."""
    outcomes = []
    for chunk in chunks:
        started = time.time() * 1000   # the instant checked is the instant stamped
        live = [p for p in chunk if deadline(p) > started]
        outcome = ChunkRun(live, [p for p in chunk if deadline(p) <= started])
        if live:
            outcome.started_ms = started
            try:
                outcome.outputs = run(live)
            except Exception as exc:   # the caller decides: retry one by one, or poison
                outcome.error = exc
            outcome.finished_ms = time.time() * 1000
        outcomes.append(outcome)
    return outcomes
