"""faust's message drain, racing a fetch's deliveries against a halt once per fetch.

faust's consumer hands each fetched message to its agents' streams from a loop
(``Consumer._drain_messages``, faust-streaming 0.12-0.15) that races every delivery
against the flow being suspended (a rebalance) or the consumer stopping, so that a
delivery blocked on a full stream is abandoned then. It races with ``Service.wait_first``:
per message, four tasks (the delivery, and waits on the suspension, the stop and the
crash), ``asyncio.wait``, and three cancellations, each a pass of a task. In the
pipeline under load that was ~11% of the event loop's busy time (py-spy,
docs/benchmarks.md).

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
"""

from __future__ import annotations

import asyncio

from faust.transport.consumer import CONSUMER_FETCHING
from faust.types import TP, Message

from pipeline.intake import Screen
from schemas.codec import now_ms

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
