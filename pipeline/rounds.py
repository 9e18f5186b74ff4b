"""Rounds of events from a faust stream: fair between partitions, with no timer running
while it is idle.

faust's ``Stream.take_events(max_, within)`` wakes every ``within`` seconds to look for
events, whether any came or not. At the interactive class's ``round_ms`` (a few ms) that
is hundreds of wake-ups a second, each building futures and tasks, for a pipeline with
nothing to do, on the cores the workers and broker need. ``rounds`` waits for a round's
first event with no timeout, then at most ``within_s`` for the round to fill to ``max_``.

faust's stream is one queue for all of an agent's partitions, in the order the fetches
came: a tenant's flood on its own request partition would queue in front of another
tenant's interactive requests on theirs (``kip bench flood``). So each
event the stream yields moves at once into its partition's lane (``Lanes``), up to as
many in all as faust's queue holds, and a round takes from the lanes in turn, at most
``per_partition`` events of each: an event waits behind its own partition's events and
at most one round's share of each other partition's.

Events are acknowledged (in each partition's order) once the caller has handled their
round, as ``take_events`` does (faust-streaming 0.12-0.15): a stream processor moves
each event while the stream is drained in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

import faust

from kip.pipeline.faust_adapter import drain_in_background, remove_processor

GATHER_PASSES = 3   # passes of the loop a round waits for the drainer to add one more
GATHER_MAX_S = 0.002   # the longest a round gathers what is there


class Lanes:
    """Events waiting for a round, in one FIFO per partition: ``arrived`` set while
    there are any, ``full`` while there are a round's ``max_``; at most ``bound`` in
    all (``add`` waits for room)."""

    def __init__(self, max_: int, bound: int) -> None:
        self.max_, self.bound = max_, max(bound, max_)
        self.waiting: dict[tuple[str, int], deque] = {}
        self.count = 0
        self.arrived, self.full, self.room = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.room.set()

    async def add(self, event: faust.EventT) -> None:
        await self.room.wait()
        lane = (event.message.topic, event.message.partition)
        self.waiting.setdefault(lane, deque()).append(event)
        self._counted(1)

    def take(self, per_partition: int, generation: int) -> list[faust.EventT]:
        """Up to ``per_partition`` of each lane's oldest events, lanes in turn, up to
        ``max_``; a lane left with events goes to the back of the turn. Events fetched
        before the consumer group's current generation (their partition may be another
        process's now) are dropped, unacknowledged, as faust's stream drops them."""
        batch: list[faust.EventT] = []
        for lane in list(self.waiting):
            events = self.waiting.pop(lane)
            for _ in range(min(len(events), per_partition, self.max_ - len(batch))):
                batch.append(events.popleft())
            if events:
                self.waiting[lane] = events
            if len(batch) >= self.max_:
                break
        self._counted(-len(batch))
        return [e for e in batch if e.message.generation_id == generation]

    def _counted(self, change: int) -> None:
        self.count += change
        (self.arrived.set if self.count else self.arrived.clear)()
        (self.full.set if self.count >= self.max_ else self.full.clear)()
        (self.room.clear if self.count >= self.bound else self.room.set)()


async def rounds(stream: faust.StreamT, max_: int, within_s: float,
                 per_partition: int | None = None) -> AsyncIterator[list[faust.EventT]]:
    per_partition = per_partition or max_
    # As many as faust's own queue holds: the events move, they are not copied, and a
    # backlog must reach the lanes for a round to take from each partition in turn.
    lanes = Lanes(max_, stream.app.conf.stream_buffer_maxsize)

    async def add(value):
        await lanes.add(stream.current_event)   # read before awaiting: set for this value
        return value

    enable_acks, stream.enable_acks = stream.enable_acks, False   # acked after the round
    stream.add_processor(add)
    drain_in_background(stream)   # as take_events does
    try:
        while not stream.should_stop:
            await lanes.arrived.wait()   # no timer while idle
            await _take_what_is_there(lanes)
            if within_s > 0 and not lanes.full.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(lanes.full.wait(), within_s)
            batch = lanes.take(per_partition, stream.app.consumer_generation_id)
            if not batch:
                continue
            try:
                yield batch
            finally:
                for event in batch:
                    await stream.ack(event)
    finally:
        stream.enable_acks = enable_acks
        remove_processor(stream, add)


async def _take_what_is_there(lanes: Lanes) -> None:
    """Let the drainer add the events it holds already, a few passes of the loop at a
    time, until a pass adds none, the lanes hold a full round, or ``GATHER_MAX_S`` has gone
    by (under a steady stream a pass always adds one more: the round must not wait to
    fill). A round closed at its first event, as an interactive one (``within_s`` 0)
    did, held one event under a backlog: each round costs a transaction per partition,
    so a flood of interactive messages capped the class at a few hundred a second, and
    every request behind it waited (``kip bench flood``). Idle, this costs a round
    ``GATHER_PASSES`` passes."""
    loop = asyncio.get_running_loop()
    until = loop.time() + GATHER_MAX_S
    while not lanes.full.is_set() and loop.time() < until:
        count = lanes.count
        for _ in range(GATHER_PASSES):
            await asyncio.sleep(0)
        if lanes.count == count:
            return
