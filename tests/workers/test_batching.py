"""Chunks run back to back in one call; deadlines are checked before each chunk."""

import time

from schemas.codec import now_ms
from workers.batching import chunked, run_chunks


def test_chunked_keeps_order_and_sizes():
    assert chunked(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert chunked([1, 2], 0) == [[1], [2]]


def test_every_chunk_runs_in_one_call():
    calls = []
    runs = run_chunks(lambda live: calls.append(live) or [x * 10 for x in live],
                      chunked(list(range(6)), 4), deadline=lambda x: now_ms() + 60_000)
    assert calls == [[0, 1, 2, 3], [4, 5]]
    assert [r.outputs for r in runs] == [[0, 10, 20, 30], [40, 50]]
    assert all(r.error is None and r.started_ms <= r.finished_ms for r in runs)


def test_a_request_that_expires_while_earlier_chunks_run_is_not_run():
    deadline = now_ms() + 30

    def slow(live):
        time.sleep(0.06)
        return live

    runs = run_chunks(slow, [["a"], ["b"]], deadline=lambda x: deadline)
    assert (runs[0].live, runs[0].expired) == (["a"], [])
    assert (runs[1].live, runs[1].expired, runs[1].outputs) == ([], ["b"], None)


def test_a_failing_chunk_keeps_its_error_and_the_next_chunk_still_runs():
    def run(live):
        if "poison" in live:
            raise ValueError("bad row")
        return live

    runs = run_chunks(run, [["ok", "poison"], ["fine"]], deadline=lambda x: now_ms() + 60_000)
    assert isinstance(runs[0].error, ValueError) and runs[0].outputs is None
    assert runs[1].outputs == ["fine"]
