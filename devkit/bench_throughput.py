"""``kip bench throughput``: MiniLM through raw ONNX Runtime at batch 32 against the
whole kip pipeline, in one run.

Starts its own broker (free loopback port, temporary folder), topics, pipeline and
workers, so both figures come from the same machine in the same minutes. Prints raw
sequences/s (before and after kip's run, and their mean), kip's requests/s with p50/p99
latency while every request is in flight at once (queueing dominates) after a warm-up,
their ratio, and latency one request at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np

from kip.devkit.arguments import count, zero_or_more
from kip.devkit.loadgen import sentences
from kip.devkit.stack import DevStack, dev_client
from kip.devkit.own_stack import own_stack
from kip.runtime import collector
from kip.runtime.settings import KipSettings
from kip.schemas.tensors import Tensor
from kip.workers.session import ModelSession

UNLOADED_REQUESTS = 100
# Calls of up to 32 requests, as raw ONNX Runtime's batches: the call budget is set
# high enough that the count, not the time, bounds them. Each pull takes four calls'
# worth and commits them together: with one call per pull, the broker's share of a
# request (a transaction per 32) took the CPU that ONNX Runtime's two threads wait for.
WORKER_ENV = {"KIP_MAX_BATCH": "32", "KIP_MAX_DELAY_MS": "5", "KIP_BACKGROUND_MAX_BATCH": "32",
              "KIP_BACKGROUND_CALL_MS": "100", "KIP_BACKGROUND_PULL": "128"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=count, default=2048)
    p.add_argument("--warm-up", type=zero_or_more, default=2048,
                   help="requests run through kip first, unmeasured: a fresh broker spends "
                   "its first seconds compiling (JIT), on the cores inference needs")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir,
                   help="registry with the reference models (default $KIP_REGISTRY_DIR)")


def run(args) -> int:
    collector.settle()   # thousands of requests in flight (runtime/collector.py)
    (before, after), piped = asyncio.run(_measure(args.requests, args.warm_up, args.registry))
    raw = (before + after) / 2
    print(f"\nraw ORT (tokenize + run, batch 32): {raw:8.1f} sequences/s   "
          f"(before kip {before:.1f}, after {after:.1f})")
    print(f"kip end to end:                     {piped['rps']:8.1f} requests/s   "
          f"p50 {piped['p50']:.0f} ms   p99 {piped['p99']:.0f} ms   "
          f"mean batch {piped['mean_batch']:.1f}")
    print(f"ratio pipeline / raw:               {piped['rps'] / raw:8.2f}")
    print(f"unloaded latency ({UNLOADED_REQUESTS} requests one at a time): "
          f"p50 {piped['single_p50']:.1f} ms   p99 {piped['single_p99']:.1f} ms")
    return 0


async def _measure(requests: int, warm_up: int, registry: Path
                   ) -> tuple[tuple[float, float], dict]:
    """Raw ONNX Runtime before and after kip's run (this machine drifts by 10-20% within
    minutes: their mean is the fairer yardstick), and kip's run."""
    texts = sentences(requests)
    async with own_stack("bench", registry, WORKER_ENV) as stack:
        session = ModelSession(stack.registry.load_alias("minilm"), device="cpu")
        print(f"raw ONNX Runtime: {len(texts)} sentences at batch 32 ...", flush=True)
        before = raw_throughput(session, texts)
        stack.start_services()
        print(f"pipeline: {len(texts)} single-sentence requests, all in flight, after "
              f"{warm_up} to warm up ...", flush=True)
        piped = await pipeline_run(stack, texts, sentences(warm_up, seed=2))
        print("raw ONNX Runtime again, kip idle ...", flush=True)
        return (before, raw_throughput(session, texts)), piped


async def _all_in_flight(kip, texts: list[str]) -> list:
    """Every text as a batch-class request, all submitted before any is awaited."""
    futures = [await kip.submit(kip.request("minilm", {"text": [t]}, priority="batch"))
               for t in texts]
    results = await asyncio.wait_for(asyncio.gather(*futures), 300)
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} requests did not succeed, e.g. {bad[0].error}")
    return results


def raw_throughput(session: ModelSession, texts: list[str], batch: int = 32) -> float:
    """Sequences/s through ModelSession.run (tokenize + ORT), batches of ``batch``."""
    chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]
    session.run([[Tensor.text("text", chunks[0])]])                       # warm-up
    start = time.perf_counter()
    for chunk in chunks:
        session.run([[Tensor.text("text", chunk)]])
    return len(texts) / (time.perf_counter() - start)


async def pipeline_run(stack: DevStack, texts: list[str], warm_up: list[str] = ()
                       ) -> dict:
    async with dev_client(stack) as kip:
        warm = await kip.infer("minilm", {"text": ["warm-up"]}, priority="batch", retry_s=120,
                               timeout_s=120)
        if warm.status != "ok":
            raise RuntimeError(f"the warm-up request ended {warm.status}: {warm.error}")
        await _all_in_flight(kip, warm_up)
        start = time.perf_counter()
        results = await _all_in_flight(kip, texts)
        elapsed = time.perf_counter() - start
        single = [(await kip.infer("minilm", {"text": [t]}, priority="interactive"))
                  .timings.total_ms for t in texts[:UNLOADED_REQUESTS]]
    latencies = np.array([r.timings.total_ms for r in results])
    return {"rps": len(texts) / elapsed, "p50": float(np.percentile(latencies, 50)),
            "p99": float(np.percentile(latencies, 99)),
            "mean_batch": float(np.mean([r.batch_size for r in results])),
            "single_p50": float(np.percentile(single, 50)),
            "single_p99": float(np.percentile(single, 99))}
