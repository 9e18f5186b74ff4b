from kip.workers.pace import Pace


def test_an_untimed_version_runs_one_request_per_call():
    assert Pace(10).requests_within("v1", rows_per_request=1, cap=256) == 1


def test_a_fast_version_fills_its_calls_up_to_the_cap():
    pace = Pace(10)
    pace.observe("fast", rows=100, ms=1.0)     # 0.01 ms per row
    assert pace.requests_within("fast", rows_per_request=1, cap=256) == 200   # grows 2x
    pace.observe("fast", rows=200, ms=2.0)
    assert pace.requests_within("fast", rows_per_request=1, cap=256) == 256
    assert pace.requests_within("fast", rows_per_request=32, cap=256) == 8   # 260 rows


def call_ms(rows: int) -> float:
    """A model whose calls cost 2 ms plus 1 ms per row."""
    return 2.0 + rows


def test_calls_grow_until_they_take_the_budget_despite_a_fixed_cost_per_call():
    pace, rows = Pace(10), 1
    for _ in range(40):
        pace.observe("v", rows, call_ms(rows))
        rows = pace.requests_within("v", rows_per_request=1, cap=256)
    assert rows in (7, 8) and call_ms(rows) <= 10.5   # 8 rows: 10 ms


def test_a_version_that_slows_down_gets_smaller_calls():
    pace = Pace(10)
    pace.observe("v", rows=8, ms=10.0)
    for _ in range(20):
        pace.observe("v", rows=8, ms=40.0)
    assert pace.requests_within("v", rows_per_request=1, cap=256) == 2


def test_nonsense_timings_are_ignored():
    pace = Pace(10)
    pace.observe("v", rows=0, ms=5.0)
    pace.observe("v", rows=3, ms=-1.0)
    assert pace.requests_within("v", 1, 256) == 1


def test_the_remainder_of_a_batch_does_not_pull_the_fit_down():
    """Batches of 32 requests, calls of at least 4, a budget that fits 78 rows: calls
    grow to the whole batch. (With the growth capped by each call's own rows, a short
    remainder call pulled the fit down and every batch ran as 28 + 4.)"""
    pace = Pace(100)
    for _ in range(60):
        size = min(32, max(4, pace.requests_within("v", rows_per_request=1, cap=32)))
        for rows in [size] * (32 // size) + [32 % size] * bool(32 % size):
            pace.observe("v", rows, 2.0 + 1.25 * rows)
    assert pace.requests_within("v", rows_per_request=1, cap=32) == 32
