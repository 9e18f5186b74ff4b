"""What a pipeline's ``/healthz`` and ``/readyz`` report (runtime/probes.py).

Ready: a broker answers a metadata request (checked every ``CHECK_EVERY_S``), the views
the decisions read (control, telemetry, quota levels, releases) have caught up, and each
of its agents admits requests. A pipeline that loses the cluster stays alive (it
reconnects by itself) and turns unready, naming why.

Alongside, ``kip_pipeline_live_workers`` gives, per model, the workers this pipeline's
capacity view counts as live: the ones admission sends work to. Zero means its requests
end ``MODEL_UNAVAILABLE`` (pipeline/decide.py), whether the workers are down or only
their telemetry is lost.
"""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaError
from prometheus_client import Gauge

from kip.runtime.probes import PROBES, keep_beating
from kip.schemas.codec import now_ms
from kip.schemas.messages import Priority

CHECK_EVERY_S = 2.0
LIVE_WORKERS = Gauge("kip_pipeline_live_workers", "Workers of the model this pipeline "
                     "hears telemetry from (0: its requests end MODEL_UNAVAILABLE)", ["model"])


def agent_condition(priority: Priority) -> str:
    return f"agent admit-{priority.value}"


def watch(state):
    """The pipeline's probes task, for ``app.task``: beats, marks the views caught up as
    they catch up, and every ``CHECK_EVERY_S`` checks the broker and counts live
    workers."""
    PROBES.expect("broker", "views", *map(agent_condition, state.settings.classes))

    async def task() -> None:
        side = [asyncio.create_task(keep_beating(), name="kip-beat"),
                asyncio.create_task(_views(state), name="kip-views")]
        # a connection of its own: a follower's long-polling fetch would hold a metadata
        # request behind it on a shared one
        probe = state.settings.kafka.consumer(group_id=None, client_id="kip-readiness")
        await probe.start()
        try:
            while True:
                PROBES.set("broker", *await reachable(probe))
                _count_live(state.capacity)
                await asyncio.sleep(CHECK_EVERY_S)
        finally:
            for running in side:
                running.cancel()
            await probe.stop()
    return task


async def _views(state) -> None:
    """``views`` turns ready the moment the last view catches up."""
    PROBES.set("views", False, "catching up with " + ", ".join(f.topic for f in state.followers))
    await state.ready()
    PROBES.set("views", True, "caught up")


async def reachable(consumer, timeout_s: float = 5.0) -> tuple[bool, str]:
    """Whether a broker answers a metadata request on ``consumer``'s connection now."""
    try:
        await asyncio.wait_for(consumer.topics(), timeout_s)
    except (KafkaError, TimeoutError) as err:
        return False, f"no metadata from the cluster: {err!r}"[:300]
    return True, "metadata answered"


_counted: set[str] = set()   # every model once heard of: one whose workers left reads 0


def _count_live(capacity) -> None:
    now = now_ms()
    _counted.update(t.model for t in list(capacity.workers.values()))
    for model in _counted:
        LIVE_WORKERS.labels(model).set(len(capacity.serving(model, now)))
