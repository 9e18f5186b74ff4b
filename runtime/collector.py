"""Python's cyclic garbage collector in a long-running kip stage.

A stage allocates many short-lived container objects for every message (parsed models,
records, futures) on top of a large, long-lived heap (faust, aiokafka, pydantic's
schemas, ONNX Runtime's bindings). With CPython's default thresholds (700, 10, 10) a
pipeline under load ran a young collection every few ms and, every few seconds, a full
one that walked the whole long-lived heap, pausing whatever request was in flight.

``settle`` runs once the process has started: it freezes what startup left (a full
collection never walks it again; it was never going to be freed) and lets the young
generation grow to ``YOUNG_THRESHOLD`` objects before a collection, so most of a
message's objects are freed by reference counting before any collection looks at them.

The threshold is above what a stage under load keeps alive at once: a worker's two
batches in flight are tens of thousands of container objects (a pydantic model is three:
itself, its field dict and the set of the fields it was given), and a lower threshold
walked them again and again and found no garbage, as every object belonged to a batch
still in flight. Cycles are still collected, only less often: at most
``YOUNG_THRESHOLD`` objects' worth of garbage waits for a collection. The commands that
keep thousands of requests in flight from one client (``kip batch run``, the benches'
clients) settle too.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def settle(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Freeze the startup heap and raise the young generation's threshold."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
