"""kip's one door into prometheus-client's internals: a histogram's bucket bounds, bucket
counters and sum (``Histogram._upper_bounds``, ``_buckets``, ``_sum``), which it keeps
private, read so that a batch of observations costs one update per bucket rather than
one locked update per observation. Nothing else in kip touches them (``python -m
kip.devkit.layers`` checks it); tests/runtime/test_prometheus_adapter.py pins the
assumption by checking ``observe_all`` against ``observe`` on the installed release.
"""

from __future__ import annotations

import bisect
import collections

from prometheus_client import Histogram


def observe_all(histogram: Histogram, amounts: list[float]) -> None:
    """``histogram.observe`` of each amount, with one update per bucket they fall in: a
    worker batch's hundreds of latencies land in a few buckets, and ``observe`` locks
    and updates the sum and a bucket for each."""
    if not amounts:
        return
    bounds, buckets = histogram._upper_bounds, histogram._buckets
    for index, count in collections.Counter(
            bisect.bisect_left(bounds, amount) for amount in amounts).items():
        buckets[index].inc(count)   # the first bucket whose bound is >= the amount
    histogram._sum.inc(sum(amounts))
