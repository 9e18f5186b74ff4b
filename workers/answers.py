"""Every record of one class of a batch, answered: decoded, checked (workers/checks.py),
run per model version, and turned into outputs (a result and an audit record each; a dead
letter for poison and for work items that fail a check). Nothing a record holds can
raise out of here: whatever goes wrong ends that record, not the worker.

A defect ends only the requests it touched. Each record is decoded, checked and
answered on its own; a version's run that raises is run again one request at a time
(as a chunk whose inference fails is: workers/batching.py), so only the request that
raises alone ends ``INTERNAL``, on its own reply topic, and its batch-mates are served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from kip.runtime import metrics, tracing
from kip.schemas.codec import decode, now_ms
from kip.schemas.errors import DeadlineExceeded, Internal, InvalidRequest, KipError
from kip.schemas.messages import WorkItem
from kip.schemas.stamps import StampKeys, check_stamp
from kip.topics.names import TopicNames
from kip.transport.outputs import Document, Output
from kip.workers.batching import ChunkRun, Stages, group_by, run_group
from kip.workers.checks import check_addressed, check_inputs
from kip.workers.endings import (Stamps, poisoned, refused_copy, served, terminal_outputs,
                                 undecodable_item)
from kip.workers import spans
from kip.workers.cancels import Cancels, cancelled_error
from kip.workers.single_use import Answered
from kip.workers.pace import Pace
from kip.workers.session import ModelSession, Prepared
from kip.workers.sessions import Sessions

log = logging.getLogger("kip.worker")
Pair = tuple[ConsumerRecord, WorkItem]
Answers = dict[int, list[Output | Document]]   # id(record) -> its outputs
_EXPIRED = DeadlineExceeded("the deadline passed before inference started")


@dataclass
class Answering:
    """What answering needs: the model served, the stamp keys, the loaded sessions, the
    lane's inference thread, whether one call takes the whole group (interactive) or
    calls are sized by ``pace``, where outputs go, and who is told of the work items
    that passed their checks before their inference runs (``before_inference``), and the
    lane's thread that prepares the next chunk while one runs (``preparer``; None: none)."""

    model: str
    keys: StampKeys
    sessions: Sessions
    executor: Executor
    pace: Pace
    whole_group: bool
    chunk_bounds: tuple[int, int]   # fewest and most requests per call
    names: TopicNames
    before_inference: Callable[[list[Pair]], None] | None = None
    preparer: Executor | None = None
    answered: Answered | None = None   # single use (workers/single_use.py); None: none
    span: object | None = None   # the batch's span (workers/spans.py); None: tracing off
    group: str = ""   # the lane's consumer group, for the spans
    cancels: Cancels | None = None   # what was cancelled (workers/cancels.py); None: none

    def chunk(self, version: str, rows: list[int]) -> int:
        """Requests per inference call for requests of ``version`` with ``rows`` rows."""
        if self.whole_group:
            return max(1, len(rows))
        fewest, most = self.chunk_bounds
        mean = sum(rows) / max(1, len(rows))
        return min(most, max(fewest, self.pace.requests_within(version, mean, most)))


async def answer(records: list[ConsumerRecord], pulled_ms: float, how: Answering) -> Answers:
    """Every record's outputs: inference, or a terminal error (or, for a copy of an item
    answered already, its refusal)."""
    if how.answered is not None:
        await how.answered.ready({TopicPartition(r.topic, r.partition) for r in records})
    answers: Answers = {}
    pairs: list[Pair] = []
    for record in records:
        try:
            pairs.append((record, _trusted(record, pulled_ms, how)))
        except _Refused as refused:
            answers[id(record)] = refused.outputs
    if how.span is not None:
        spans.waits(pairs, pulled_ms, how.group)
    _before_inference(pairs, how)
    for version, group in group_by(pairs, lambda p: p[1].route.model_version).items():
        await _answer_isolated(version, group, pulled_ms, how, answers)
    return answers


def _before_inference(pairs: list[Pair], how: Answering) -> None:
    """Tell ``how.before_inference`` (a lane beginning its transactions early): an
    optimisation, so a defect in it costs the head start, never an answer."""
    if how.before_inference is None:
        return
    try:
        how.before_inference(pairs)
    except Exception:
        log.exception("beginning transactions before inference raised")


