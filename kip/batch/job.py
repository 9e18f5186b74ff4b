"""A batch job's state on disk, so that a run killed at any point can be resumed.

Beside the output ``OUT`` lives ``OUT.job/``:

- ``job.json``: what the job is (id, model, input, columns, rows per request) and
  whether it finished;
- ``submitted.jsonl``: every request, flushed as it goes: a line before it is sent
  (chunk, request id, the sha256 of the message, when), and a line once Kafka has it;
- ``parts/part-<first>-<end>.parquet``: the ok rows of chunks ``first`` to ``end`` - 1,
  written to a temporary name and renamed, so a part is whole or absent; failed rows of
  those chunks in ``part-<first>-<end>.errors.jsonl``, written just before.

Resuming: the parts cover chunks 0 to some ``done``; the chunks after it that were sent
may have been answered while nobody listened, so their results are read back from the
reply topic (``KipClient.results_since``) and kept; what has no ok result runs again,
with attempt numbers after those already used (the pipeline refuses a request id it has
seen). Every id is journaled before its request goes, so none is used twice: a run
killed between the broker's ack and a journal line written after it would leave an id
that a resumed run sends again, and the pipeline answers that copy as a duplicate, with
no digest its client could accept. At the end the parts become ``OUT`` and the errors
file, in input order.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from kip.batch.tables import TableWriter
from kip.schemas.codec import now_ms

PART = re.compile(r"^part-(\d{9})-(\d{9})\.parquet$")


@dataclass
class JobSpec:
    job_id: str
    model: str
    input: str
    inputs: dict[str, list[str]]
    id_column: str | None
    rows_per_request: int
    priority: str
    started_ms: int
    finished: bool = False

    def same_job(self, other: JobSpec) -> str | None:
        """What differs from ``other`` in what the job computes, if anything."""
        for name in ("model", "input", "inputs", "id_column", "rows_per_request"):
            if getattr(self, name) != getattr(other, name):
                return f"{name}: {getattr(self, name)!r} then, {getattr(other, name)!r} now"
        return None


class JobDir:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.root = out.with_name(out.name + ".job")
        self.parts = self.root / "parts"
        self.spec_file = self.root / "job.json"
        self.journal_file = self.root / "submitted.jsonl"
        self._journal = None

    def exists(self) -> bool:
        return self.spec_file.exists()

    def create(self, spec: JobSpec) -> None:
        self.parts.mkdir(parents=True, exist_ok=True)
        self.save(spec)

    def load(self) -> JobSpec:
        return JobSpec(**orjson.loads(self.spec_file.read_bytes()))

    def save(self, spec: JobSpec) -> None:
        _replace(self.spec_file, orjson.dumps(asdict(spec), option=orjson.OPT_INDENT_2))

    def done_chunks(self) -> int:
        """How many chunks, from the first, the parts cover."""
        done = 0
        for first, end in sorted(self._part_ranges()):
            if first != done:
                break
            done = end
        return done

    def _part_ranges(self) -> list[tuple[int, int]]:
        found = (PART.match(p.name) for p in self.parts.iterdir())
        return [(int(m.group(1)), int(m.group(2))) for m in found if m]

    def write_part(self, first: int, end: int, ok: pa.Table | None, errors: list[dict]
                   ) -> None:
        name = f"part-{first:09d}-{end:09d}"
        _replace(self.parts / f"{name}.errors.jsonl",
                 b"".join(orjson.dumps(e) + b"\n" for e in errors))
        tmp = self.parts / f".{name}.parquet.tmp"
        pq.write_table(ok if ok is not None else pa.table({"row": pa.array([], pa.int64())}),
                       tmp)
        os.replace(tmp, self.parts / f"{name}.parquet")

    def sending(self, chunk: int, request_id: str, sha256: str) -> None:
        """Journal a request about to be sent."""
        self._journal_line({"chunk": chunk, "id": request_id, "sha256": sha256,
                            "at_ms": now_ms()})

    def delivered(self, chunk: int, request_id: str) -> None:
        """Journal that Kafka has a request journaled as sending."""
        self._journal_line({"chunk": chunk, "id": request_id, "delivered": True})

    def _journal_line(self, entry: dict) -> None:
        if self._journal is None:
            self._journal = open(self.journal_file, "ab")
        self._journal.write(orjson.dumps(entry) + b"\n")
        self._journal.flush()

    def sent_since(self, first_chunk: int) -> dict[int, list[dict]]:
        """The requests journaled for chunks from ``first_chunk`` on, in the order they
        were sent, each ``{"id", "sha256", "at_ms", "delivered"}`` (a torn last line,
        from a kill mid-write, is skipped)."""
        sent: dict[int, dict[str, dict]] = defaultdict(dict)
        if not self.journal_file.exists():
            return {}
        for line in self.journal_file.read_bytes().splitlines():
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if entry["chunk"] < first_chunk:
                continue
            requests = sent[entry["chunk"]]
            if entry.get("delivered"):
                if entry["id"] in requests:
                    requests[entry["id"]]["delivered"] = True
            else:
                requests[entry["id"]] = {**entry, "delivered": False}
        return {chunk: list(requests.values()) for chunk, requests in sent.items()}

    def combine(self, errors_file: Path) -> tuple[int, int]:
        """The parts, in order, as ``out`` and ``errors_file``; (ok rows, failed rows)."""
        writer, ok, failed = TableWriter(self.out), 0, 0
        with open(errors_file, "wb") as errors:
            for first, end in sorted(self._part_ranges()):
                name = f"part-{first:09d}-{end:09d}"
                table = pq.read_table(self.parts / f"{name}.parquet")
                if table.num_rows:
                    writer.write(table)
                    ok += table.num_rows
                part_errors = (self.parts / f"{name}.errors.jsonl").read_bytes()
                errors.write(part_errors)
                failed += part_errors.count(b"\n")
        writer.close()
        return ok, failed

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
