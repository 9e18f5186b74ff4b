"""The pipeline's faust consumer draining fetches (``pipeline.faust_adapter.LeanDrain``): the
real consumer class and faust's bookkeeping, with only Kafka's fetch replaced by
fetches the test hands it (the app is never started; no broker needed)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import faust
from faust.types import TP, Message

from kip.pipeline.faust_adapter import TransactionalConsumer, remove_processor

TOPIC_PARTITION = TP("kip.requests.interactive", 0)


class Fetched(TransactionalConsumer):
    """The pipeline's consumer; each ``getmany`` takes the next fetch from ``fetches``."""

    def __init__(self, app: faust.App, delivered: list[int], block: set[int]) -> None:
        super().__init__(app.transport, callback=self._record,
                         on_partitions_revoked=None, on_partitions_assigned=None)
        self.fetches: asyncio.Queue[list[int]] = asyncio.Queue()
        self.delivered, self.block = delivered, block
        self.blocked = asyncio.Event()     # a delivery that never ends has begun
        self.abandoned: list[int] = []     # offsets whose delivery was cancelled

    async def getmany(self, timeout: float):
        for offset in await self.fetches.get():
            yield TOPIC_PARTITION, Message(TOPIC_PARTITION.topic, 0, offset, 0.0, 0,
                                           None, None, b"v", None)

    async def _record(self, message: Message) -> None:
        if message.offset in self.block:   # once
            self.block.discard(message.offset)
            self.blocked.set()
            try:
                await asyncio.Event().wait()   # a stream that never takes it
            except asyncio.CancelledError:
                self.abandoned.append(message.offset)
                raise
        self.delivered.append(message.offset)


async def _draining(consumer: Fetched):
    fetcher = SimpleNamespace(_stopped=asyncio.Event())
    return fetcher, asyncio.create_task(consumer._drain_messages(fetcher))


