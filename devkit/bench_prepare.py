"""``kip bench prepare``: MiniLM chunks with the next chunk's tokenizing done ahead, in a
thread of its own, beside the same chunks prepared in turn, in one run (no Kafka).

This is the background lane's loop (``workers.batching.run_chunks``) on single-text
requests, as the worker sees them. For each way it prints sequences/s, the inference
thread's time outside ``execute`` per chunk (what a device waits between two calls:
tokenizing, in turn), and how long tokenizing a chunk takes alone. Rounds alternate, so
the machine's drift falls on both ways (and each goes first in every other round); the
best round of each is kept, and the two ways' embeddings are compared.

On a CPU the tokenizer and ONNX Runtime share the cores, so preparing ahead moves the
work rather than hiding it; on a GPU host (``--device cuda``) the device waits for the
tokenizer between calls unless it is done ahead.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kip.devkit.arguments import count
from kip.devkit.bench_buckets import add_session_arguments, minilm_session, mixed_texts
from kip.schemas.tensors import Tensor
from kip.workers.batching import Stages, run_chunks
from kip.workers.session import ModelSession

WAYS = ("in turn", "ahead")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--texts", type=count, default=1024, help="texts per round")
    p.add_argument("--chunk", type=count, default=64, help="requests (texts) per call")
    add_session_arguments(p)


def run(args) -> int:
    session = minilm_session(args.registry, args.device)
    texts = mixed_texts(args.texts)
    chunks = [[[Tensor.text("text", [t])] for t in texts[i:i + args.chunk]]
              for i in range(0, len(texts), args.chunk)]
    session.run(chunks[0])   # warm-up
    report = measure(session, chunks, args.rounds)
    report["provider"] = session.provider
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def measure(session: ModelSession, chunks: list[list], rounds: int) -> dict:
    texts = sum(map(len, chunks))
    best: dict[str, dict] = {}
    outputs: dict[str, list] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="kip-prepare") as ahead:
        for i in range(rounds):
            print(f"  round {i + 1}/{rounds}: {texts} texts in chunks of {len(chunks[0])}, "
                  "prepared in turn and ahead", flush=True)
            for way in (WAYS if i % 2 == 0 else WAYS[::-1]):   # neither always first
                timing, outputs[way] = _timed(session, chunks, ahead if way == "ahead" else None)
                if way not in best or timing["wall_s"] < best[way]["wall_s"]:
                    best[way] = timing
    rates = {way: texts / t["wall_s"] for way, t in best.items()}
    return {"texts": texts, "chunk": len(chunks[0]),
            "tokenize_ms_per_chunk": _tokenize_ms(session, chunks),
            "sequences_per_s": rates,
            "outside_execute_ms_per_chunk": {
                way: 1000 * (t["wall_s"] - t["execute_s"]) / len(chunks)
                for way, t in best.items()},
            "ratio": rates["ahead"] / rates["in turn"],
            "max_abs_difference": _difference(outputs["ahead"], outputs["in turn"])}


def _timed(session: ModelSession, chunks: list[list], ahead) -> tuple[dict, list]:
    spent = [0.0]

    def execute(prepared):
        started = time.perf_counter()
        try:
            return session.execute(prepared)
        finally:
            spent[0] += time.perf_counter() - started

    started = time.perf_counter()
    runs = run_chunks(Stages(session.prepare, execute, ahead), chunks, lambda _: 2**62)
    wall = time.perf_counter() - started
    if any(r.error is not None for r in runs):
        raise RuntimeError(f"a chunk failed: {next(r.error for r in runs if r.error)!r}")
    return {"wall_s": wall, "execute_s": spent[0]}, [r.outputs for r in runs]


def _tokenize_ms(session: ModelSession, chunks: list[list]) -> float:
    started = time.perf_counter()
    for chunk in chunks:
        session.prepare(chunk)
    return 1000 * (time.perf_counter() - started) / len(chunks)


def _difference(a: list, b: list) -> float:
    return float(max(np.abs(x[0].array - y[0].array).max()
                     for run_a, run_b in zip(a, b) for x, y in zip(run_a, run_b)))


def render(report: dict) -> str:
    s, gap = report["sequences_per_s"], report["outside_execute_ms_per_chunk"]
    return "\n".join([
        f"{report['texts']} texts, chunks of {report['chunk']}, on {report['provider']}; "
        f"tokenizing a chunk alone: {report['tokenize_ms_per_chunk']:.2f} ms",
        f"{'way':8} {'sequences/s':>12} {'outside execute, ms/chunk':>26}",
        *(f"{way:8} {s[way]:12.1f} {gap[way]:26.2f}" for way in WAYS),
        f"ratio ahead / in turn: {report['ratio']:.2f}; "
        f"largest embedding difference {report['max_abs_difference']:.1e}"])
