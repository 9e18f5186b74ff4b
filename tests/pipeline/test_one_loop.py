"""faust's consumer service on the caller's loop: mode's thread service, with no thread."""

from __future__ import annotations

import asyncio
import threading

from mode.threads import QueueServiceThread

from kip.pipeline.faust_adapter import OnTheLoop


class _Service(OnTheLoop, QueueServiceThread):
    """A queue service thread as faust's consumer thread is one, recording its hooks."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: list[str] = []

    async def on_start(self) -> None:
        self.seen.append(f"start in {threading.current_thread().name}")

    async def on_thread_stop(self) -> None:
        await super().on_thread_stop()
        self.seen.append("thread stop")


def test_it_starts_calls_and_stops_on_the_callers_loop():
    async def scenario():
        threads = threading.active_count()
        service = _Service(loop=asyncio.get_running_loop())
        assert service.thread_loop is asyncio.get_running_loop()
        await service.start()
        assert threading.active_count() == threads   # no thread of its own
        here = threading.current_thread().name

        async def coroutine(x):
            return (x, threading.current_thread().name)

        assert await service.call_thread(coroutine, 1) == (1, here)
        assert await service.call_thread(lambda x: x + 1, 1) == 2   # a plain function
        cast = []
        await service.cast_thread(coroutine, 2)
        await service.cast_thread(cast.append, 3)
        assert cast == [3]
        await service.stop()
        assert service.should_stop and service.seen == [f"start in {here}", "thread stop"]
        await service.stop()   # a second stop does nothing
        assert service.seen == [f"start in {here}", "thread stop"]

    asyncio.run(scenario())
