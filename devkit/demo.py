"""``kip demo``: real sentences and digit images through the running pipeline."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from kip.client import KipClient
from kip.schemas.messages import InferenceResult, Status, output_array

PAIRS = [("A man is eating food.", "A man is eating a piece of bread."),
         ("A man is eating food.", "The girl is carrying a baby."),
         ("A man is riding a horse.", "A man is riding a white horse on an enclosed ground.")]
DIGITS = 200
WARMUP_TIMEOUT_S = 120.0
TORCH_SIMILARITY = 0.7553     # torch's cosine of the first pair, the reference
MIN_DIGIT_ACCURACY = 0.95


def passed(figures: dict) -> bool:
    """Whether the demo's figures match torch's similarity and the accuracy bar."""
    return (abs(figures["similarity"] - TORCH_SIMILARITY) <= 1e-3
            and figures["digit_accuracy"] >= MIN_DIGIT_ACCURACY)


async def run_demo(client: KipClient, log=print) -> dict:
    """Send the demo traffic; return the figures it printed (for tests and exit codes)."""
    await _warm_up(client, log)
    similarity = await _sentences(client, log)
    accuracy = await _digits(client, log)
    return {"similarity": similarity, "digit_accuracy": accuracy}


async def _warm_up(client: KipClient, log) -> None:
    log("waiting for the pipeline and workers to serve (first start joins consumer groups)...")
    start = time.monotonic()
    for model, inputs in (("minilm", {"text": ["warm-up"]}),
                          ("digits", {"pixels": np.zeros((1, 64), np.float32)})):
        try:
            # batch class: its default deadline outlasts a cold start (interactive's 2 s
            # would expire while consumer groups are still forming)
            result = await client.infer(model, inputs, priority="batch",
                                        timeout_s=WARMUP_TIMEOUT_S,
                                        retry_s=WARMUP_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(f"no result from model {model} within {WARMUP_TIMEOUT_S:.0f}s: "
                               "are the pipeline and its worker running? (see their logs in $KIP_HOME)"
                               ) from None
        _require_ok(result)
    log(f"  serving after {time.monotonic() - start:.1f}s")


async def _sentences(client: KipClient, log) -> float:
    log("\nsentence similarity (all-MiniLM-L6-v2 via kip, cosine of the embeddings):")
    first = None
    for a, b in PAIRS:
        results = await asyncio.gather(*(client.infer("minilm", {"text": [s]},
                                                      priority="interactive") for s in (a, b)))
        for r in results:
            _require_ok(r)
        ea, eb = (output_array(r, "embedding")[0] for r in results)
        cosine = float(np.dot(ea, eb) / (np.linalg.norm(ea) * np.linalg.norm(eb)))
        first = cosine if first is None else first
        total = max(r.timings.total_ms for r in results)
        log(f"  {cosine:.4f}  {a!r} vs {b!r}  ({total:.1f} ms, model "
            f"{results[0].model_name}@{results[0].model_version})")
    return first


async def _digits(client: KipClient, log) -> float:
    from kip.models.export.digits import dataset

    _, _, images, labels = dataset()
    images, labels = images[:DIGITS], labels[:DIGITS]
    started = time.monotonic()
    results = await asyncio.gather(*(
        client.infer("digits", {"pixels": images[i:i + 1]}, priority="standard")
        for i in range(len(images))))
    elapsed = time.monotonic() - started
    for r in results:
        _require_ok(r)
    predicted = np.array([int(output_array(r, "label")[0]) for r in results])
    accuracy = float((predicted == labels).mean())
    totals = sorted(r.timings.total_ms for r in results)
    log(f"\ndigits: {int((predicted == labels).sum())}/{len(labels)} held-out images classified "
        f"correctly ({accuracy:.1%}) in {elapsed:.2f}s; latency p50 "
        f"{totals[len(totals) // 2]:.1f} ms, p99 {totals[int(len(totals) * 0.99) - 1]:.1f} ms")
    log("  first ten: predicted " + " ".join(map(str, predicted[:10])) +
        " | true " + " ".join(map(str, labels[:10])))
    return accuracy


def _require_ok(result: InferenceResult) -> None:
    if result.status != Status.OK:
        raise RuntimeError(f"request {result.request_id} ended {result.status.value}: "
                           f"{result.error.code if result.error else ''} "
                           f"{result.error.message if result.error else ''}")
