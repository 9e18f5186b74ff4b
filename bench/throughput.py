"""MiniLM throughput: raw ONNX Runtime at batch 32 vs the whole kip pipeline, one run.

    .venv/bin/python bench/throughput.py [--requests 512]

Starts its own broker (free loopback port, temporary folder), topics, pipeline and
workers, so both figures come from the same machine in the same minute. Prints raw
sequences/s, pipeline requests/s with p50/p99 latency while every request is in flight
at once (queueing dominates), their ratio, and latency one request at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kip.broker import LocalBroker, free_port  # noqa: E402
from kip.client import KipClient  # noqa: E402
from kip.devstack import DEV_KEY_ID, DevStack, ensure_dev_access  # noqa: E402
from kip.loadgen import sentences  # noqa: E402
from schemas.tensors import Tensor  # noqa: E402
from workers.session import ModelSession  # noqa: E402

UNLOADED_REQUESTS = 100


def raw_throughput(session: ModelSession, texts: list[str], batch: int = 32) -> float:
    """Sequences/s through ModelSession.run (tokenize + ORT), batches of ``batch``."""
    chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]
    session.run([[Tensor.text("text", chunks[0])]])                       # warm-up
    start = time.perf_counter()
    for chunk in chunks:
        session.run([[Tensor.text("text", chunk)]])
    return len(texts) / (time.perf_counter() - start)


async def pipeline_run(stack: DevStack, texts: list[str]) -> dict:
    key = ensure_dev_access(stack.access_file).keys[DEV_KEY_ID]
    async with KipClient(stack.bootstrap, tenant=key.tenant, key_id=DEV_KEY_ID,
                         secret=key.secret.get_secret_value(),
                         topic_prefix=stack.prefix) as kip:
        warm = await kip.infer("minilm", {"text": ["warm-up"]}, priority="batch",
                              timeout_s=120)
        assert warm.status == "ok", warm
        sent_at, latencies = {}, []
        start = time.perf_counter()
        futures = []
        for text in texts:
            request = kip.request("minilm", {"text": [text]}, priority="batch")
            sent_at[request.request_id] = time.perf_counter()
            futures.append(await kip.submit(request))
        results = await asyncio.wait_for(asyncio.gather(*futures), 300)
        elapsed = time.perf_counter() - start
        single = [(await kip.infer("minilm", {"text": [t]}, priority="interactive"))
                  .timings.total_ms for t in texts[:UNLOADED_REQUESTS]]
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} requests did not succeed, e.g. {bad[0].error}")
    latencies = np.array([r.timings.total_ms for r in results])
    return {"rps": len(texts) / elapsed, "p50": float(np.percentile(latencies, 50)),
            "p99": float(np.percentile(latencies, 99)),
            "mean_batch": float(np.mean([r.batch_size for r in results])),
            "single_p50": float(np.percentile(single, 50)),
            "single_p99": float(np.percentile(single, 99))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=512)
    args = parser.parse_args()
    texts = sentences(args.requests)
    with tempfile.TemporaryDirectory(prefix="kip-bench-") as tmp:
        broker = LocalBroker(Path(tmp) / "kafka", port=free_port(), controller_port=free_port())
        broker.start()
        stack = DevStack(home=Path(tmp), bootstrap_servers=broker.bootstrap, prefix="bench",
                         registry_dir=Path(".kip/registry"), metrics_base_port=0,
                         worker_env={"KIP_MAX_BATCH": "32", "KIP_MAX_DELAY_MS": "5",
                                     "KIP_BACKGROUND_MAX_BATCH": "32"})
        try:
            stack.prepare()
            mv = stack.registry.resolve("minilm")
            print(f"raw ONNX Runtime: {len(texts)} sentences at batch 32 ...", flush=True)
            raw = raw_throughput(ModelSession(mv, device="cpu"), texts)
            stack.start_services()
            print(f"pipeline: {len(texts)} single-sentence requests, all in flight ...",
                  flush=True)
            piped = asyncio.run(pipeline_run(stack, texts))
        finally:
            stack.stop_services()
            broker.stop()
    print(f"\nraw ORT (tokenize + run, batch 32): {raw:8.1f} sequences/s")
    print(f"kip end to end:                     {piped['rps']:8.1f} requests/s   "
          f"p50 {piped['p50']:.0f} ms   p99 {piped['p99']:.0f} ms   "
          f"mean batch {piped['mean_batch']:.1f}")
    print(f"ratio pipeline / raw:               {piped['rps'] / raw:8.2f}")
    print(f"unloaded latency ({UNLOADED_REQUESTS} requests one at a time): "
          f"p50 {piped['single_p50']:.1f} ms   p99 {piped['single_p99']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
