"""``kip bench checks``: what the checks of a distrustful bus cost per request, in CPU
microseconds, beside the check every request already paid before them (the pipeline's
HMAC authentication of the request) as the baseline, in one run.

Per request it times the pipeline's extra work (sha256 of the message, the work-item
stamp, the replay check and record), the worker's (verifying the stamp, which re-hashes
the inputs, and signing the result) and the client's (sha256 of what it sends, verifying
the result's signature), for a one-row and a 32-row digits request and a one-text
MiniLM request; and the same two for a result of a batch of 32 under one signature (a
worker batch's), which are not in the sum: a request pays one or the other. No Kafka:
these are the functions the stages call.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
from aiokafka import TopicPartition

from kip.devkit.arguments import count
from kip.pipeline.access import AccessConfig, ApiKey, authenticate
from kip.pipeline.replays import BUCKET_MS, SeenRequests
from kip.schemas.codec import encode
from kip.schemas.messages import InferenceRequest, InferenceResult, Route, Status, Timings, WorkItem
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey, request_sha256
from kip.schemas.signing import sign
from kip.schemas.stamps import StampKeys, canonical, check_stamp, stamp_mac, stamped
from kip.schemas.tensors import Tensor

SECRET = "bench-secret"
WINDOW_MS = 300_000
BATCH = 32   # results under one signature in the batch figures


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=count, default=3000, help="timed calls per figure")
    p.add_argument("--seen", type=count, default=100_000,
                   help="ids already in the replay window when the replay check is timed")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _request(inputs: list[Tensor], n: int = 0) -> InferenceRequest:
    fields = dict(request_id=f"bench-{n}", tenant="acme", key_id="k1",
                  issued_at_ms=int(time.time() * 1000), priority="standard", model="digits",
                  deadline_ms=None, reply_to=None)
    return InferenceRequest(**fields, signature=sign(SECRET.encode(), **fields, inputs=inputs),
                            inputs=inputs)


def _per_call_us(fn: Callable[[], object], repeat: int) -> float:
    fn()
    started = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - started) / repeat * 1e6


def _replay_check(seen_ids: int, repeat: int) -> Callable[[], None]:
    """A call that checks and records one new id against ``seen_ids`` already there."""
    fresh = [SimpleNamespace(tenant="acme", request_id=f"bench-{n}", issued_at_ms=1)
             for n in range(seen_ids + repeat + 2)]   # what the replay check reads
    seen, tp = SeenRequests(WINDOW_MS), TopicPartition("kip.requests.standard", 0)
    for r in fresh[:seen_ids]:
        seen.admit(tp, r)
    queue = iter(fresh[seen_ids:])

    def check() -> None:
        r = next(queue)
        seen.check(tp, r)
        seen.admit(tp, r)
    return check


def sweep_pauses_ms(seen_ids: int, window_ms: int = WINDOW_MS) -> list[float]:
    """The pipeline's pauses, in ms, to forget ids that left the replay window: ``seen_ids``
    issued evenly over the window, then the window moving on for 20 s in steps of
    ``BUCKET_MS`` (a sweep that walked every id paused the process for all it held)."""
    seen, tp = SeenRequests(window_ms), TopicPartition("kip.requests.standard", 0)
    for n in range(seen_ids):
        seen.admit(tp, SimpleNamespace(tenant="acme", request_id=f"bench-{n}",
                                       issued_at_ms=n * window_ms // seen_ids))
    seen.unwritten.clear()
    pauses = []
    for now_ms in range(window_ms, window_ms + 20_001, BUCKET_MS):
        started = time.perf_counter()
        seen.sweep(now_ms)
        pauses.append((time.perf_counter() - started) * 1e3)
    return pauses


def _result(request: bytes) -> bytes:
    return encode(InferenceResult(request_id="bench-0", status=Status.OK,
                                  request_sha256=request_sha256(request),
                                  outputs=[Tensor.from_array("p", np.zeros((1, 10), "f4"))],
                                  timings=Timings(total_ms=1.0), produced_at_ms=1))


def measure(inputs: list[Tensor], repeat: int, seen_ids: int) -> dict[str, float]:
    """Microseconds of CPU per request for each check."""
    request = _request(inputs)
    body = encode(request)
    access = AccessConfig(keys={"k1": ApiKey(tenant="acme", secret=SECRET)})
    keys, signing = StampKeys.generate(), ResultSigningKey.generate()
    signer, verifier = signing.signer(), ResultKeys(keys={"r1": signing.public()}).verifier()
    item = stamped(WorkItem(request=request, routed_at_ms=1, deadline_ms=2,
                            request_sha256=request_sha256(body),
                            route=Route(alias="digits", model_name="digits",
                                        model_version="1", artifact_sha256="0" * 64)), keys)
    result = _result(body)
    header = signer.header(result)
    batch = [result] * BATCH
    batch_headers = signer.headers(batch)
    verifier.valid(result, [batch_headers[0]])   # the batch's signature, checked once
    replay_check = _replay_check(seen_ids, repeat)
    figures = {
        "baseline: authenticate (HMAC of the request)":
            _per_call_us(lambda: authenticate(request, access, request.issued_at_ms), repeat),
        "pipeline: sha256 of the message": _per_call_us(lambda: request_sha256(body), repeat),
        "pipeline: stamp the work item":
            _per_call_us(lambda: stamp_mac(canonical(item), keys), repeat),
        "pipeline: replay check and record":
            _per_call_us(replay_check, repeat),
        "worker: verify the stamp": _per_call_us(lambda: check_stamp(item, keys), repeat),
        "worker: sign the result": _per_call_us(lambda: signer.header(result), repeat),
        "client: sha256 of the request sent":
            _per_call_us(lambda: request_sha256(body), repeat),
        "client: verify the result": _per_call_us(lambda: verifier.valid(result, [header]),
                                                  repeat),
        f"worker: sign a batch of {BATCH}, per result":
            _per_call_us(lambda: signer.headers(batch), max(1, repeat // BATCH)) / BATCH,
        f"client: verify a result of a verified batch of {BATCH}":
            _per_call_us(lambda: verifier.valid(result, [batch_headers[BATCH // 2]]), repeat),
    }
    figures["all new checks"] = sum(v for k, v in figures.items()
                                    if not k.startswith("baseline") and "batch" not in k)
    return figures


def run(args) -> int:
    pixels = np.random.default_rng(0).random((32, 64), dtype=np.float32)
    shapes = {"digits, 1 row": [Tensor.from_array("pixels", pixels[:1])],
              "digits, 32 rows": [Tensor.from_array("pixels", pixels)],
              "minilm, 1 text": [Tensor.text("text", ["A man is eating food."])]}
    report = {}
    for name, inputs in shapes.items():
        print(f"measuring {name} ({args.repeat} calls per figure)", flush=True)
        report[name] = measure(inputs, args.repeat, args.seen)
    longest_sweep_ms = max(sweep_pauses_ms(args.seen))
    if args.json:
        sweep = {"ids": args.seen, "longest_pause_ms": longest_sweep_ms}
        print(json.dumps(report | {"replay window sweep": sweep}, indent=2))
        return 0
    for name, figures in report.items():
        baseline = figures["baseline: authenticate (HMAC of the request)"]
        print(f"\n{name}: CPU µs per request (ratio to the baseline)")
        for label, us in figures.items():
            print(f"  {label:48} {us:8.1f}  {us / baseline:5.2f}x")
    print(f"\nreplay window of {args.seen:,} ids: the longest sweep {longest_sweep_ms:.2f} ms "
          f"(every {BUCKET_MS} ms, the ids that left it are forgotten)")
    return 0
