"""Micro-batching: classes highest first, chunks back to back in one call, the next chunk
prepared ahead while one executes, deadlines checked before each chunk, and a failed
chunk retried one request at a time."""

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from aiokafka.structs import ConsumerRecord

from kip.schemas.codec import now_ms
from kip.schemas.messages import Priority
from kip.workers.batching import Stages, by_class, chunked, run_chunks, run_group


def _far(_) -> int:
    return now_ms() + 60_000


def _prepared(live):
    return [f"p{x}" for x in live]


def test_chunked_keeps_order_and_sizes():
    assert chunked(list(range(10)), 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert chunked(list(range(8)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert chunked([1, 2], 0) == [[1], [2]]
    assert chunked([], 4) == []


def test_every_chunk_runs_in_one_call():
    calls = []
    runs = run_chunks(Stages.single(lambda live: calls.append(live) or [x * 10 for x in live]),
                      chunked(list(range(6)), 4), deadline=_far)
    assert calls == [[0, 1, 2], [3, 4, 5]]
    assert [r.outputs for r in runs] == [[0, 10, 20], [30, 40, 50]]
    assert all(r.error is None and r.started_ms <= r.finished_ms for r in runs)


def test_a_request_that_expires_while_earlier_chunks_run_is_not_run():
    deadline = now_ms() + 30

    def slow(live):
        time.sleep(0.06)
        return live

    runs = run_chunks(Stages.single(slow), [["a"], ["b"]], deadline=lambda x: deadline)
    assert (runs[0].live, runs[0].expired) == (["a"], [])
    assert (runs[1].live, runs[1].expired, runs[1].outputs) == ([], ["b"], None)


def test_a_failing_chunk_keeps_its_error_and_the_next_chunk_still_runs():
    def run(live):
        if "poison" in live:
            raise ValueError("bad row")
        return live

    runs = run_chunks(Stages.single(run), [["ok", "poison"], ["fine"]], deadline=_far)
    assert isinstance(runs[0].error, ValueError) and runs[0].outputs is None
    assert runs[1].outputs == ["fine"]


def test_the_next_chunk_is_prepared_ahead_while_one_executes():
    ready = {k: threading.Event() for k in range(3)}
    threads, overlapped = set(), []

    def prepare(live):
        threads.add(threading.current_thread().name)
        ready[live[0]].set()
        return _prepared(live)

    def execute(prepared):
        k = int(prepared[0][1:])
        overlapped.append(k == 2 or ready[k + 1].wait(timeout=5))   # in turn: never set
        return prepared

    with ThreadPoolExecutor(1, thread_name_prefix="ahead") as ahead:
        runs = run_chunks(Stages(prepare, execute, ahead), [[0], [1], [2]], deadline=_far)
    assert [r.outputs for r in runs] == [["p0"], ["p1"], ["p2"]]
    assert overlapped == [True, True, True]
    assert all(name.startswith("ahead") for name in threads)


def test_without_a_thread_ahead_each_chunk_is_prepared_right_before_it_executes():
    steps = []
    stages = Stages(lambda live: steps.append(("prepare", live)) or live,
                    lambda prepared: steps.append(("execute", prepared)) or prepared)
    run_chunks(stages, [[0], [1]], deadline=_far)
    assert steps == [("prepare", [0]), ("execute", [0]), ("prepare", [1]), ("execute", [1])]


def test_a_request_that_expires_after_its_chunk_was_prepared_is_prepared_again_without_it():
    soon, prepared_for = now_ms() + 40, []

    def prepare(live):
        prepared_for.append(list(live))
        return _prepared(live)

    def execute(prepared):
        time.sleep(0.08)   # "b" expires while chunk 0 runs, after chunk 1 was prepared
        return prepared

    with ThreadPoolExecutor(1) as ahead:
        runs = run_chunks(Stages(prepare, execute, ahead), [["a"], ["b", "c"]],
                          deadline=lambda x: soon if x == "b" else now_ms() + 60_000)
    assert (runs[1].live, runs[1].expired, runs[1].outputs) == (["c"], ["b"], ["pc"])
    assert prepared_for == [["a"], ["b", "c"], ["c"]]


def test_a_preparation_that_fails_ahead_fails_its_own_chunk_only():
    def prepare(live):
        if "poison" in live:
            raise ValueError("untokenizable")
        return _prepared(live)

    with ThreadPoolExecutor(1) as ahead:
        runs = run_chunks(Stages(prepare, lambda prepared: prepared, ahead),
                          [["a"], ["poison", "b"], ["c"]], deadline=_far)
    assert [str(r.error) if r.error else r.outputs for r in runs] == [
        ["pa"], "untokenizable", ["pc"]]


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
            return await run_group(executor, Stages.single(run), ["a", "poison", "b", "c"],
                                   3, deadline=_far)
    runs = asyncio.run(go())
    served = [(r.live, r.outputs) for r in runs if r.live and r.error is None]
    failed = [(r.live, str(r.error)) for r in runs if r.error is not None]
    assert served == [(["a"], ["A"]), (["b", "c"], ["B", "C"])]   # chunks: a+poison, b+c
    assert failed == [(["poison"], "NaN")]
