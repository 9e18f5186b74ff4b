"""The batch engine: chunks of rows through kip with a bounded number in flight, each
retried as its error says, outcomes in input order.

- A chunk is one request of up to the model's rows per request. Its request id is
  ``<job>.<chunk>.<attempt>``: derived from the job, so a resumed run can find what an
  earlier one sent (kip/batch/job.py), and new per attempt, because the pipeline
  rejects a request id it has seen as a replay.
- Flow control comes from results: at most ``in_flight`` chunks are between submitted
  and handed out; the oldest is awaited before another goes.
- OVERLOADED, QUOTA_EXCEEDED and MODEL_UNAVAILABLE with a ``retry_after_ms`` (no live
  worker of the model: admission fails closed until one reports) are back-pressure: the
  chunk waits ``retry_after_ms`` (or a growing backoff) and goes again, without
  counting against ``retries``. Other
  retriable endings (INTERNAL, an expired deadline, no result within ``timeout_s``)
  go again up to ``retries`` times; anything else is the chunk's final outcome.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter, deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from kip.client import KipClient
from kip.schemas.messages import InferenceResult
from kip.schemas.tensors import Tensor

BACK_PRESSURE = {"OVERLOADED", "QUOTA_EXCEEDED"}
NO_WORKER = "MODEL_UNAVAILABLE"   # back-pressure where admission says when to retry
RETRIABLE = {"INTERNAL", "DEADLINE_EXCEEDED", "CLIENT_TIMEOUT"}
FIRST_BACKOFF_MS, MAX_BACKOFF_MS = 200, 10_000
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass
class Chunk:
    """Rows ``first_row``.. of the input as one request's inputs; ``carry`` is the
    caller's (row ids, say), handed back with the outcome."""

    index: int
    first_row: int
    rows: int
    inputs: list[Tensor] | None        # None: the rows could not be read (``problem``)
    carry: Any = None
    problem: str | None = None


@dataclass
class Outcome:
    chunk: Chunk
    status: str                        # ok, rejected, expired or failed
    code: str | None = None
    message: str | None = None
    result: InferenceResult | None = None
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class BatchRun:
    client: KipClient
    model: str
    job_id: str
    priority: str = "batch"
    in_flight: int = 16
    retries: int = 3
    timeout_s: float = 300.0
    # Told of each request before it is sent (chunk, id, digest) and once Kafka has it
    # (chunk, id): a job journals both (kip/batch/job.py).
    on_sending: Callable[[Chunk, str, str], None] | None = None
    on_delivered: Callable[[Chunk, str], None] | None = None
    earlier: dict[int, InferenceResult] = field(default_factory=dict)   # found, not rerun
    first_attempt: dict[int, int] = field(default_factory=dict)   # ids an earlier run used
    # chunk -> (request id, digest) an earlier run sent and kip has not answered yet
    awaiting: dict[int, tuple[str, str]] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)   # outcomes, by status and code

    def __post_init__(self) -> None:
        if not JOB_ID.match(self.job_id):
            raise ValueError(f"job id {self.job_id!r}: letters, digits, '-' and '_', up "
                             "to 64, starting with a letter or digit")

    async def outcomes(self, chunks: Iterable[Chunk] | AsyncIterable[Chunk]
                       ) -> AsyncIterator[Outcome]:
        """Each chunk's final outcome, in the order the chunks came."""
        window: deque[asyncio.Task] = deque()
        try:
            async for chunk in _aiter(chunks):
                if len(window) >= self.in_flight:
                    yield self._counted(await window.popleft())
                window.append(asyncio.create_task(self._settle(chunk)))
            while window:
                yield self._counted(await window.popleft())
        finally:
            for task in window:
                task.cancel()

    def _counted(self, outcome: Outcome) -> Outcome:
        self.counts[outcome.status if outcome.ok else f"{outcome.status} {outcome.code}"] \
            += outcome.chunk.rows
        return outcome

    async def _settle(self, chunk: Chunk) -> Outcome:
        if chunk.inputs is None:
            return Outcome(chunk, "failed", "INVALID_REQUEST", chunk.problem)
        if chunk.index in self.earlier:
            return _outcome(chunk, self.earlier[chunk.index], None, 0)
        if chunk.index in self.awaiting:
            outcome = await self._awaited(chunk, *self.awaiting[chunk.index])
            if outcome is not None:
                return outcome
        attempt = self.first_attempt.get(chunk.index, 0)
        tries, failures, backoff_ms = 0, 0, FIRST_BACKOFF_MS
        while True:
            tries += 1
            outcome = _outcome(chunk, *await self._attempt(chunk, attempt), tries)
            attempt += 1
            if outcome.ok:
                return outcome
            wait_ms = back_pressure_ms(outcome, backoff_ms)
            if wait_ms is not None:
                await asyncio.sleep(wait_ms / 1000)
                backoff_ms = min(MAX_BACKOFF_MS, backoff_ms * 2)
                continue
            failures += 1
            if outcome.code not in RETRIABLE or failures > self.retries:
                return outcome
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(MAX_BACKOFF_MS, backoff_ms * 2)

    async def _awaited(self, chunk: Chunk, request_id: str, digest: str) -> Outcome | None:
        """The ok outcome of a request an earlier run sent, if its result comes within
        ``timeout_s`` (kip answers every request once, so it is on its way); None: send
        the chunk again."""
        future = self.client.expect_digest(request_id, digest)
        try:
            result = await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            self.client.forget(request_id)
            return None
        return _outcome(chunk, result, None, 0) if result.status.value == "ok" else None

    async def _attempt(self, chunk: Chunk, attempt: int
                       ) -> tuple[InferenceResult | None, str | None]:
        """The result of one submission, or (None, why) if none came in time."""
        request_id = f"{self.job_id}.{chunk.index}.{attempt}"
        request = self.client.request(self.model, chunk.inputs, priority=self.priority,
                                      request_id=request_id)
        future = await self.client.submit(
            request, on_sending=_told(self.on_sending, chunk, request_id),
            on_delivered=_told(self.on_delivered, chunk, request_id))
        try:
            return await asyncio.wait_for(future, self.timeout_s), None
        except TimeoutError:
            self.client.forget(request_id)
            return None, f"no result within {self.timeout_s:.0f} s"


