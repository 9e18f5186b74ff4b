from kip.schemas.messages import Priority
from kip.workers.priority import classes_to_pause
from kip.workers.telemetry import Throughput

I, S, B = Priority.INTERACTIVE, Priority.STANDARD, Priority.BATCH


def test_lower_classes_pause_while_a_higher_one_has_backlog():
    assert classes_to_pause({}, {}, 0, 1000) == set()
    assert classes_to_pause({I: 3, B: 100}, {}, 0, 1000) == {S, B}
    assert classes_to_pause({S: 3, B: 100}, {}, 0, 1000) == {B}
    assert classes_to_pause({B: 100}, {}, 0, 1000) == set()


def test_aging_resumes_a_class_that_waited_past_the_bound():
    assert classes_to_pause({I: 3, B: 100}, {B: 0}, 999, 1000) == {S, B}
    assert classes_to_pause({I: 3, B: 100}, {B: 0}, 1000, 1000) == {S}


def test_throughput_is_smoothed():
    t = Throughput(alpha=0.5)
    t.record(100, 1.0)
    t.record(300, 1.0)
    t.record(0, 1.0)
    assert t.requests_per_s == 200
