"""Every record of one class of a batch, answered: decoded, run per model version, and
turned into outputs (a result and an audit record each; a dead letter for poison)."""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial

from aiokafka.structs import ConsumerRecord

from runtime import metrics
from schemas.codec import decode
from schemas.errors import DeadlineExceeded, InvalidRequest, KipError
from schemas.messages import WorkItem
from topics.names import TopicNames
from topics.outputs import Output
from workers.batching import ChunkRun, group_by, run_group
from workers.outcome import Stamps, poisoned, terminal_outputs, undecodable
from workers.session import ModelSession, Sessions

log = logging.getLogger("kip.worker")
Pair = tuple[ConsumerRecord, WorkItem]
Answers = dict[int, list[Output]]   # id(record) -> its outputs
_EXPIRED = DeadlineExceeded("the deadline passed before inference started")


@dataclass
class Answering:
    """What answering needs: the loaded sessions, the lane's inference thread, the rows
    per inference call, and where outputs go."""

    sessions: Sessions
    executor: Executor
    chunk: int
    names: TopicNames


async def answer(records: list[ConsumerRecord], pulled_ms: float, how: Answering) -> Answers:
    """Every record's outputs: inference, or a terminal error."""
    answers: Answers = {}
    pairs: list[Pair] = []
    for record in records:
        try:
            pairs.append((record, decode(WorkItem, record.value)))
        except InvalidRequest as err:
            answers[id(record)] = undecodable(record, err, how.names)
    versions = group_by(pairs, lambda p: (p[1].route.model_name, p[1].route.model_version))
    for (name, version), group in versions.items():
        answers |= await _answer_version(name, version, group, pulled_ms, how)
    return answers


async def _answer_version(name: str, version: str, group: list[Pair], pulled_ms: float,
                          how: Answering) -> Answers:
    try:
        session = await how.sessions.get(name, version, how.executor)
    except KipError as err:
        return {id(r): terminal_outputs(i, Stamps(pulled_ms), how.names, error=err)
                for r, i in group}
    runs = await run_group(how.executor, partial(_run_session, session), group, how.chunk,
                           _deadline)
    answers: Answers = {}
    for run in runs:
        answers |= _outputs_of(run, session, pulled_ms, how.names)
    return answers


def _outputs_of(run: ChunkRun[Pair], session: ModelSession, pulled_ms: float,
                names: TopicNames) -> Answers:
    """Outputs of one chunk: expired, served, or (a lone request that failed) poisoned."""
    answers = {id(r): terminal_outputs(i, Stamps(pulled_ms), names, error=_EXPIRED)
               for r, i in run.expired}
    if not run.live:
        return answers
    stamps = Stamps(pulled_ms, run.started_ms, run.finished_ms,
                    sum(i.request.inputs[0].shape[0] for _, i in run.live))
    model = session.manifest.name
    if run.error is not None:
        (record, item), = run.live
        if not isinstance(run.error, KipError):   # a defect: still one terminal result
            log.error("inference on %s raised %r", model, run.error)
        answers[id(record)] = poisoned(record, item, stamps, names, run.error)
        return answers
    metrics.BATCH_SIZE.labels(model).observe(stamps.batch_size)
    metrics.LATENCY.labels("inference", "", model).observe(
        (stamps.finished_ms - stamps.started_ms) / 1000)
    for (record, item), out in zip(run.live, run.outputs):
        answers[id(record)] = terminal_outputs(item, stamps, names, outputs=out)
    return answers


def _run_session(session: ModelSession, pairs: list[Pair]) -> list:
    return session.run([item.request.inputs for _, item in pairs])


def _deadline(pair: Pair) -> int:
    return pair[1].deadline_ms
