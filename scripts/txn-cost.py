"""What one Kafka transaction costs the broker, by its records: a bare local broker,
one transactional producer, transactions shaped as kip's (records, then an input
offset) of 1 to 300 records of 1 KB. Prints the broker's CPU per transaction (its idle
CPU taken out) and per record, and the wall time per transaction.

    PYTHONPATH=. .venv/bin/python scripts/txn-cost.py
"""

import asyncio
import tempfile
import time
from pathlib import Path

from aiokafka import TopicPartition

from kip.devkit.broker import LocalBroker, free_port
from kip.devkit.cpu import cpu_us
from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec

SHAPES = [(200, 1, 1, True), (200, 100, 1, True), (200, 1, 1, False), (100, 300, 3, True)]


async def transactions(producer, n: int, records: int, partitions: int, offsets: bool):
    for i in range(n):
        async with producer.transaction():
            for j in range(records):
                await producer.send("t.out", b"x" * 1000, key=b"k", partition=j % partitions)
            if offsets:
                await producer.send_offsets_to_transaction({TopicPartition("t.in", 0): i}, "g1")


async def idle_cpu_us_per_s(broker: LocalBroker, seconds: float = 3.0) -> float:
    before = cpu_us(broker.pid())
    await asyncio.sleep(seconds)
    return (cpu_us(broker.pid()) - before) / seconds


async def measure(broker: LocalBroker) -> None:
    await apply(broker.kafka, [TopicSpec("t.in", 1, "k", "t", {}),
                               TopicSpec("t.out", 3, "k", "t", {})])
    producer = broker.kafka.producer(transactional_id="txn-cost")
    await producer.start()
    try:
        await transactions(producer, 200, 10, 1, True)   # warm-up
        idle = await idle_cpu_us_per_s(broker)
        print(f"idle broker: {idle / 1000:.1f} ms CPU per s")
        for n, records, partitions, offsets in SHAPES:
            before, started = cpu_us(broker.pid()), time.monotonic()
            await transactions(producer, n, records, partitions, offsets)
            wall = time.monotonic() - started
            used = cpu_us(broker.pid()) - before - idle * wall
            print(f"{n} transactions of {records} records over {partitions} partition(s), "
                  f"offsets {'yes' if offsets else 'no'}: broker {used / n:,.0f} µs CPU per "
                  f"transaction ({used / n / records:,.1f} per record), "
                  f"{wall / n * 1000:.1f} ms per transaction")
    finally:
        await producer.stop()


def main() -> None:
    broker = LocalBroker(Path(tempfile.mkdtemp()), port=free_port(),
                         controller_port=free_port())
    broker.start(log=lambda *_: None)
    try:
        asyncio.run(measure(broker))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
