"""prometheus-client's internals that runtime/prometheus_adapter.py relies on, pinned
against the installed release (``scripts/compat`` runs this against the newest)."""

from prometheus_client import CollectorRegistry, Histogram

from kip.runtime.prometheus_adapter import observe_all


def test_a_histogram_keeps_its_bounds_buckets_and_sum_where_the_adapter_reads_them():
    child = Histogram("h", "h", ["k"], buckets=(0.5,), registry=CollectorRegistry()
                      ).labels("x")
    assert list(child._upper_bounds) == [0.5, float("inf")]
    assert len(child._buckets) == 2 and hasattr(child._sum, "inc")


def test_observing_all_at_once_counts_as_observing_each():
    """``observe_all`` updates the histogram's private buckets: it must leave exactly
    what ``observe`` on each amount leaves (a bound itself falls in its own bucket)."""
    registry = CollectorRegistry()
    each, together = (Histogram(name, "h", ["k"], buckets=(0.01, 0.1, 1.0),
                                registry=registry).labels("x") for name in ("each", "all"))
    amounts = [0.0, 0.005, 0.01, 0.01, 0.5, 1.0, 2.5, 40.0, 0.1]
    for amount in amounts:
        each.observe(amount)
    observe_all(together, amounts)
    observe_all(together, [])

    def samples(name):
        return sorted((s.name.removeprefix(name), s.labels.get("le"), s.value)
                      for metric in registry.collect() if metric.name == name
                      for s in metric.samples if not s.name.endswith("_created"))
    assert samples("all") == samples("each") and len(samples("each")) == 6
