"""Rounds from a real faust stream over an in-process channel (no broker needed: the app
is never started, and its events are put on the channel as a consumer would deliver
them)."""

from __future__ import annotations

import asyncio
import time

import faust
from faust.types import Message

from kip.pipeline.rounds import rounds


class Channel:
    """A faust channel and one stream over it, with rounds collected as they come."""

    def __init__(self, max_: int, within_s: float, handle_s: float = 0.0,
                 per_partition: int | None = None) -> None:
        self.app = faust.App("test-rounds", broker="kafka://127.0.0.1:1")
        self.app.flow_control.resume()   # a started app's consumer would do this
        self.channel = self.app.channel()
        self.stream = self.channel.stream()
        self.max_, self.within_s, self.handle_s = max_, within_s, handle_s
        self.per_partition = per_partition
        self.got: list[tuple[list[int], float, list[bool]]] = []   # values, at, acked
        self.messages: list[Message] = []
        self.started = time.monotonic()
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> Channel:
        self._task = asyncio.create_task(self._consume())
        await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        # The stream asked the app for its consumer, which made a thread's event loop
        # that is never started; close it, or it is reported unclosed at exit.
        self.app.consumer._thread.thread_loop.close()

    async def put(self, *offsets: int, partition: int = 0, generation: int | None = None
                  ) -> None:
        """Events of ``partition`` (valued by their offsets), fetched in ``generation``
        (default: the consumer group's current one)."""
        for offset in offsets:
            message = Message("t", partition, offset, 0.0, 0, None, None, b"v", None,
                              generation_id=self.app.consumer_generation_id
                              if generation is None else generation)
            self.messages.append(message)
            await self.channel.put(self.app.create_event(None, offset, None, message))

    def since_start(self) -> float:
        return time.monotonic() - self.started

    async def _consume(self) -> None:
        async for events in rounds(self.stream, self.max_, self.within_s,
                                   self.per_partition):
            self.got.append(([e.value for e in events], self.since_start(),
                             [e.message.acked for e in events]))
            await asyncio.sleep(self.handle_s)


def test_a_full_round_goes_at_once_and_the_rest_after_round_ms():
    async def go():
        async with Channel(max_=4, within_s=1.0) as c:
            await c.put(*range(10))
            await asyncio.sleep(1.3)
            return c.got
    got = asyncio.run(go())
    assert [values for values, _, _ in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert got[0][1] < 0.5 and got[1][1] < 0.5        # full: no waiting for within_s
    assert got[2][1] >= 1.0                            # partial: waited within_s for more


def test_the_round_clock_starts_at_the_first_event_not_before():
    async def go():
        async with Channel(max_=4, within_s=0.3) as c:
            await asyncio.sleep(0.5)    # idle: no round, and no clock running
            put_at = c.since_start()
            await c.put(1)
            await asyncio.sleep(0.6)
            return put_at, c.got
    put_at, got = asyncio.run(go())
    assert [values for values, _, _ in got] == [[1]]
    assert got[0][1] - put_at >= 0.3


def test_events_are_acked_after_their_round_is_handled_and_a_round_never_exceeds_max():
    async def go():
        async with Channel(max_=3, within_s=0.05, handle_s=0.2) as c:
            await c.put(0)
            await asyncio.sleep(0.1)    # the first round is being handled
            await c.put(*range(1, 8))   # arrive meanwhile
            await asyncio.sleep(1.5)    # four rounds of 0.2 s each
            return c.got, [m.acked for m in c.messages]
    got, acked_at_end = asyncio.run(go())
    assert [values for values, _, _ in got] == [[0], [1, 2, 3], [4, 5, 6], [7]]
    assert all(not any(acked) for _, _, acked in got)   # none acked while handled
    assert all(acked_at_end)


def test_a_round_takes_each_partition_in_turn_so_a_flood_on_one_holds_another_back_little():
    async def go():
        async with Channel(max_=20, within_s=0.0, handle_s=0.05, per_partition=4) as c:
            await c.put(0, partition=0)
            await asyncio.sleep(0.01)                    # its round is being handled
            await c.put(*range(1, 101), partition=0)     # one partition's flood...
            await c.put(1000, partition=1)               # ...then another's request
            await asyncio.sleep(1.8)
            return c.got, c.messages
    got, messages = asyncio.run(go())
    values = [values for values, _, _ in got]
    assert values[:2] == [[0], [1, 2, 3, 4, 1000]]   # the next round, not the 26th
    assert [v for round_ in values for v in round_ if v != 1000] == list(range(101))
    assert all(len(round_) <= 4 + 1 for round_ in values)
    assert all(m.acked for m in messages)


def test_events_fetched_before_a_rebalance_are_dropped_unacknowledged():
    async def go():
        async with Channel(max_=10, within_s=0.0) as c:
            await c.put(0, 1, generation=c.app.consumer_generation_id - 1)
            await c.put(2)
            await asyncio.sleep(0.3)
            return c.got, c.messages
    got, messages = asyncio.run(go())
    assert [values for values, _, _ in got] == [[2]]
    assert [m.acked for m in messages] == [False, False, True]
