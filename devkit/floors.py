"""The floors kip's costs are compared with, measured on the same broker in the same run:
what the bare libraries cost with no kip code at all.

- ``two_hop_round_trip``: a client sends a record through two chained transactional
  consume-transform-produce hops (aiokafka, with kip's producer and consumer settings:
  acks=all, idempotence, read_committed, offsets committed in the transaction) and
  waits for it at the end. kip's request path is two such hops (pipeline, worker).
  A hop sends its produce beside its offsets, as aiokafka's transaction API invites;
  the broker's check of the produce (KIP-890) sometimes meets the offsets' own check,
  and the produce is answered NOT_ENOUGH_REPLICAS and retried after the backoff. kip's
  stages wait for the produce's ack first (transport/transactions.py). The floor's
  retries are counted, not printed (``ProduceRetries``).
- ``two_hop_around``: the same hops, the second transforming each record in its hop,
  inline, before producing it (``kip bench cost``: raw ONNX Runtime on the text the
  record carries, as kip's worker infers between its two hops); each trip's wall time
  and the transform's share of it. kip's requests reach the broker and the stages
  after an inference's pause; back to back, the floor's never wait for a cold broker.
- ``faust_first_round_trip``: the same round trip with the first hop a bare faust agent
  in its own process (stock faust-streaming, one event at a time, each forwarded in a
  transaction with its offset, as the aiokafka hop does): the floor of a path whose
  first stage is a faust agent, as kip's pipeline is.
- ``kips_shape_round_trip``: every part of kip's design at once, with no kip code: the
  first hop a bare faust agent, side records in each hop's transaction as kip's audit
  records (and the pipeline's admitted ids) ride its stages', and the second hop
  transforming each record in a thread off its event loop, as kip's worker infers
  (``SHAPE_OF_KIP``).
- ``faust_consume_cpu``: a bare faust agent, in its own process, that only consumes
  events in batches (``take_events(500, within=0.01)``); its CPU per event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiokafka import TopicPartition
from pydantic import SecretStr

from kip.devkit.cpu import CpuMeter
from kip.runtime.files import write_private
from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec
from kip.transport.clients import KafkaConnection

FAUST_TAKE = 500
FAUST_WITHIN_S = 0.01
SIDE_BYTES = 200   # about an audit record's size
FIRST_TRIP_S = 60.0   # a warm-up trip: the hops' first transactions, faust's start
WARM_UP_TRIPS = 5   # each floor's first trips, not measured: first transactions and fetches


async def _topics(kafka: KafkaConnection, names: list[str]) -> None:
    await apply(kafka, [TopicSpec(n, 1, "any", "a floor probe", {}) for n in names])


Transform = Callable[[bytes], bytes]


@dataclass(frozen=True)
class Shape:
    """What a floor's two hops do besides forwarding each record in a transaction."""

    faust_first: bool = False   # the first hop a bare faust agent, in a process of its own
    first_sides: int = 0        # side records per record in the first hop's transaction
    second_sides: int = 0       # and in the second's
    in_thread: bool = False     # the second hop's transform in a thread, off its loop


# kip's pipeline is a faust agent and writes an audit record and an admitted id beside
# each work item; its worker infers in a thread and writes an audit record beside each
# result.
SHAPE_OF_KIP = Shape(faust_first=True, first_sides=2, second_sides=1, in_thread=True)