async def _answer_isolated(version: str, group: list[Pair], pulled_ms: float,
                           how: Answering, answers: Answers) -> None:
    """``group`` answered into ``answers``; where that raises, the requests it left
    unanswered again one at a time, and one that raises alone ends ``INTERNAL`` on its
    own reply topic (a defect ends the request that causes it, not its batch-mates)."""
    try:
        await _answer_version(version, group, pulled_ms, how, answers)
        return
    except Exception as exc:
        log.exception("answering %d requests of %s@%s raised", len(group), how.model, version)
        error = exc
    left = [p for p in group if id(p[0]) not in answers]
    if len(left) > 1 and len(group) > 1:
        for pair in left:
            await _answer_isolated(version, [pair], pulled_ms, how, answers)
        return
    for record, item in left:
        answers[id(record)] = _defect(record, item, pulled_ms, how, error)


def _defect(record: ConsumerRecord, item: WorkItem, pulled_ms: float, how: Answering,
            exc: Exception) -> list[Output]:
    """A trusted work item a defect stopped: a failed ``INTERNAL`` result on its own
    reply topic, the final audit record and a dead letter."""
    err = Internal(f"worker defect: {exc!r}"[:300])
    log.error("request %s ends INTERNAL after a defect: %r (trace_id %s)",
              item.request.request_id, exc, tracing.trace_id(item.request.traceparent))
    try:
        return poisoned(record, item, Stamps(pulled_ms), how.names, err)
    except Exception:   # its own fields would not build: the coordinates' ending
        log.exception("ending a work item after a defect raised")
        return undecodable_item(record, err, how.names)


class _Refused(Exception):
    def __init__(self, outputs: list[Output]) -> None:
        self.outputs = outputs


def _trusted(record: ConsumerRecord, pulled_ms: float, how: Answering) -> WorkItem:
    """The record's work item, if it decodes, carries a valid stamp, is addressed to this
    worker and is not a copy; else raise ``_Refused`` with its ending (one without a
    valid stamp ends under its coordinates: it answers nothing a client sent)."""
    try:
        item = decode(WorkItem, record.value or b"")
    except InvalidRequest as err:
        raise _Refused(undecodable_item(record, err, how.names)) from None
    except Exception as exc:   # a defect: still one ending, and the worker goes on
        log.exception("decoding a work item raised")
        raise _Refused(undecodable_item(record, InvalidRequest(f"undecodable: {exc!r}"[:200]),
                                   how.names)) from None
    try:
        refused = _refused(record, item, pulled_ms, how)
    except Exception as exc:   # a defect in a check: the item is not trusted
        log.exception("checking a work item raised")
        refused = undecodable_item(record, Internal(f"worker defect: {exc!r}"[:300]), how.names)
    if refused is not None:
        raise _Refused(refused)
    return item


def _refused(record: ConsumerRecord, item: WorkItem, pulled_ms: float, how: Answering
             ) -> list[Output] | None:
    """The ending of a decoded item that must not run, or None: no valid stamp (no
    one's), another model's or replying outside the results namespace (failed), a copy
    of one answered already (workers/single_use.py), or cancelled by its tenant."""
    try:
        check_stamp(item, how.keys)
    except KipError as err:
        metrics.WORK_REFUSED.labels(how.model, err.code).inc()
        return undecodable_item(record, err, how.names)
    try:
        check_addressed(item, how.model, how.names)
    except KipError as err:
        metrics.WORK_REFUSED.labels(how.model, err.code).inc()
        return poisoned(record, item, Stamps(pulled_ms), how.names, err)
    copy = how.answered.refusal(record, item) if how.answered is not None else None
    if copy is not None:
        metrics.WORK_REFUSED.labels(how.model, copy.code).inc()
        return refused_copy(record, item, how.names, copy)
    notice = how.cancels.notice_for(item) if how.cancels is not None else None
    if notice is not None:   # after the copy check: one answered already keeps its result
        return terminal_outputs(item, Stamps(pulled_ms), how.names,
                                error=cancelled_error(notice))
    return None


