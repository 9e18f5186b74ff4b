"""``kip bench cost --tracing``: what traces cost, beside no tracing, in one run.

Two kips of their own, one after the other, measured as ``kip bench cost`` measures (a)
and (c) (devkit/replication_cost.py): first with tracing off (no ``OTEL_*`` variable:
kip's default), then with every process, this client included, exporting its spans over
OTLP/HTTP to a receiver in this process (devkit/otlp_receiver.py). The report sets the
second's CPU per request and latencies beside the first's; the difference is what
tracing adds. The receiver's own CPU is this process's, so the client's row includes it.
"""

from __future__ import annotations

import os

from kip.devkit.otlp_receiver import OtlpReceiver
from kip.devkit.replication_cost import measure_one, render_beside
from kip.runtime import tracing


async def measure_tracing(args) -> dict:
    off = await measure_one(args)
    receiver = OtlpReceiver().start()
    env = receiver.env(schedule_delay_ms=5000)   # the SDK's default batching delay
    os.environ.update(env)
    try:
        on = await measure_one(args, env=env)
    finally:
        tracing.shutdown()
        for name in env:
            os.environ.pop(name, None)
        receiver.stop()
    on["spans_received"] = len(receiver.received())
    return {"tracing off": off | {"replication": "no OTEL_* variables"},
            "tracing on": on | {"replication": f"OTLP/HTTP, {on['spans_received']} spans"}}


def render_tracing(report: dict) -> str:
    (_, off), (_, on) = report.items()
    return render_beside(report, f"tracing: off ({off['replication']}) beside on "
                                 f"({on['replication']}), one run")