async def _hop(kafka: KafkaConnection, source: str, target: str, group: str,
               transform: Transform | None = None, spent: dict | None = None,
               sides: tuple[str, ...] = (), in_thread: bool = False) -> None:
    """Consume ``source``, produce each record to ``target`` (its value through
    ``transform`` where given, in the loop's executor with ``in_thread``, the ms that
    took in ``spent`` by the record's key), commit offsets, one transaction per fetched
    batch; until cancelled. With ``sides``, each record also sends ``SIDE_BYTES`` to each
    of those topics in its transaction, as kip's audit and admitted-ids records ride its
    stages' transactions."""
    consumer = kafka.consumer(source, group_id=group, auto_offset_reset="earliest")
    producer = kafka.producer(transactional_id=f"{group}-txn", retry_backoff_ms=10,
                              linger_ms=0)
    async with AsyncExitStack() as stack:
        for client in (consumer, producer):
            await client.start()
            stack.push_async_callback(client.stop)
        while True:
            batch = await consumer.getmany(timeout_ms=100, max_records=500)
            if not batch:
                continue
            async with producer.transaction():
                for records in batch.values():
                    for record in records:
                        value = (await asyncio.to_thread(_transformed, record, transform, spent)
                                 if in_thread else _transformed(record, transform, spent))
                        await producer.send(target, value, key=record.key)
                        for side in sides:
                            await producer.send(side, _side(record.value), key=record.key)
                await producer.send_offsets_to_transaction(
                    {tp: records[-1].offset + 1 for tp, records in batch.items()}, group)


def _side(value: bytes) -> bytes:
    return value[:SIDE_BYTES].ljust(SIDE_BYTES, b" ")


def _transformed(record, transform: Transform | None, spent: dict | None) -> bytes:
    if transform is None:
        return record.value
    started = time.perf_counter()
    value = transform(record.value)
    spent[record.key] = (time.perf_counter() - started) * 1000
    return value


class ProduceRetries(logging.Filter):
    """Counts the produce retries aiokafka's sender logs (a warning each), and keeps
    them off the terminal while it is attached."""

    LOGGER = "aiokafka.producer.sender"

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "retrying" in record.getMessage():
            self.count += 1
            return False
        return True

    def __enter__(self) -> ProduceRetries:
        logging.getLogger(self.LOGGER).addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger(self.LOGGER).removeFilter(self)


async def two_hop_round_trip(kafka: KafkaConnection, payload: bytes, count: int,
                             retries: ProduceRetries | None = None,
                             meter: CpuMeter | None = None) -> list[float]:
    """Milliseconds per round trip of ``count`` sequential records; ``retries``, where
    given, counts the hops' produce retries (the warm-up's included); ``meter``, where
    given, is started after the warm-up and stopped after the last trip."""
    with retries or ProduceRetries():
        trips = await _round_trips(kafka, [payload] * count, meter or CpuMeter({}))
    return [wall for wall, _ in trips]


async def two_hop_around(kafka: KafkaConnection, payloads: list[bytes], transform: Transform,
                         retries: ProduceRetries | None = None,
                         meter: CpuMeter | None = None) -> list[tuple[float, float]]:
    """(round trip ms, of which ``transform`` ms) for each of ``payloads`` in turn, sent
    through the two hops with the second applying ``transform``; ``meter`` as in
    ``two_hop_round_trip``."""
    with retries or ProduceRetries():
        return await _round_trips(kafka, payloads, meter or CpuMeter({}), transform)


async def faust_first_round_trip(kafka: KafkaConnection, payload: bytes, count: int,
                                 retries: ProduceRetries | None = None) -> list[float]:
    """Milliseconds per round trip of ``count`` sequential records through two hops, the
    first a bare faust agent in a process of its own, the second the aiokafka hop."""
    with retries or ProduceRetries():
        trips = await _round_trips(kafka, [payload] * count, CpuMeter({}),
                                   shape=Shape(faust_first=True))
    return [wall for wall, _ in trips]


async def kips_shape_round_trip(kafka: KafkaConnection, payloads: list[bytes],
                                transform: Transform, retries: ProduceRetries | None = None,
                                meter: CpuMeter | None = None, run: str | None = None
                                ) -> list[tuple[float, float]]:
    """(round trip ms, of which ``transform`` ms) for each of ``payloads`` in turn,
    through two hops of ``SHAPE_OF_KIP`` (on topics named ``<run>.*``); ``meter`` as in
    ``two_hop_round_trip``."""
    with retries or ProduceRetries():
        return await _round_trips(kafka, payloads, meter or CpuMeter({}), transform,
                                  SHAPE_OF_KIP, run)


