from workers.pace import Pace


def test_an_untimed_version_runs_one_request_per_call():
    assert Pace().requests_within("v1", budget_ms=10, rows_per_request=1, cap=256) == 1


def test_requests_per_call_fill_the_budget_from_the_measured_time_per_row():
    pace = Pace()
    pace.observe("fast", rows=100, ms=1.0)      # 0.01 ms per row
    pace.observe("slow", rows=4, ms=10.0)       # 2.5 ms per row
    assert pace.requests_within("fast", 10, rows_per_request=1, cap=256) == 256
    assert pace.requests_within("fast", 10, rows_per_request=32, cap=256) == 31
    assert pace.requests_within("slow", 10, rows_per_request=1, cap=256) == 4
    assert pace.requests_within("slow", 10, rows_per_request=32, cap=256) == 1


def test_the_pace_follows_a_version_that_slows_down():
    pace = Pace()
    pace.observe("v", rows=10, ms=10.0)
    for _ in range(30):
        pace.observe("v", rows=10, ms=100.0)
    assert pace.requests_within("v", 100, rows_per_request=1, cap=256) == 10


def test_nonsense_timings_are_ignored():
    pace = Pace()
    pace.observe("v", rows=0, ms=5.0)
    pace.observe("v", rows=3, ms=-1.0)
    assert pace.requests_within("v", 10, 1, 256) == 1
