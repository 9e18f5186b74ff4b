"""faust's Kafka consumer on the agents' own event loop, with no thread of its own.

faust-streaming runs its aiokafka consumer in a thread with a second event loop
(``ConsumerThread``, a mode ``QueueServiceThread``), and reaches it through a queue: every
fetch is a call put on that queue, run by the thread's loop, and answered across threads
(``call_soon_threadsafe``), which then wakes the agents' loop. For a lone interactive
request that hand-off took 0.5-1.1 ms, from the fetch's answer to the drain
(docs/benchmarks.md).

``OnTheLoop`` gives the consumer service the agents' loop as its "thread loop" and
starts it as a plain service there: ``call_thread`` awaits the call in place, and the
rebalance callbacks, which faust already routes through a queue of the main loop, run
there too. Nothing in faust's consumer blocks a thread waiting for the other one (all
its cross-thread calls are awaited futures), so one loop serves both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mode import Service
from mode.utils.futures import maybe_async


class OnTheLoop:
    """A mixin for a mode ``QueueServiceThread`` (before it in the bases): the service
    runs on the loop it is given (``loop=``), as a plain service, with no thread."""

    wait_for_shutdown = False   # nothing else (a thread) sets the shutdown flag

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["thread_loop"] = kwargs.get("loop") or asyncio.get_event_loop_policy(
        ).get_event_loop()
        super().__init__(*args, **kwargs)

    async def start(self) -> None:
        self._thread_started.set()
        await Service.start(self)
        await self.on_thread_started()

    async def stop(self) -> None:
        if self._started.is_set() and not self._stopped.is_set():
            await Service.stop(self)
            await self.on_thread_stop()

    # mode's thread leaves these to the thread itself, when it ends; here, stop does them.
    _stop_children = Service._stop_children
    _stop_futures = Service._stop_futures
    _stop_exit_stacks = Service._stop_exit_stacks
    _stopped_set = Service._stopped_set

    def set_shutdown(self) -> None:
        self._shutdown.set()

    async def call_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fun``'s answer, awaited where it is one (some of faust's calls, aiokafka's
        ``subscribe`` among them, are plain functions: mode's queue takes both)."""
        return await maybe_async(fun(*args, **kwargs))

    async def cast_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.add_future(maybe_async(fun(*args, **kwargs)))