def _told(callback: Callable | None, *about) -> Callable | None:
    """``callback`` with ``about`` before what the client passes it; None stays None."""
    return None if callback is None else partial(callback, *about)


def _outcome(chunk: Chunk, result: InferenceResult | None, why: str | None,
             attempts: int) -> Outcome:
    if result is None:
        return Outcome(chunk, "failed", "CLIENT_TIMEOUT", why, None, attempts)
    error = result.error
    return Outcome(chunk, result.status.value, error and error.code, error and error.message,
                   result, attempts)


async def _aiter(items: Iterable | AsyncIterable) -> AsyncIterator:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


def rows_in_chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterable[Chunk]:
    """Rows (input name -> one row's value: a string, or a vector) as chunks of ``size``
    rows; each chunk's ``carry`` is its rows' positions."""
    held: list[dict[str, Any]] = []
    index = first = 0
    for row in rows:
        held.append(row)
        if len(held) == size:
            yield _chunk(index, first, held)
            index, first, held = index + 1, first + size, []
    if held:
        yield _chunk(index, first, held)


def _chunk(index: int, first: int, rows: list[dict[str, Any]]) -> Chunk:
    inputs = []
    for name in rows[0]:
        values = [row[name] for row in rows]
        inputs.append(Tensor.text(name, values) if isinstance(values[0], str)
                      else Tensor.from_array(name, np.asarray(values, dtype=np.float32)))
    return Chunk(index, first, len(rows), inputs, list(range(first, first + len(rows))))


def back_pressure_ms(outcome: Outcome, backoff_ms: int) -> int | None:
    """How long to wait before sending a chunk that met back-pressure again (its
    ``retry_after_ms``, else ``backoff_ms``); None: its outcome is not back-pressure."""
    error = outcome.result.error if outcome.result is not None else None
    retry_after = error.retry_after_ms if error is not None else None
    if outcome.code in BACK_PRESSURE or (outcome.code == NO_WORKER and retry_after is not None):
        return retry_after or backoff_ms
    return None