async def _round_trips(kafka: KafkaConnection, payloads: list[bytes], meter: CpuMeter,
                       transform: Transform | None = None, shape: Shape = Shape(),
                       run: str | None = None) -> list[tuple[float, float]]:
    run = run or f"floor-{uuid.uuid4().hex[:8]}"
    a, b, c = (f"{run}.{n}" for n in "abc")
    sides = tuple(f"{run}.side{n}" for n in range(max(shape.first_sides, shape.second_sides)))
    await _topics(kafka, [a, b, c, *sides])
    spent: dict[bytes, float] = {}
    first_sides, second_sides = sides[:shape.first_sides], sides[:shape.second_sides]
    first = (_faust_hop(kafka, a, b, f"{run}-1", sides=first_sides) if shape.faust_first
             else _running(_hop(kafka, a, b, f"{run}-1", sides=first_sides)))
    second = _hop(kafka, b, c, f"{run}-2", transform, spent, second_sides, shape.in_thread)
    async with first as failed, _running(second), _reader(kafka, c) as (producer, consumer):
        for _ in range(WARM_UP_TRIPS):
            try:
                await asyncio.wait_for(_one_trip(producer, consumer, a, payloads[0]),
                                       FIRST_TRIP_S)
            except asyncio.TimeoutError:
                raise RuntimeError(f"a floor's warm-up trip took over {FIRST_TRIP_S:.0f} s: "
                                   f"{failed()}") from None
        meter.start()
        trips = [await _one_trip(producer, consumer, a, payload) for payload in payloads]
        meter.stop()
        return [(wall, spent.pop(key, 0.0)) for wall, key in trips]


@asynccontextmanager
async def _running(hop: Coroutine) -> AsyncIterator[Callable[[], str]]:
    """``hop`` running as a task while the block runs; yields what says why it failed."""
    task = asyncio.create_task(hop)
    try:
        yield lambda: repr(task.exception()) if task.done() else "the hop still runs"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def _reader(kafka: KafkaConnection, topic: str) -> AsyncIterator[tuple]:
    """The floor's client: a producer, and a consumer at the end of ``topic``."""
    consumer = kafka.consumer(group_id=None)
    producer = kafka.producer(linger_ms=0)
    try:
        await producer.start()
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        yield producer, consumer
    finally:
        await producer.stop()
        await consumer.stop()


async def _one_trip(producer, consumer, topic: str, payload: bytes) -> tuple[float, bytes]:
    """The round trip's ms, and the key it went under."""
    key = uuid.uuid4().hex.encode()
    started = time.perf_counter()
    await producer.send_and_wait(topic, payload, key=key)
    while True:
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            if any(r.key == key for r in records):
                return (time.perf_counter() - started) * 1000, key


async def faust_consume_cpu(kafka: KafkaConnection, payload: bytes, events: int,
                            timeout_s: float = 120.0) -> float:
    """CPU µs per event of a bare faust agent consuming ``events`` copies of ``payload``."""
    topic = f"floor-faust-{uuid.uuid4().hex[:8]}"
    await _topics(kafka, [topic])
    producer = kafka.producer(linger_ms=20)
    await producer.start()
    try:
        for _ in range(events):
            await producer.send(topic, payload, key=b"tenant")
        await producer.flush()
    finally:
        await producer.stop()
    with tempfile.TemporaryDirectory(prefix="kip-floor-") as datadir:
        settings = json.dumps({"mode": "consume", "topic": topic, "events": events,
                               "datadir": datadir,
                               "kafka": str(_connection_file(kafka, Path(datadir)))})
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "kip.devkit.floors", settings],
            capture_output=True, text=True, timeout=timeout_s,
            env=os.environ | {"PYTHONPATH": os.getcwd()})
    # faust sends a worker's stdout to its log, with a prefix: find the report anywhere
    found = re.findall(r'\{"cpu_us_per_event": [0-9.e+-]+\}', done.stdout + done.stderr)
    if not found:
        raise RuntimeError(f"the faust floor probe failed: {done.stderr[-2000:]}")
    return json.loads(found[-1])["cpu_us_per_event"]


