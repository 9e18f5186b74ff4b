"""Batch files without Kafka: reading in fixed chunks from every format, inputs from
columns, typed outputs, the job folder's parts and journal."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kip.batch.job import JobDir
from kip.batch.runner import chunks, input_columns
from kip.batch.tables import InputMap, TableWriter, output_table
from kip.schemas.tensors import Tensor


def _write(path, table: pa.Table) -> None:
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    elif path.suffix == ".csv":
        import pyarrow.csv as pa_csv
        pa_csv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_every_format_reads_in_the_same_chunks_with_ids_and_order(tmp_path, suffix):
    path = tmp_path / f"in{suffix}"
    _write(path, pa.table({"id": [f"r{i}" for i in range(10)],
                           "sentence": [f"text {i}" for i in range(10)]}))
    columns = input_columns(path, InputMap.parse(["text=sentence"]))
    got = list(chunks(path, columns, "id", 4))
    assert [(c.index, c.first_row, c.rows) for c in got] == [(0, 0, 4), (1, 4, 4), (2, 8, 2)]
    assert got[1].inputs[0].data == ["text 4", "text 5", "text 6", "text 7"]
    assert got[2].carry.to_pylist() == ["r8", "r9"]
    assert [c.index for c in chunks(path, columns, "id", 4, skip=2)] == [2]


def test_numeric_columns_by_pattern_become_one_float32_input(tmp_path):
    path = tmp_path / "digits.csv"
    _write(path, pa.table({f"p{i}": [float(i), float(i + 1)] for i in range(64)}))
    columns = input_columns(path, InputMap.parse(["pixels=p*"]))
    assert len(columns["pixels"]) == 64
    (chunk,) = chunks(path, columns, None, 8)
    assert chunk.inputs[0].array.shape == (2, 64) and chunk.inputs[0].array.dtype == np.float32


def test_a_missing_column_is_named(tmp_path):
    path = tmp_path / "in.parquet"
    _write(path, pa.table({"sentence": ["a"]}))
    with pytest.raises(ValueError, match="no column matches"):
        input_columns(path, InputMap.parse(["text"]))


def test_unreadable_rows_fail_their_chunk_only(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "ok"}\n{"text": null}\n{"text": "fine"}\n')
    got = list(chunks(path, {"text": ["text"]}, None, 2))
    assert got[0].inputs is None and "rows 0-1" in got[0].problem
    assert got[1].inputs[0].data == ["fine"]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_outputs_are_typed_columns(tmp_path, suffix):
    embedding = np.arange(6, dtype=np.float32).reshape(2, 3)
    table = output_table(np.array([5, 6]), pa.array(["a", "b"]), "id",
                         [Tensor.of_output("embedding", embedding),
                          Tensor.of_output("label", np.array([1, 2], np.int64))])
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 3)
    writer = TableWriter(tmp_path / f"out{suffix}")
    writer.write(table)
    writer.write(table)
    writer.close()
    if suffix == ".parquet":
        assert pq.read_table(tmp_path / "out.parquet").num_rows == 4
    elif suffix == ".jsonl":
        first = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
        assert first == {"row": 5, "id": "a", "embedding": [0.0, 1.0, 2.0], "label": 1}
    else:
        lines = (tmp_path / "out.csv").read_text().splitlines()
        assert lines[0] == '"row","id","embedding","label"' and len(lines) == 5


def test_parts_cover_chunks_from_the_first_and_a_torn_journal_line_is_skipped(tmp_path):
    job = JobDir(tmp_path / "out.parquet")
    job.parts.mkdir(parents=True)
    job.write_part(0, 3, pa.table({"row": [0, 1, 2]}), [])
    job.write_part(5, 6, None, [{"row": 9}])            # a gap: not counted
    assert job.done_chunks() == 3
    job.sending(3, "j.3.0", "ab" * 32)
    job.close()
    with open(job.journal_file, "ab") as f:
        f.write(b'{"chunk": 4, "id"')                     # killed mid-line
    assert list(job.sent_since(3)) == [3]


def test_the_journal_holds_each_request_before_it_is_sent_and_when_kafka_has_it(tmp_path):
    job = JobDir(tmp_path / "out.parquet")
    job.root.mkdir(parents=True)
    job.sending(2, "j.2.0", "aa" * 32)
    job.sending(3, "j.3.0", "bb" * 32)
    job.delivered(2, "j.2.0")
    job.sending(2, "j.2.1", "cc" * 32)                   # killed before Kafka had it
    job.close()
    sent = job.sent_since(2)
    assert [(e["id"], e["sha256"], e["delivered"]) for e in sent[2]] == [
        ("j.2.0", "aa" * 32, True), ("j.2.1", "cc" * 32, False)]
    assert [(e["id"], e["delivered"]) for e in sent[3]] == [("j.3.0", False)]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_an_output_with_no_rows_is_still_made(tmp_path, suffix):
    TableWriter(tmp_path / f"out{suffix}").close()
    assert (tmp_path / f"out{suffix}").exists()