async def _answer_version(version: str, group: list[Pair], pulled_ms: float,
                          how: Answering, answers: Answers) -> None:
    try:
        session = await how.sessions.get(how.model, version)
    except Exception as exc:   # a version that cannot load ends its requests, not the worker
        err = exc if isinstance(exc, KipError) else Internal(f"loading {version}: {exc!r}")
        answers |= {id(r): terminal_outputs(i, Stamps(pulled_ms), how.names, error=err)
                    for r, i in group}
        return
    runnable: list[Pair] = []
    rows: dict[int, int] = {}   # id(item) -> its rows, as the manifest's check read them
    for record, item in group:
        try:
            rows[id(item)] = check_inputs(item, session.manifest, session.artifact_sha256)
            runnable.append((record, item))
        except Exception as err:   # a check that raised anything else is a kip defect
            metrics.WORK_REFUSED.labels(how.model, getattr(err, "code", "INTERNAL")).inc()
            answers[id(record)] = poisoned(record, item, Stamps(pulled_ms), how.names, err)
    runs = await run_group(how.executor, _stages(session, how.preparer), runnable,
                           how.chunk(version, [rows[id(i)] for _, i in runnable]), _deadline)
    for run in runs:
        live_rows = sum(rows[id(i)] for _, i in run.live)
        answers |= _outputs_of(run, session, pulled_ms, how.names, live_rows)
        if how.span is not None and run.live:
            spans.inference(how.span, how.model, version, run.started_ms, run.finished_ms,
                            len(run.live), live_rows)
        if run.live and run.error is None:
            how.pace.observe(version, live_rows, run.finished_ms - run.started_ms)


def _outputs_of(run: ChunkRun[Pair], session: ModelSession, pulled_ms: float,
                names: TopicNames, live_rows: int) -> Answers:
    """Outputs of one chunk: expired, served, or (a lone request that failed) poisoned."""
    answers = {id(r): terminal_outputs(i, Stamps(pulled_ms), names, error=_EXPIRED)
               for r, i in run.expired}
    if not run.live:
        return answers
    stamps = Stamps(pulled_ms, run.started_ms, run.finished_ms, live_rows)
    model = session.manifest.name
    if run.error is not None:
        (record, item), = run.live
        if not isinstance(run.error, KipError):   # a defect: still one terminal result
            log.error("inference on %s raised %r for request %s (trace_id %s)", model,
                      run.error, item.request.request_id,
                      tracing.trace_id(item.request.traceparent))
        answers[id(record)] = poisoned(record, item, stamps, names, run.error)
        return answers
    if len(run.outputs) != len(run.live):   # each request's outputs, or none is served
        raise RuntimeError(f"{len(run.outputs)} outputs for {len(run.live)} requests")
    metrics.BATCH_SIZE.labels(model).observe(stamps.batch_size)
    metrics.LATENCY.labels("inference", "", model).observe(
        (stamps.finished_ms - stamps.started_ms) / 1000)
    now = now_ms()
    for (record, item), out in zip(run.live, run.outputs):
        try:
            answers[id(record)] = served(item, stamps, names, out, now)
        except Exception as exc:   # its result would not build: it alone fails
            log.exception("building the result of request %s raised (trace_id %s)",
                          item.request.request_id, tracing.trace_id(item.request.traceparent))
            answers[id(record)] = poisoned(record, item, stamps, names,
                                           Internal(f"worker defect: {exc!r}"[:300]))
    return answers


def _stages(session: ModelSession, preparer: Executor | None) -> Stages[Pair]:
    """The session's two steps on work items, the next chunk prepared ahead where the
    session asks for it (``ModelSession.prepare_ahead``)."""
    return Stages(partial(_prepare, session), session.execute_documents,
                  preparer if session.prepare_ahead else None)


def _prepare(session: ModelSession, pairs: list[Pair]) -> Prepared:
    return session.prepare([item.request.inputs for _, item in pairs])


def _deadline(pair: Pair) -> int:
    return pair[1].deadline_ms
