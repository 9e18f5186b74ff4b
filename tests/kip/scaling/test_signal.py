"""The scaling signal on a real broker: 120 requests waiting in a model's standard work
topic show as 120 records of lag that age, and ask for workers up to the partitions;
once the workers' group commits past them, lag and desire fall to 0. ``kip scaling``
serves the same figures on /metrics."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from aiokafka import TopicPartition

from kip.devkit.broker import free_port
from kip.scaling.estimate import Sizing
from kip.scaling.signal import ScalingSignal
from kip.schemas.messages import Priority
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames
from kip.transport.admin import apply

pytestmark = pytest.mark.broker
MODEL = "scaled"
WAITING = 120


async def _write_waiting(broker, names: TopicNames) -> TopicPartition:
    """``WAITING`` work records in one transaction on partition 0, as a pipeline writes."""
    await apply(broker.kafka, [t for t in catalogue(names, [MODEL]) if MODEL in t.name])
    tp = TopicPartition(names.work(MODEL, Priority.STANDARD), 0)
    producer = broker.kafka.producer(transactional_id=f"{names.prefix}-writer")
    await producer.start()
    try:
        async with producer.transaction():
            for n in range(WAITING):
                await producer.send(tp.topic, b"x" * 64, key=str(n).encode(), partition=0)
    finally:
        await producer.stop()
    return tp


async def _commit(broker, group: str, tp: TopicPartition, offset: int) -> None:
    consumer = broker.kafka.consumer(group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: offset})
    finally:
        await consumer.stop()


def test_waiting_requests_are_lag_that_ages_and_asks_for_workers(broker, prefix):
    names = TopicNames(prefix)

    async def go():
        tp = await _write_waiting(broker, names)
        signal = ScalingSignal(broker.kafka, names, Sizing(per_worker_default=1.0))
        await signal.start()
        try:
            (first,) = await signal.poll()
            await asyncio.sleep(1.5)
            (aged,) = await signal.poll()
            await _commit(broker, names.worker_group(MODEL), tp, WAITING)   # on the marker
            (caught_up,) = await signal.poll()
        finally:
            await signal.stop()
        return first, aged, caught_up

    first, aged, caught_up = asyncio.run(go())
    standard = aged.classes[Priority.STANDARD]
    assert first.model == MODEL and standard.records == WAITING
    assert aged.classes[Priority.INTERACTIVE].records == 0
    assert standard.seconds >= 1.4
    cap = max(c.partitions for c in aged.classes.values())
    # demand 120 / 30 s = 4 req/s against 1 req/s * 0.8 per worker: 5, within the cap
    assert aged.desired == min(5, cap) and first.live == 0
    assert caught_up.classes[Priority.STANDARD].records == 0
    assert caught_up.classes[Priority.STANDARD].seconds == 0 and caught_up.desired == 0


def test_kip_scaling_serves_the_signal_on_metrics(broker, prefix, tmp_path):
    names = TopicNames(prefix)
    asyncio.run(_write_waiting(broker, names))
    port = free_port()
    env = os.environ | {"KIP_HOME": str(tmp_path), "KIP_BOOTSTRAP": broker.bootstrap,
                        "KIP_TOPIC_PREFIX": prefix, "KIP_METRICS_PORT": str(port),
                        "KIP_SCALING_INTERVAL_S": "0.5",
                        "KIP_SCALING_REQUESTS_PER_WORKER": "1"}
    log = tmp_path / "scaling.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kip.cli", "scaling"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wanted = f'kip_workers_desired{{model="{MODEL}"}}'
        lag = f'kip_consumer_lag_records{{model="{MODEL}",priority="standard"}}'
        found = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(found) < 2:
            assert proc.poll() is None, log.read_text()[-2000:]
            found = _scrape(port, (wanted, lag))
            time.sleep(0.3)
        assert found.get(lag) == WAITING and found.get(wanted, 0) >= 1, found
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _scrape(port: int, names: tuple[str, ...]) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            lines = r.read().decode().splitlines()
    except OSError:
        return {}
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines
            if line.rsplit(" ", 1)[0] in names}
