"""What a fault cost: the longest wait for an interactive result from the fault on, and
the p99 of the requests sent around it."""

from kip.devkit.availability import Timeline


def _timeline(sent_every_s: float, answered_after_s: float, outage: tuple[float, float]
              ) -> Timeline:
    """Requests sent steadily for 100 s, each answered after ``answered_after_s`` unless
    that falls inside ``outage``, when it is answered at the outage's end."""
    t = Timeline()
    for n in range(int(100 / sent_every_s)):
        rid, sent = f"r{n}", n * sent_every_s
        t.sent[rid] = sent
        due = sent + answered_after_s
        t.arrived[rid] = outage[1] if outage[0] <= due < outage[1] else due
    return t


def test_the_gap_is_the_outage_and_the_p99_carries_it():
    t = _timeline(0.05, 0.02, outage=(40.0, 46.0))
    t.fault(40.0, "kill leader")
    cost = t.costs()[0]
    assert 5.9 < cost.gap_s <= 6.0
    assert 5000 < cost.p99_ms < 6100
    assert cost.unanswered == cost.failed == 0


def test_without_an_outage_the_gap_is_the_sending_interval():
    t = _timeline(0.05, 0.02, outage=(0.0, 0.0))
    t.fault(40.0, "kill worker")
    assert t.costs()[0].gap_s < 0.06
    assert t.steady().p99_ms < 25


def test_no_gap_is_counted_after_the_last_request_was_sent():
    t = _timeline(0.05, 0.02, outage=(0.0, 0.0))
    t.fault(90.0, "kill worker")   # sending ends at 100 s; the window would reach 150 s
    assert t.costs()[0].gap_s < 0.06


def test_an_outage_past_the_end_of_sending_counts_to_its_first_answer():
    t = _timeline(0.05, 0.02, outage=(95.0, 103.0))
    t.fault(95.0, "kill leader")
    assert t.costs()[0].gap_s > 7.9


def test_a_fault_after_the_last_request_has_no_gap():
    t = _timeline(0.05, 0.02, outage=(0.0, 0.0))
    t.fault(120.0, "kill worker")
    cost = t.costs()[0]
    assert cost.gap_s != cost.gap_s and "longest gap" not in cost.line()


def test_a_stalled_partition_shows_in_the_slowest_not_the_gap():
    t = _timeline(0.05, 0.02, outage=(0.0, 0.0))
    for n in range(0, 2000, 3):   # a third of the requests wait for their owner's return
        rid = f"r{n}"
        if 40.0 <= t.sent[rid] < 48.0:
            t.arrived[rid] = 48.5
    t.fault(40.0, "partition worker")
    cost = t.costs()[0]
    assert cost.gap_s < 0.2 and 8400 < cost.max_ms <= 8500


def test_the_next_faults_outage_is_not_charged_to_the_one_before():
    t = _timeline(0.05, 0.02, outage=(60.0, 73.0))
    t.fault(40.0, "kill pipeline")   # 20 s of calm, then the next fault's outage
    t.fault(60.0, "partition broker")
    before, after = t.costs()
    assert before.gap_s < 0.1
    assert 12.9 < after.gap_s <= 13.0
