"""The pipeline's one door into faust-streaming's and mode's internals.

Everything here overrides or calls what those libraries keep private, and nothing else
in kip does (``python -m kip.devkit.layers`` checks it);
tests/pipeline/test_faust_adapter.py pins each assumption against the installed
release, and ``scripts/compat`` runs those tests against the newest releases the
package index serves. What it relies on:

- faust's aiokafka driver: ``Consumer._commit`` (switched off: kip commits offsets in
  its own transactions), ``Consumer._new_consumer_thread``,
  ``Consumer._drain_messages(fetcher)`` and the bookkeeping it keeps (``_read_offset``,
  ``_add_gap``, ``_commit_every``, ``_n_acked``, ``fetcher._stopped``),
  ``AIOKafkaConsumerThread._create_worker_consumer`` and its ``_consumer``.
- mode's ``QueueServiceThread`` (``_thread_started``, ``thread_loop=``) and the
  ``Service`` steps its thread takes when it ends (``_stop_children``,
  ``_stop_futures``, ``_stop_exit_stacks``, ``_stopped_set``).
- faust's ``Stream._enable_passive`` (what ``take_events`` calls to drain in the
  background) and ``Stream._processors``.

Why each is worth it:

**The drain** (``LeanDrain``) races a fetch's deliveries against a halt once per
fetch. faust's consumer hands each fetched message to its agents' streams from a loop
(``Consumer._drain_messages``, faust-streaming 0.12-0.15) that races every delivery
against the flow being suspended (a rebalance) or the consumer stopping, so that a
delivery blocked on a full stream is abandoned then. It races with ``Service.wait_first``:
per message, four tasks (the delivery, and waits on the suspension, the stop and the
crash), ``asyncio.wait``, and three cancellations, each a pass of a task: under load,
a large share of the pipeline's event loop (docs/benchmarks.md names the measurement).

``LeanDrain`` keeps the loop and its bookkeeping (read offsets, gaps for acked topics,
the periodic commit) and races the same halt, but once per fetch: one task delivers the
fetch's messages in order, one waiter (kept until it fires) stands for the halt, and
the fetch's deliveries are abandoned when it fires first. A halt that comes while a
delivery runs stops the messages after it too, as faust's fetch iterator does once the
flow is inactive. The fetch itself is not raced, as in faust: while the flow is
suspended, faust's ``getmany`` waits for it to resume.

A message the pipeline's screen sheds (no tenant's, past its key's allowance:
pipeline/intake.py) is passed over here, its read offset kept, never delivered: faust's
per-event machinery costs more than everything the screen does.

**One loop** (``OnTheLoop``). faust-streaming runs its aiokafka consumer in a thread
with a second event loop (``ConsumerThread``, a mode ``QueueServiceThread``), and
reaches it through a queue: every fetch is a call put on that queue, run by the
thread's loop, and answered across threads (``call_soon_threadsafe``), which then
wakes the agents' loop: a lone interactive request waited on that hand-off between the
fetch's answer and the drain.

``OnTheLoop`` gives the consumer service the agents' loop as its "thread loop" and
starts it as a plain service there: ``call_thread`` awaits the call in place, and the
rebalance callbacks, which faust already routes through a queue of the main loop, run
there too. Nothing in faust's consumer blocks a thread waiting for the other one (all
its cross-thread calls are awaited futures), so one loop serves both.

**Fetch waits.** faust fixes its consumer's fetch wait at 1,500 ms; kip's fetches wait
at most ``HOT_PATH_FETCH_MAX_WAIT_MS`` (transport/clients.py says why), and those that
leave no partition out wait long (transport/aiokafka_adapter.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP, Message
from mode import Service
from mode.utils.futures import maybe_async

from kip.pipeline.intake import Screen
from kip.schemas.codec import now_ms
from kip.transport.aiokafka_adapter import set_fetch_max_wait
from kip.transport.fetch_waits import wait_long_when_whole
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS

FETCH_TIMEOUT_S = 1.0   # as faust's drain asks
YIELD_EVERY = 100   # messages delivered between passes of the loop, as faust's drain


class LeanDrain:
    """A mixin for a faust ``Consumer`` (before it in the bases). ``screen``, where set:
    a message it does not keep is not delivered (pipeline/intake.py ``Screen``)."""

    _halt: asyncio.Future | None = None
    screen: Screen | None = None

    async def _drain_messages(self, fetcher) -> None:
        should_stop = lambda: self._stopped.is_set() or fetcher._stopped.is_set()
        try:
            while not should_stop():
                self.diag.set_flag(CONSUMER_FETCHING)
                fetched = [m async for m in self.getmany(timeout=FETCH_TIMEOUT_S)]
                if fetched and not self.should_stop:   # the delivery gives way to the loop
                    await self._deliver_unless_halted(fetched)
                else:   # as faust: getmany may not give way to the loop
                    await asyncio.sleep(0)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if not self.transport.app.should_stop:
                raise
            self.log.info("Broker stopped consumer, shutting down...")
        except Exception as exc:   # as faust's: the fetcher's crash follows
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)
            if self._halt is not None:
                self._halt.cancel()
                self._halt = None

    async def _deliver_unless_halted(self, messages: list[tuple[TP, Message]]) -> None:
        """Deliver ``messages``; abandon what is left of them when the halt comes first,
        or when the drain itself is cancelled (faust restarts its fetcher on a
        rebalance), as ``wait_first`` cancels what it waited for."""
        delivery = asyncio.ensure_future(self._deliver(messages))
        try:
            await asyncio.wait((delivery, self._halt_waiter()),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            halted = not delivery.done()
            if halted:
                delivery.cancel()
        if halted:
            await asyncio.gather(delivery, return_exceptions=True)
        else:
            delivery.result()   # a delivery's error is the drain's, as in faust

    def _halt_waiter(self) -> asyncio.Future:
        """A task that ends when the flow is suspended or the consumer stops or crashes
        (``wait_first`` adds those two); kept across fetches until it ends."""
        if self._halt is None or self._halt.done():
            self._halt = asyncio.ensure_future(self.wait_first(self.suspend_flow.wait()))
        return self._halt

    async def _deliver(self, messages: list[tuple[TP, Message]]) -> None:
        """faust's per-message steps: the read offset, a gap where a topic is acked,
        the periodic commit, the delivery to the streams."""
        acks_enabled_for = self.app.topics.acks_enabled_for
        since_yield = 0
        for tp, message in messages:
            since_yield += 1
            if since_yield > YIELD_EVERY:
                await asyncio.sleep(0)   # the streams take what was delivered so far
                since_yield = 0
            offset, read = message.offset, self._read_offset[tp]
            if read is not None and offset < read:
                continue   # seen already
            if read and offset - read > 1 and acks_enabled_for(message.topic):
                await self._add_gap(tp, read + 1, offset)
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            if self.screen is None or self._screened(tp, message):
                await self.callback(message)
            self._read_offset[tp] = offset

    def _screened(self, tp: TP, message: Message) -> bool:
        return self.screen.keep(tp.topic, tp.partition, message.offset, message.key,
                                message.value, message.headers, now_ms())


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


class TransactionalConsumer(LeanDrain, FaustConsumer):
    """faust's consumer with its offset commits switched off: the admit agent commits
    each partition's offset inside the transaction that carries its outputs; with
    fetches that wait at most ``HOT_PATH_FETCH_MAX_WAIT_MS`` (``FetchWaitConsumerThread``);
    and with a drain that races a halt once per fetch, not per message (``LeanDrain``)."""

    async def _commit(self, offsets) -> bool:
        return True

    def _new_consumer_thread(self) -> FetchWaitConsumerThread:
        return FetchWaitConsumerThread(self, loop=self.loop, beacon=self.beacon)


class FetchWaitConsumerThread(OnTheLoop, AIOKafkaConsumerThread):
    """faust's consumer service, run on the agents' event loop rather than in a thread of
    its own (``OnTheLoop``), its fetches waiting at most ``HOT_PATH_FETCH_MAX_WAIT_MS``
    for data (faust fixes 1,500 ms; transport/clients.py says why).

    aiokafka keeps one fetch in flight per broker, and leaves out of it the partitions
    whose fetched records have not been taken yet. Behind a burst of standard requests
    the fetch in flight therefore often covered only idle partitions, and the broker
    held it the whole wait while interactive requests arrived on a partition it did not
    cover, and interactive admission waited out that whole wait (``kip bench burst
    --one-pipeline``)."""

    def _create_worker_consumer(self, transport) -> AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        set_fetch_max_wait(consumer, HOT_PATH_FETCH_MAX_WAIT_MS)
        return consumer

    async def on_start(self) -> None:
        """Start the consumer; its fetches that leave no partition out wait long
        (transport/aiokafka_adapter.py)."""
        await super().on_start()
        wait_long_when_whole(self._consumer)


def drain_in_background(stream: faust.StreamT) -> None:
    """Have ``stream``'s channel drained into its processors as events arrive, as
    ``take_events`` does (faust has no public call for it)."""
    stream._enable_passive(stream.channel)


def remove_processor(stream: faust.StreamT, processor: Callable) -> None:
    """Undo ``stream.add_processor(processor)`` (faust has no public call for it)."""
    stream._processors.remove(processor)
