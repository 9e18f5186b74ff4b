"""Python's cyclic garbage collector in a long-running kip stage.

A stage allocates many short-lived container objects for every message (parsed models,
records, futures) on top of a large, long-lived heap (faust, aiokafka, pydantic's
schemas, ONNX Runtime's bindings). With CPython's default thresholds (700, 10, 10) a
pipeline under load ran a young collection every few ms and, every few seconds, a full
one that walked the whole long-lived heap: 60-80 ms each, ~1 s of CPU per 25,000
requests, and pauses that land on whatever request is in flight.

``settle`` runs once the process has started: it freezes what startup left (a full
collection never walks it again; it was never going to be freed) and lets the young
generation grow to ``YOUNG_THRESHOLD`` objects before a collection, so most of a
message's objects are freed by reference counting before any collection looks at them.

The threshold is above what a stage under load keeps alive at once. A worker holds two
batches in flight, ~15,000-20,000 container objects (a pydantic model is three: itself,
its field dict and the set of the fields it was given): at 10,000, it ran a young
collection every ~1,000 requests, 6-10 ms each, and each found no garbage, as every
object it walked belonged to a batch still in flight. At 50,000, over 30,000 single-row
requests, the worker ran none and the pipeline one (30 ms). Cycles are still collected,
only less often: at most ~50,000 objects' worth of garbage waits for a collection.
The commands that keep thousands of requests in flight from one client (``kip batch
run``, the benches' clients) settle too. Figures: docs/benchmarks.md.
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
