from kip.topics.names import TopicNames


def test_work_items_and_results_may_go_to_any_partition_audit_records_may_not():
    names = TopicNames("p")
    free = [names.work("minilm", "batch"), names.results, names.results + ".team-a"]
    keyed = [names.audit, names.deadletter, names.quota_levels, names.requests("batch"),
             "p.resultsx", "other.work.minilm.batch"]
    assert all(names.any_partition(t) for t in free)
    assert not any(names.any_partition(t) for t in keyed)
