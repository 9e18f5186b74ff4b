"""``kip batch run``'s engine room: a file through kip into a file, resumable.

Reads the input in record batches, cuts it into chunks of ``rows_per_request`` rows
(the same cut on every run, so chunk ``n`` is always the same rows), sends them with
``BatchRun`` and writes the outcomes a part at a time (kip/batch/job.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kip.batch.engine import BatchRun, Chunk, Outcome
from kip.batch.job import JobDir, JobSpec
from kip.batch.tables import InputMap, output_table, read_batches, tensors
from kip.client import KipClient
from kip.schemas.codec import now_ms
from kip.schemas.messages import InferenceResult

PART_ROWS = 4096


@dataclass
class Progress:
    """What a display shows: rows by outcome, of ``total`` (None: not known)."""

    total: int | None
    done: int = 0
    skipped: int = 0        # rows already in the output (a resumed job)
    collected: int = 0      # rows answered while nobody listened, read back
    counts: dict = field(default_factory=dict)


def chunks(path: Path, columns: dict[str, list[str]], id_column: str | None, size: int,
           skip: int = 0) -> Iterator[Chunk]:
    """The input's rows in chunks of ``size`` (the last may be shorter), from chunk
    ``skip`` on; a chunk whose rows cannot be made into inputs carries the problem."""
    index, first = 0, 0
    for rows in _fixed_size(read_batches(path, size), size):
        if index >= skip:
            carry = rows.column(id_column) if id_column else None
            try:
                yield Chunk(index, first, rows.num_rows, tensors(rows, columns), carry)
            except (ValueError, TypeError, pa.ArrowException) as err:
                yield Chunk(index, first, rows.num_rows, None, carry,
                            f"rows {first}-{first + rows.num_rows - 1}: {err}"[:500])
        index, first = index + 1, first + rows.num_rows


def _fixed_size(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        while count >= size:
            table = pa.Table.from_batches(held)
            yield table.slice(0, size)
            rest = table.slice(size).combine_chunks()
            held, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(held)


def input_columns(path: Path, inputs: InputMap) -> dict[str, list[str]]:
    first = next(read_batches(path, 1), None)
    if first is None:
        raise ValueError(f"{path} holds no rows")
    return inputs.resolve(first.schema)


def total_rows(path: Path) -> int | None:
    if path.suffix.lower() in (".parquet", ".pq"):
        return pq.ParquetFile(path).metadata.num_rows
    return None


class PartWriter:
    """Outcomes into parts of about ``PART_ROWS`` rows."""

    def __init__(self, job: JobDir, spec: JobSpec, first_chunk: int) -> None:
        self.job, self.spec = job, spec
        self.first = self.end = first_chunk
        self.tables: list[pa.Table] = []
        self.errors: list[dict] = []
        self.rows = 0

    def add(self, outcome: Outcome) -> None:
        chunk = outcome.chunk
        rows = np.arange(chunk.first_row, chunk.first_row + chunk.rows)
        if outcome.ok:
            self.tables.append(output_table(rows, chunk.carry, self.spec.id_column,
                                            outcome.result.outputs))
        else:
            ids = chunk.carry.to_pylist() if chunk.carry is not None else [None] * chunk.rows
            self.errors += [{"row": int(r), "id": i, "chunk": chunk.index,
                             "status": outcome.status, "code": outcome.code,
                             "message": outcome.message} for r, i in zip(rows, ids)]
        self.end, self.rows = chunk.index + 1, self.rows + chunk.rows
        if self.rows >= PART_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.end == self.first:
            return
        ok = pa.concat_tables(self.tables) if self.tables else None
        self.job.write_part(self.first, self.end, ok, self.errors)
        self.first, self.tables, self.errors, self.rows = self.end, [], [], 0


async def run_job(client: KipClient, job: JobDir, spec: JobSpec, columns: dict,
                  progress: Progress, show: Callable[[Progress], None], in_flight: int,
                  retries: int) -> None:
    """Every chunk not yet in a part: read back, or sent; then written as parts."""
    done = job.done_chunks()
    progress.skipped = progress.done = done * spec.rows_per_request
    earlier, awaiting, attempts = await _read_back(client, job, done)
    run = BatchRun(client, spec.model, spec.job_id, spec.priority, in_flight, retries,
                   earlier=earlier, first_attempt=attempts, awaiting=awaiting,
                   on_sending=lambda c, rid, sha: job.sending(c.index, rid, sha),
                   on_delivered=lambda c, rid: job.delivered(c.index, rid))
    writer = PartWriter(job, spec, done)
    path = Path(spec.input)
    async for outcome in run.outcomes(chunks(path, columns, spec.id_column,
                                             spec.rows_per_request, skip=done)):
        writer.add(outcome)
        progress.done += outcome.chunk.rows
        progress.collected += outcome.chunk.rows if outcome.attempts == 0 and outcome.ok \
            else 0
        progress.counts = dict(run.counts)
        show(progress)
    writer.flush()


async def _read_back(client: KipClient, job: JobDir, done: int
                     ) -> tuple[dict, dict[int, tuple[str, str]], dict[int, int]]:
    """For the chunks an earlier run sent that no part holds: ``resume_plan`` of them,
    with the results already on the reply topic."""
    sent = job.sent_since(done)
    if not sent:
        return {}, {}, {}
    digests = {e["id"]: e["sha256"] for entries in sent.values() for e in entries}
    since = min(e["at_ms"] for entries in sent.values() for e in entries) - 1000
    return resume_plan(sent, await client.results_since(digests, since))


def resume_plan(sent: dict[int, list[dict]], found: dict[str, InferenceResult]
                ) -> tuple[dict, dict[int, tuple[str, str]], dict[int, int]]:
    """From the requests journaled per chunk (``JobDir.sent_since``) and the results
    ``found`` of them: the ok result of each chunk that has one; the last request of
    each chunk with no result yet that Kafka took (kip owes it an answer: the run waits
    for it rather than infer the chunk twice; one never delivered is not waited for);
    and the next attempt number of every chunk, after every id already journaled."""
    earlier, awaiting = {}, {}
    for chunk, entries in sent.items():
        for entry in entries:
            result = found.get(entry["id"])
            if result is not None and result.status.value == "ok":
                earlier[chunk] = result
        last = entries[-1]
        if chunk not in earlier and last["id"] not in found and last["delivered"]:
            awaiting[chunk] = (last["id"], last["sha256"])
    return earlier, awaiting, {chunk: len(entries) for chunk, entries in sent.items()}


def new_spec(job_id: str, model: str, path: Path, columns: dict, id_column: str | None,
             rows_per_request: int, priority: str) -> JobSpec:
    return JobSpec(job_id, model, str(path.resolve()), columns, id_column, rows_per_request,
                   priority, now_ms())
