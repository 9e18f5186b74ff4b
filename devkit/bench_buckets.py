"""``kip bench buckets``: MiniLM batches run in length buckets (workers/buckets.py) beside
the same batches padded to their longest text, in one run (on this machine's CPU unless
``--device`` says otherwise).

Two mixes of texts, in batches of ``--batch``:

- mixed: three short queries (3-12 words) to one passage (30-90 words), shuffled;
- uniform: the short sentences the load benchmarks send (``devkit.loadgen``).

For each it prints the tokens run per text (padding included), sequences/s with buckets
and without (rounds alternate, so the machine's drift falls on both), their ratio, and
the largest difference between the two runs' embeddings. No Kafka: this is the worker's
``ModelSession.run``. ``--call-tokens`` replaces the provider's estimate of what a call
costs (workers/buckets.py), so that runs of several values show where it lies.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from kip.devkit.arguments import count
from kip.devkit.loadgen import sentences
from kip.models.export.reference import build_reference
from kip.models.preprocess import token_ids
from kip.models.registry import Registry
from kip.runtime.settings import KipSettings
from kip.schemas.tensors import Tensor
from kip.workers.buckets import length_buckets, padded_tokens
from kip.workers.session import ModelSession

WORDS = ("kip routes every request through Kafka topics and answers each one exactly once "
         "while the workers keep their accelerators busy with batches").split()
NEVER_SPLIT = 10**12   # call_tokens for the baseline: one call per batch


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--texts", type=count, default=512, help="texts per mix")
    p.add_argument("--batch", type=count, default=32, help="texts per inference call")
    p.add_argument("--call-tokens", type=count, default=None,
                   help="what one call costs, in tokens (default: the provider's estimate)")
    add_session_arguments(p)


def add_session_arguments(p: argparse.ArgumentParser) -> None:
    """What every MiniLM session bench takes: the device, rounds, the registry, JSON
    output."""
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu",
                   help="where the session runs")
    p.add_argument("--rounds", type=count, default=3, help="alternating timed rounds")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir,
                   help="registry with the reference models, built there if missing "
                   "(default $KIP_REGISTRY_DIR)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def minilm_session(registry_dir: Path, device: str = "cpu") -> ModelSession:
    """MiniLM from ``registry_dir``, the reference models built there first if missing."""
    registry = Registry(registry_dir)
    build_reference(registry)   # once per registry: the export needs torch (the dev extra)
    return ModelSession(registry.load_alias("minilm"), device=device)


def run(args) -> int:
    session = minilm_session(args.registry, args.device)
    session.call_tokens = args.call_tokens or session.call_tokens
    report = {name: measure(session, texts, args.batch, args.rounds)
              for name, texts in (("mixed", mixed_texts(args.texts)),
                                  ("uniform", sentences(args.texts)))}
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def mixed_texts(n: int, seed: int = 4) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < 0.75, rng.integers(3, 13, n), rng.integers(30, 91, n))
    return [" ".join(rng.choice(WORDS, size=k)) for k in lengths]


def measure(session: ModelSession, texts: list[str], batch: int, rounds: int) -> dict:
    chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]
    own = session.call_tokens
    timings: dict[str, list[float]] = {"buckets": [], "longest": []}
    outputs = {}
    for i in range(rounds):
        print(f"  round {i + 1}/{rounds}: {len(texts)} texts in batches of {batch}, "
              "with buckets and without", flush=True)
        for name, call_tokens in (("buckets", own), ("longest", NEVER_SPLIT)):
            session.call_tokens = call_tokens
            started = time.perf_counter()
            outputs[name] = [session.run([[Tensor.text("text", c)]])[0][0].array
                             for c in chunks]
            timings[name].append(time.perf_counter() - started)
    session.call_tokens = own
    rate = {name: len(texts) / min(t) for name, t in timings.items()}
    return {"texts": len(texts), "batch": batch, "provider": session.provider,
            "call_tokens": own,
            "tokens_per_text": _tokens_per_text(session, chunks, own),
            "sequences_per_s": rate, "ratio": rate["buckets"] / rate["longest"],
            "max_abs_difference": float(max(np.abs(a - b).max() for a, b in
                                            zip(outputs["buckets"], outputs["longest"])))}


def _tokens_per_text(session: ModelSession, chunks: list[list[str]], call_tokens: int
                     ) -> dict[str, float]:
    pre = session.manifest.preprocessing
    used = {"buckets": 0, "longest": 0}
    for chunk in chunks:
        lengths = [len(ids) for ids in token_ids(session.tokenizer, chunk, pre.max_length)]
        used["buckets"] += padded_tokens(lengths, length_buckets(lengths, call_tokens))
        used["longest"] += len(lengths) * max(lengths)
    texts = sum(map(len, chunks))
    return {name: tokens / texts for name, tokens in used.items()}


def render(report: dict) -> str:
    first = next(iter(report.values()))
    lines = [f"on {first['provider']}, a call counted as {first['call_tokens']} tokens",
             f"{'mix':8} {'tokens/text':>18} {'sequences/s':>22} {'ratio':>6} {'max diff':>9}",
             f"{'':8} {'buckets':>8} {'longest':>9} {'buckets':>10} {'longest':>11}"]
    for name, r in report.items():
        t, s = r["tokens_per_text"], r["sequences_per_s"]
        lines.append(f"{name:8} {t['buckets']:8.1f} {t['longest']:9.1f} {s['buckets']:10.1f} "
                     f"{s['longest']:11.1f} {r['ratio']:6.2f} {r['max_abs_difference']:9.1e}")
    return "\n".join(lines)
