"""``kip bench batch``: ``kip batch run`` against raw ONNX Runtime, in one run.

Starts a kip of its own, writes an input file of ``--rows`` rows (MiniLM: varied
sentences in Parquet; digits: 64 pixel columns in CSV), measures raw ONNX Runtime's
rows/s on the same rows at batch 32 (MiniLM; a sample for digits), then runs
``kip batch run`` as a child process and reports its rows/s, the ratio, and the child's
peak RSS (VmHWM, read from /proc as it runs). With ``--interactive-rate``, interactive
requests run beside the job and their p99 is printed beside their p99 with no job.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from kip.devkit.arguments import count, fraction, zero_or_above
from kip.devkit.loadgen import sentences
from kip.devkit.stack import DevStack, dev_client, dev_spec
from kip.devkit.own_stack import own_stack
from kip.runtime.settings import KipSettings
from kip.schemas.tensors import Tensor
from kip.workers.session import ModelSession

RAW_SAMPLE_ROWS = 20_000
JOB_ID = "bench"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", choices=["minilm", "digits"], default="minilm")
    p.add_argument("--rows", type=count, default=20_000)
    p.add_argument("--rows-per-request", type=count, default=32)
    p.add_argument("--in-flight", type=count, default=64)
    p.add_argument("--interactive-rate", type=zero_or_above, default=0.0,
                   help="interactive MiniLM requests/s beside the job (0: none)")
    p.add_argument("--kill-at", type=fraction, default=0.0, metavar="FRACTION",
                   help="SIGKILL the job once it has sent this fraction of its requests, "
                   "then run it again with --resume; report the inferences the audit "
                   "trail shows per row")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir)


def run(args) -> int:
    report = asyncio.run(measure(args))
    for line in report:
        print(line)
    return 0


async def measure(args) -> list[str]:
    async with own_stack("batch", args.registry, log=_quiet) as stack:
        source = stack.home / ("in.parquet" if args.model == "minilm" else "in.csv")
        print(f"writing {args.rows} rows to {source} ...", file=sys.stderr, flush=True)
        write_input(source, args.model, args.rows)
        raw, embeddings = raw_rows_per_s(stack, args.model, args.rows)
        stack.start_services(log=_quiet)
        async with dev_client(stack) as kip:
            await kip.infer(args.model, _one_row(args.model), timeout_s=120)
            alone = await _interactive(kip, args.interactive_rate, 10.0) if \
                args.interactive_rate else None
        job = await _job(stack, args, source, stack.home / "out.parquet")
        job["min_cosine"] = _min_cosine(stack.home / "out.parquet", embeddings)
        if args.kill_at:
            job["inferences_per_row"] = await inferences_per_row(stack, args.rows,
                                                                 args.rows_per_request)
    return _report(args, raw, job, alone)


def _min_cosine(out: Path, embeddings: np.ndarray | None) -> float | None:
    """The lowest cosine between kip's embedding of a row and raw ONNX Runtime's, over
    the rows raw ran (in input order: the output must be too)."""
    if embeddings is None:
        return None
    table = pq.read_table(out, columns=["row", "embedding"]).slice(0, len(embeddings))
    if table.column("row").to_pylist() != list(range(len(embeddings))):
        raise RuntimeError("the output is not in input order")
    got = np.asarray(table.column("embedding").to_pylist(), np.float32)
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(embeddings, axis=1)
    return float(((got * embeddings).sum(1) / norms).min())


def write_input(path: Path, model: str, rows: int) -> None:
    if model == "minilm":
        pq.write_table(pa.table({"id": [f"s{i}" for i in range(rows)],
                                 "sentence": sentences(rows, seed=3)}), path)
        return
    rng = np.random.default_rng(3)
    with pa_csv.CSVWriter(path, _digits_block(rng, 1).schema) as writer:
        for start in range(0, rows, 50_000):
            writer.write_table(_digits_block(rng, min(50_000, rows - start), start))


def _digits_block(rng, n: int, start: int = 0) -> pa.Table:
    pixels = rng.integers(0, 17, size=(n, 64)).astype(np.float32)
    return pa.table({"id": np.arange(start, start + n)}
                    | {f"p{i}": pixels[:, i] for i in range(64)})


def raw_rows_per_s(stack: DevStack, model: str, rows: int) -> tuple[float, np.ndarray | None]:
    """Raw ONNX Runtime's rows/s (MiniLM at batch 32 on the job's first rows, with their
    embeddings; digits at batch 256 on random pixels)."""
    session = ModelSession(stack.registry.load_alias(model), device="cpu")
    if model == "minilm":
        texts = sentences(rows, seed=3)[:RAW_SAMPLE_ROWS]
        session.run([[Tensor.text("text", texts[:32])]])                  # warm-up
        started, out = time.perf_counter(), []
        for i in range(0, len(texts), 32):
            out.append(session.run([[Tensor.text("text", texts[i:i + 32])]])[0][0].array)
        return len(texts) / (time.perf_counter() - started), np.concatenate(out)
    pixels = np.random.default_rng(3).random((RAW_SAMPLE_ROWS, 64), dtype=np.float32)
    started = time.perf_counter()
    for i in range(0, RAW_SAMPLE_ROWS, 256):
        session.run([[Tensor.from_array("pixels", pixels[i:i + 256])]])
    return RAW_SAMPLE_ROWS / (time.perf_counter() - started), None


async def _job(stack: DevStack, args, source: Path, out: Path) -> dict:
    spec = dev_spec(stack)
    column = "text=sentence" if args.model == "minilm" else "pixels=p*"
    env = stack.env() | {"KIP_API_SECRET": spec.secret}
    command = [sys.executable, "-m", "kip.cli", "batch", "run", "--model", args.model,
               "--input", str(source), "--out", str(out), "--column", column, "--id-column",
               "id", "--rows-per-request", str(args.rows_per_request), "--in-flight",
               str(args.in_flight), "--tenant", spec.tenant, "--key-id", spec.key_id,
               "--job-id", JOB_ID]
    print(f"kip batch run: {args.rows} rows of {args.model} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    if args.kill_at:
        await _kill_at(command, env, out, args.kill_at * args.rows / args.rows_per_request)
        command.append("--resume")
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    peak, beside = 0, None
    async with dev_client(stack) as kip:
        probe = asyncio.create_task(_interactive(kip, args.interactive_rate, 1e9)) \
            if args.interactive_rate else None
        while child.poll() is None:
            peak = max(peak, _hwm_kib(child.pid))
            await asyncio.sleep(0.2)
        if probe is not None:
            probe.cancel()
            beside = await asyncio.gather(probe, return_exceptions=True)
    elapsed = time.perf_counter() - started
    output = child.stdout.read()
    child.stdout.close()
    if child.returncode != 0:
        raise RuntimeError(f"kip batch run ended {child.returncode}: {output[-2000:]}")
    return {"rows_per_s": args.rows / elapsed, "peak_rss_mib": peak / 1024,
            "rows_out": pq.read_metadata(out).num_rows, "interactive": beside}


async def _kill_at(command: list[str], env: dict, out: Path, requests: float) -> None:
    """Run the job until its journal holds ``requests`` lines, then SIGKILL it."""
    journal = out.with_name(out.name + ".job") / "submitted.jsonl"
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    while child.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= requests:
            child.kill()
            break
        await asyncio.sleep(0.05)
    child.wait()
    sent = journal.read_bytes().count(b"\n")
    print(f"killed the job after {sent} requests; resuming", file=sys.stderr, flush=True)


async def inferences_per_row(stack: DevStack, rows: int, rows_per_request: int) -> float:
    """Rows the workers ran inference on for the job, from the audit trail (each worker
    final record of a job request is one inference of its chunk), per input row."""
    from kip.audit.reading import records

    inferred = 0
    async for audit in records(stack.connection("audit-reader"), stack.names, 0):
        if audit.request_id.startswith(f"{JOB_ID}.") and audit.stage == "worker" \
                and audit.final:
            chunk = int(audit.request_id.split(".")[1])
            inferred += min(rows_per_request, rows - chunk * rows_per_request)
    return inferred / rows


def _hwm_kib(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _interactive(kip, rate: float, seconds: float) -> list[float]:
    """Interactive MiniLM requests at ``rate``/s for ``seconds`` (or until cancelled);
    their client wall times in ms."""
    times: list[float] = []
    texts = sentences(1000, seed=5)
    ends = time.monotonic() + seconds
    try:
        while time.monotonic() < ends:
            started = time.perf_counter()
            await kip.infer("minilm", {"text": [texts[len(times) % 1000]]},
                            priority="interactive")
            times.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(max(0.0, 1 / rate - (time.perf_counter() - started)))
    except asyncio.CancelledError:
        pass
    return times


def _report(args, raw: float, job: dict, alone: list[float] | None) -> list[str]:
    lines = [f"raw ONNX Runtime ({args.model}): {raw:,.0f} rows/s",
             f"kip batch run: {job['rows_per_s']:,.0f} rows/s ({job['rows_out']:,} rows out), "
             f"ratio {job['rows_per_s'] / raw:.2f}",
             f"kip batch run's peak RSS: {job['peak_rss_mib']:.0f} MiB"]
    if job["min_cosine"] is not None:
        lines.append(f"lowest cosine to raw ONNX Runtime's embedding, over "
                     f"{min(args.rows, RAW_SAMPLE_ROWS):,} rows: {job['min_cosine']:.6f}")
    if "inferences_per_row" in job:
        lines.append(f"killed at {args.kill_at:.0%} and resumed: rows inferred per input row "
                     f"{job['inferences_per_row']:.3f} (from the audit trail)")
    beside = job["interactive"][0] if job["interactive"] else None
    if alone and beside:
        a, b = np.percentile(alone, 99), np.percentile(beside, 99)
        lines.append(f"interactive p99: {a:.1f} ms alone, {b:.1f} ms beside the job "
                     f"({len(beside)} requests): {b / a:.2f}x")
    return lines


def _one_row(model: str) -> dict:
    return {"text": ["warm"]} if model == "minilm" else {
        "pixels": np.zeros((1, 64), np.float32)}


def _quiet(*_args) -> None:
    pass
