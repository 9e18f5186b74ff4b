"""``kip batch run`` on the running stack: a Parquet file of sentences in, embeddings out
in input order and equal to raw ONNX Runtime's; a job killed half way and resumed holds
each row once; the Python API in input order."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kip.devkit.loadgen import sentences
from kip.batch import BatchRun, rows_in_chunks
from kip.schemas.tensors import Tensor
from kip.schemas import AuditRecord, decode
from tests.e2e.conftest import SECRETS, client_for, read_topic
from kip.workers.session import ModelSession

pytestmark = pytest.mark.broker


def _write_input(path, texts):
    pq.write_table(pa.table({"id": [f"s{i}" for i in range(len(texts))],
                             "sentence": texts}), path)


def _batch(stack, *args, **popen) -> subprocess.Popen:
    env = stack.env() | {"KIP_API_SECRET": SECRETS["acme-k1"]}
    return subprocess.Popen(
        [sys.executable, "-m", "kip.cli", "batch", "run", "--model", "minilm",
         "--column", "text=sentence", "--id-column", "id", "--tenant", "acme",
         "--key-id", "acme-k1", *map(str, args)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, **popen)


def _raw_embeddings(stack, texts):
    session = ModelSession(stack.registry.load_alias("minilm"), device="cpu")
    out = [session.run([[Tensor.text("text", texts[i:i + 32])]])[0][0].array
           for i in range(0, len(texts), 32)]
    return np.concatenate(out)


@pytest.mark.timeout(300)
def test_a_parquet_file_of_sentences_comes_back_embedded_in_order(plain_stack, tmp_path):
    texts = sentences(300, seed=7)
    _write_input(tmp_path / "in.parquet", texts)
    done = _batch(plain_stack, "--input", tmp_path / "in.parquet",
                  "--out", tmp_path / "out.parquet", "--rows-per-request", 16)
    out, err = done.communicate(timeout=240)
    assert done.returncode == 0, err
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("row").to_pylist() == list(range(300))
    assert table.column("id").to_pylist() == [f"s{i}" for i in range(300)]
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    got = np.asarray(table.column("embedding").to_pylist(), np.float32)
    want = _raw_embeddings(plain_stack, texts)
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.9999
    again = _batch(plain_stack, "--input", tmp_path / "in.parquet",
                   "--out", tmp_path / "out.parquet", "--rows-per-request", 16)
    assert again.communicate(timeout=120)[0].count("already finished") == 1


@pytest.mark.timeout(300)
def test_a_job_killed_half_way_resumes_with_each_row_once(plain_stack, tmp_path):
    rows = 6000
    _write_input(tmp_path / "in.parquet", sentences(rows, seed=8))
    args = ("--input", tmp_path / "in.parquet", "--out", tmp_path / "out.parquet",
            "--rows-per-request", 8, "--in-flight", 8, "--job-id", "resumed")
    first = _batch(plain_stack, *args)
    parts = tmp_path / "out.parquet.job" / "parts"
    deadline = time.monotonic() + 180
    while len(list(parts.glob("part-*.parquet"))) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    resumed = _batch(plain_stack, *args, "--resume")
    out, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("row").to_pylist() == list(range(rows))
    assert "resumed" in out
    audit = [decode(AuditRecord, r.value) for r in asyncio.run(read_topic(
        plain_stack.connection("audit-reader"), plain_stack.names.audit))]
    inferred = [a for a in audit if a.request_id.startswith("resumed.")
                and a.stage == "worker" and a.final]
    assert rows / 8 <= len(inferred) <= 1.05 * rows / 8   # chunks inferred over both runs



def test_the_python_api_yields_outcomes_in_input_order(plain_stack):
    texts = sentences(40, seed=9)

    async def go():
        async with client_for(plain_stack) as kip:
            run = BatchRun(kip, "minilm", job_id="api-test", in_flight=4)
            return [o async for o in run.outcomes(
                rows_in_chunks(({"text": t} for t in texts), 6))]
    outcomes = asyncio.run(go())
    assert [o.chunk.index for o in outcomes] == list(range(7))
    assert all(o.ok for o in outcomes) and sum(o.chunk.rows for o in outcomes) == 40
    assert outcomes[-1].chunk.carry == [36, 37, 38, 39]