@asynccontextmanager
async def _faust_hop(kafka: KafkaConnection, source: str, target: str, group: str,
                     kip_consumer: bool = False, sides: tuple[str, ...] = ()
                     ) -> AsyncIterator[Callable[[], str]]:
    """The bare faust hop running in a process of its own while the block runs, with
    faust's own consumer or kip's pipeline's (``kip_consumer``: on the agents' loop, its
    lean drain; pipeline/app.py), side records to ``sides`` as ``_hop`` sends them;
    yields what says why it failed (its log's tail)."""
    with tempfile.TemporaryDirectory(prefix="kip-floor-") as datadir:
        settings = json.dumps({"mode": "hop", "topic": source, "target": target,
                               "group": group, "datadir": datadir,
                               "kip_consumer": kip_consumer, "sides": list(sides),
                               "kafka": str(_connection_file(kafka, Path(datadir)))})
        log = Path(datadir) / "hop.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "kip.devkit.floors", settings, stdout=out, stderr=out,
                env=os.environ | {"PYTHONPATH": os.getcwd()})
        try:
            yield lambda: "the faust hop's log ends: " + log.read_text(errors="replace")[-2000:]
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


def _connection_file(kafka: KafkaConnection, folder: Path) -> Path:
    """``kafka`` as a client config (0600, secrets included) that the probe's process
    connects with: on a secured broker, over TLS as the same user."""
    fields = {name: value.get_secret_value() if isinstance(value, SecretStr)
              else str(value) if isinstance(value, Path) else value
              for name, value in kafka.model_dump(exclude_none=True).items()}
    path = folder / "kafka.json"
    write_private(path, json.dumps(fields).encode())
    return path


def _faust_probe(settings: dict) -> None:
    """A bare faust agent (in its own process) on ``settings["topic"]``: it consumes,
    counts, reports and exits (mode "consume"), or forwards each event (mode "hop")."""
    import faust

    kafka = KafkaConnection.model_validate_json(Path(settings["kafka"]).read_bytes())
    app = faust.App(f"floor-{uuid.uuid4().hex[:8]}", **kafka.faust_broker(),
                    store="memory://", datadir=settings["datadir"], web_enabled=False,
                    autodiscover=False,
                    consumer_auto_offset_reset="earliest", topic_replication_factor=1)
    if settings.get("kip_consumer"):
        from kip.pipeline.app import TransactionalConsumer
        app.transport.Consumer = TransactionalConsumer
    topic = app.topic(settings["topic"], key_serializer="raw", value_serializer="raw")
    agent = _forward if settings["mode"] == "hop" else _consume
    app.agent(topic)(agent(kafka, settings))
    faust.Worker(app, loglevel="WARNING", quiet=True).execute_from_commandline()


def _consume(kafka: KafkaConnection, settings: dict):
    seen = {"n": 0, "cpu": 0.0}

    async def consume(stream):
        async for events in stream.take_events(FAUST_TAKE, within=FAUST_WITHIN_S):
            if seen["n"] == 0:
                seen["cpu"] = time.process_time()
            seen["n"] += len(events)
            if seen["n"] >= settings["events"]:
                spent = (time.process_time() - seen["cpu"]) * 1e6
                print(json.dumps({"cpu_us_per_event": spent / seen["n"]}), flush=True)
                os._exit(0)   # a probe: nothing to clean up
    return consume


def _forward(kafka: KafkaConnection, settings: dict):
    """Each event to ``settings["target"]`` (and its side records) in a transaction with
    its next offset, as the aiokafka hop does (the offsets under a group of their own:
    faust commits its group's offsets itself)."""
    group = settings["group"]

    async def forward(stream):
        producer = kafka.producer(transactional_id=f"{group}-txn", retry_backoff_ms=10,
                                  linger_ms=0)
        await producer.start()
        try:
            async for event in stream.events():
                m = event.message
                async with producer.transaction():
                    await producer.send(settings["target"], m.value, key=m.key)
                    for side in settings.get("sides", ()):
                        await producer.send(side, _side(m.value), key=m.key)
                    await producer.send_offsets_to_transaction(
                        {TopicPartition(m.topic, m.partition): m.offset + 1}, group)
        finally:
            await producer.stop()
    return forward


if __name__ == "__main__":
    _faust_probe(json.loads(sys.argv[1]))
