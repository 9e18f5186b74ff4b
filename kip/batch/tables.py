"""Files in and out of a batch job, through pyarrow, a record batch at a time: memory stays
bounded whatever the file's size.

In: Parquet, CSV or JSON Lines (by extension). ``InputMap`` names, for each model input,
the column(s) it is read from: one string column is a text input; one list column, or
several numeric columns, a float32 input of one row per line. Each line keeps its input
order (``row``) and, if asked, an id column.

Out: one table per chunk with ``row``, the id column, and a typed column per model
output: a vector (an embedding) as a fixed-size list of float32, a scalar as its own
type. Parquet and JSON Lines keep the types; CSV writes a vector as a JSON list.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from kip.schemas.tensors import Tensor

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl",
           ".ndjson": "jsonl"}
READ_BLOCK_BYTES = 1 << 20


def file_format(path: Path) -> str:
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise ValueError(f"{path}: use a .parquet, .csv or .jsonl file")
    return found


@dataclass(frozen=True)
class InputMap:
    """Model input name -> the column patterns it is read from (``fnmatch``, in order)."""

    columns: dict[str, tuple[str, ...]]

    @classmethod
    def parse(cls, specs: list[str]) -> InputMap:
        """``["text=sentence", "pixels=p*"]``; a bare ``text`` reads column ``text``."""
        columns = {}
        for spec in specs:
            name, _, cols = spec.partition("=")
            columns[name] = tuple(c for c in (cols or name).split(",") if c)
        return cls(columns)

    def resolve(self, schema: pa.Schema) -> dict[str, list[str]]:
        """The columns each input reads, in the file's order; an error names what is
        missing."""
        resolved = {}
        for name, patterns in self.columns.items():
            found = [c for p in patterns for c in schema.names if fnmatch.fnmatchcase(c, p)]
            if not found:
                raise ValueError(f"input '{name}': no column matches {list(patterns)}; "
                                 f"the file has {schema.names[:20]}")
            resolved[name] = found
        return resolved


def read_batches(path: Path, block_rows: int) -> Iterator[pa.RecordBatch]:
    """The file's record batches, at most ``block_rows`` rows each (CSV and JSON Lines
    in blocks of ~1 MiB, sliced)."""
    fmt = file_format(path)
    if fmt == "parquet":
        yield from pq.ParquetFile(path).iter_batches(batch_size=block_rows)
        return
    if fmt == "csv":
        reader = pa_csv.open_csv(path, read_options=pa_csv.ReadOptions(
            block_size=READ_BLOCK_BYTES))
    else:
        reader = pa_json.open_json(path, read_options=pa_json.ReadOptions(
            block_size=READ_BLOCK_BYTES))
    for batch in reader:
        for start in range(0, batch.num_rows, block_rows):
            yield batch.slice(start, block_rows)


def tensors(batch: pa.RecordBatch, columns: dict[str, list[str]]) -> list[Tensor]:
    """The model inputs of ``batch``'s rows."""
    out = []
    for name, cols in columns.items():
        kind = batch.schema.field(cols[0]).type
        if len(cols) == 1 and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            out.append(Tensor.text(name, batch.column(cols[0]).to_pylist()))
        elif len(cols) == 1 and _is_list(kind):
            rows = batch.column(cols[0]).to_pylist()
            out.append(Tensor.from_array(name, np.asarray(rows, dtype=np.float32)))
        else:
            matrix = np.column_stack([batch.column(c).to_numpy(zero_copy_only=False)
                                      for c in cols]).astype(np.float32)
            out.append(Tensor.from_array(name, matrix))
    return out


def output_table(rows: np.ndarray, ids: pa.Array | None, id_name: str | None,
                 outputs: list[Tensor]) -> pa.Table:
    """One chunk's rows as a table: ``row``, the id column, a column per output."""
    arrays, names = [pa.array(rows, pa.int64())], ["row"]
    if ids is not None:
        arrays.append(ids)
        names.append(id_name)
    for tensor in outputs:
        arrays.append(_column(tensor.array))
        names.append(tensor.name)
    return pa.Table.from_arrays(arrays, names=names)


def _column(array: np.ndarray) -> pa.Array:
    if array.ndim == 1:
        return pa.array(array)
    flat = np.ascontiguousarray(array.reshape(array.shape[0], -1))
    values = pa.array(flat.reshape(-1).astype(np.float32, copy=False))
    return pa.FixedSizeListArray.from_arrays(values, flat.shape[1])


class TableWriter:
    """Appends tables to a Parquet, CSV or JSON Lines file (created on the first)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.format = file_format(path)
        self._writer = None
        self._file = None

    def write(self, table: pa.Table) -> None:
        if self.format == "parquet":
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.path, table.schema)
            self._writer.write_table(table)
            return
        if self._file is None:
            self._file = open(self.path, "wb")
        if self.format == "jsonl":
            for record in table.to_pylist():
                self._file.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)
                                 + b"\n")
        else:
            self._write_csv(table)

    def _write_csv(self, table: pa.Table) -> None:
        flat = {name: (col.to_pylist() if not _is_list(col.type) else
                       [orjson.dumps(v).decode() for v in col.to_pylist()])
                for name, col in zip(table.column_names, table.columns)}
        options = pa_csv.WriteOptions(include_header=self._file.tell() == 0)
        pa_csv.write_csv(pa.table(flat), self._file, write_options=options)

    def close(self) -> None:
        """Close the file; one with no rows written is still made (empty; Parquet with
        only the ``row`` column), so a job whose every row failed still has its output."""
        if self._writer is None and self._file is None:
            if self.format == "parquet":
                pq.write_table(pa.table({"row": pa.array([], pa.int64())}), self.path)
            else:
                self.path.write_bytes(b"")
        if self._writer is not None:
            self._writer.close()
        if self._file is not None:
            self._file.close()


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind)
