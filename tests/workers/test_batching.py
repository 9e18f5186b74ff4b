"""Micro-batching: classes highest first, chunks back to back in one call, deadlines
checked before each chunk, and a failed chunk retried one request at a time."""

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from aiokafka.structs import ConsumerRecord

from schemas.codec import now_ms
from schemas.messages import Priority
from workers.batching import by_class, chunked, run_chunks, run_group


def test_chunked_keeps_order_and_sizes():
    assert chunked(list(range(10)), 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert chunked(list(range(8)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert chunked([1, 2], 0) == [[1], [2]]
    assert chunked([], 4) == []


def test_every_chunk_runs_in_one_call():
    calls = []
    runs = run_chunks(lambda live: calls.append(live) or [x * 10 for x in live],
                      chunked(list(range(6)), 4), deadline=lambda x: now_ms() + 60_000)
    assert calls == [[0, 1, 2], [3, 4, 5]]
    assert [r.outputs for r in runs] == [[0, 10, 20], [30, 40, 50]]
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


def _record(topic: str, offset: int) -> ConsumerRecord:
    return ConsumerRecord(topic=topic, partition=0, offset=offset, timestamp=0,
                          timestamp_type=0, key=None, value=b"", checksum=None,
                          serialized_key_size=0, serialized_value_size=0, headers=())


def test_classes_come_highest_first_in_arrival_order():
    topics = {"w.batch": Priority.BATCH, "w.interactive": Priority.INTERACTIVE,
              "w.standard": Priority.STANDARD}
    records = [_record("w.batch", 0), _record("w.standard", 1), _record("w.interactive", 2),
               _record("w.batch", 3)]
    grouped = [(p, [r.offset for r in rs]) for p, rs in by_class(records, topics)]
    assert grouped == [(Priority.INTERACTIVE, [2]), (Priority.STANDARD, [1]),
                       (Priority.BATCH, [0, 3])]


def test_a_failed_chunk_is_retried_one_by_one_so_only_the_poison_fails():
    def run(live):
        if "poison" in live:
            raise ValueError("NaN")
        return [x.upper() for x in live]

    async def go():
        with ThreadPoolExecutor(1) as executor:
            return await run_group(executor, run, ["a", "poison", "b", "c"], 3,
                                   deadline=lambda x: now_ms() + 60_000)
    runs = asyncio.run(go())
    served = [(r.live, r.outputs) for r in runs if r.live and r.error is None]
    failed = [(r.live, str(r.error)) for r in runs if r.error is not None]
    assert served == [(["a"], ["A"]), (["b", "c"], ["B", "C"])]   # chunks: a+poison, b+c
    assert failed == [(["poison"], "NaN")]
