"""Rounds of events from a faust stream, with no timer running while it is idle.

faust's ``Stream.take_events(max_, within)`` wakes every ``within`` seconds to look for
events, whether any came or not. At the interactive class's ``round_ms`` (a few ms) that
is hundreds of wake-ups a second, each building futures and tasks, for a pipeline with
nothing to do, on the cores the workers and broker need. ``rounds`` waits for a round's
first event with no timeout, then at most ``within_s`` for the round to fill to ``max_``.

It fills the round the way ``take_events`` does (faust-streaming 0.12-0.15): a stream
processor appends each event while the stream is drained in the background, and the
events of a round are acknowledged once the caller has handled them. While a round is
handled the drainer waits, so a round never holds more than ``max_`` events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import faust

GATHER_PASSES = 3   # passes of the loop a round waits for the drainer to add one more
GATHER_MAX_S = 0.002   # the longest a round gathers what is there


async def rounds(stream: faust.StreamT, max_: int, within_s: float
                 ) -> AsyncIterator[list[faust.EventT]]:
    events: list[faust.EventT] = []
    first, full, room = asyncio.Event(), asyncio.Event(), asyncio.Event()
    room.set()

    async def add(value):
        event = stream.current_event   # read before awaiting: set for this value only
        await room.wait()
        events.append(event)
        first.set()
        if len(events) >= max_:
            full.set()
            room.clear()
        return value

    enable_acks, stream.enable_acks = stream.enable_acks, False   # acked after the round
    stream.add_processor(add)
    stream._enable_passive(stream.channel)   # as take_events: drain in the background
    try:
        while not stream.should_stop:
            await first.wait()
            await _take_what_is_there(events, full)
            if within_s > 0 and not full.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(full.wait(), within_s)
            room.clear()
            batch = list(events)
            try:
                yield batch
            finally:
                events.clear()
                first.clear()
                full.clear()
                for event in batch:
                    await stream.ack(event)
                room.set()
    finally:
        stream.enable_acks = enable_acks
        stream._processors.remove(add)


async def _take_what_is_there(events: list, full: asyncio.Event) -> None:
    """Let the drainer add the events it holds already, a few passes of the loop at a
    time, until a pass adds none, the round is full, or ``GATHER_MAX_S`` has gone by
    (under a steady stream a pass always adds one more: the round must not wait to
    fill). A round closed at its first event, as an interactive one (``within_s`` 0)
    did, held one event under a backlog: each round costs a transaction per partition,
    so a flood of interactive messages capped the class at ~270 a second here, and
    every request behind it waited (``kip bench flood``). Idle, this costs a round
    ``GATHER_PASSES`` passes."""
    loop = asyncio.get_running_loop()
    until = loop.time() + GATHER_MAX_S
    while not full.is_set() and loop.time() < until:
        count = len(events)
        for _ in range(GATHER_PASSES):
            await asyncio.sleep(0)
        if len(events) == count:
            return