async def _until(condition, timeout_s: float = 2.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


def _consumer(block: set[int] = frozenset()) -> tuple[Fetched, list[int]]:
    app = faust.App("test-drain", broker="kafka://127.0.0.1:1")
    delivered: list[int] = []
    return Fetched(app, delivered, set(block)), delivered


def test_each_fetch_is_delivered_in_order_and_an_offset_below_the_last_read_is_skipped():
    async def go():
        consumer, delivered = _consumer()
        fetcher, drain = await _draining(consumer)
        for fetch in ([0, 1, 2], [1, 3, 5]):   # 1 fetched again; 4 a transaction marker
            consumer.fetches.put_nowait(fetch)
        await _until(lambda: len(delivered) == 5)
        fetcher._stopped.set()
        consumer.fetches.put_nowait([])
        await asyncio.wait_for(drain, 2)
        return delivered, consumer._read_offset[TOPIC_PARTITION]
    assert asyncio.run(go()) == ([0, 1, 2, 3, 5], 5)


def test_a_suspended_flow_abandons_a_blocked_delivery_and_the_drain_goes_on():
    async def go():
        consumer, delivered = _consumer(block={1})
        fetcher, drain = await _draining(consumer)
        consumer.fetches.put_nowait([0, 1, 2])
        await asyncio.wait_for(consumer.blocked.wait(), 2)
        consumer.suspend_flow.set()              # a rebalance begins
        await _until(lambda: consumer.abandoned == [1])
        consumer.suspend_flow.clear()            # and ends: the next fetch flows
        consumer.fetches.put_nowait([1, 2])
        await _until(lambda: len(delivered) == 3)
        fetcher._stopped.set()
        consumer.fetches.put_nowait([])
        await asyncio.wait_for(drain, 2)
        return list(delivered)
    assert asyncio.run(go()) == [0, 1, 2]   # 2 waited behind 1: never delivered twice


def test_a_stopping_consumer_ends_the_drain_while_a_delivery_is_blocked():
    async def go():
        consumer, delivered = _consumer(block={0})
        _, drain = await _draining(consumer)
        consumer.fetches.put_nowait([0])
        await asyncio.wait_for(consumer.blocked.wait(), 2)
        consumer._stopped.set()
        await asyncio.wait_for(drain, 2)
        return list(consumer.abandoned), list(delivered)
    assert asyncio.run(go()) == ([0], [])


def test_a_cancelled_drain_abandons_the_rest_of_its_fetch():
    """faust cancels its fetcher's drain on a rebalance: no message of the fetch may
    reach a stream after that."""
    async def go():
        consumer, delivered = _consumer(block={0})
        _, drain = await _draining(consumer)
        consumer.fetches.put_nowait([0, 1])
        await asyncio.wait_for(consumer.blocked.wait(), 2)
        drain.cancel()
        await asyncio.gather(drain, return_exceptions=True)
        await asyncio.sleep(0.05)
        return list(consumer.abandoned), list(delivered)   # before asyncio.run's clean-up
    assert asyncio.run(go()) == ([0], [])


def test_every_fetch_delivered_or_empty_gives_way_to_the_event_loop():
    """A fetch answered at once (records already buffered, or none) must not hold the
    loop: between one fetch and the next, the other tasks get a pass."""
    async def go():
        consumer, _ = _consumer()
        passes, seen = 0, []

        async def ticker():
            nonlocal passes
            while True:
                passes += 1
                await asyncio.sleep(0)

        fetch_from_queue = consumer.getmany

        async def getmany(timeout):
            seen.append(passes)
            async for item in fetch_from_queue(timeout):
                yield item

        consumer.getmany = getmany
        for fetch in ([], [0], [], [1, 2], []):   # all there at once: get() never waits
            consumer.fetches.put_nowait(fetch)
        tick = asyncio.create_task(ticker())
        fetcher, drain = await _draining(consumer)
        await _until(lambda: len(seen) == 6)   # the sixth waits for a fetch
        fetcher._stopped.set()
        consumer.fetches.put_nowait([])
        await asyncio.wait_for(drain, 2)
        tick.cancel()
        return seen
    seen = asyncio.run(go())
    assert all(later > earlier for earlier, later in zip(seen, seen[1:])), seen


# What pipeline/faust_adapter.py relies on, pinned against the installed faust-streaming
# and mode-streaming (``scripts/compat`` runs this file against the newest releases).

def test_fausts_consumer_keeps_the_steps_and_bookkeeping_the_adapter_overrides():
    import inspect

    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
    from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
    for method in ("_commit", "_new_consumer_thread", "_drain_messages", "_add_gap",
                   "getmany", "wait_first"):
        assert callable(getattr(FaustConsumer, method)), method
    assert list(inspect.signature(FaustConsumer._drain_messages).parameters) == [
        "self", "fetcher"]
    state = inspect.getsource(inspect.getmodule(FaustConsumer.__mro__[2]))
    for name in ("self._read_offset", "self._commit_every", "self._n_acked"):
        assert name in state, name
    assert callable(AIOKafkaConsumerThread._create_worker_consumer)


def test_modes_thread_service_keeps_the_steps_one_loop_takes_itself():
    import inspect

    from mode import Service
    from mode.threads import QueueServiceThread
    for method in ("_stop_children", "_stop_futures", "_stop_exit_stacks", "_stopped_set"):
        assert callable(getattr(Service, method)), method
    assert "thread_loop" in inspect.signature(QueueServiceThread.__init__).parameters
    assert "self._thread_started" in inspect.getsource(QueueServiceThread.__mro__[1])


def test_a_stream_drains_in_the_background_and_its_processors_can_be_removed():
    from faust.streams import Stream
    assert callable(Stream._enable_passive)
    app = faust.App("pinned", broker="memory://")
    stream = app.stream(app.channel())
    processor = lambda value: value   # noqa: E731
    stream.add_processor(processor)
    remove_processor(stream, processor)
    assert processor not in stream._processors
