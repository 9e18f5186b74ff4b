"""``kip bench cost``: what kip costs around an inference, per process, in one run.

Starts a kip of its own (broker, pipeline, a worker per reference model) and measures:

(a) single-row digits requests, all in flight: CPU µs per request of every process
    (broker, pipeline, each worker, this client), read from /proc before and after;
(b) the same with 32-row requests: CPU µs per request and per row;
(c) sequential interactive MiniLM requests: p50/p99 of the client's wall time and of
    each stage (admission, transport to the worker, batch wait, inference, commit and
    return), beside raw ONNX Runtime's time for the same inputs in this process; and
    every process's CPU µs per request over them;
(d) floors on the same broker: the round trip through two chained bare aiokafka
    transactional hops, back to back, with the CPU µs per trip of the broker and of this
    process (both hops and their client); the same hops with the second running raw
    ONNX Runtime on (c)'s texts inline, and what they add over it, paced as (c) is; the
    same hops with the first a bare faust agent, as kip's pipeline is a faust agent; the
    floor of kip's shape, every part of its design with no kip code (a faust first hop,
    side records in each transaction, inference in a thread, paced as (c) is), its round
    trip set beside (c)'s client wall time too; and the CPU per event of a bare faust
    agent that only consumes (devkit/floors.py);
(e) the audit chains: the run's audit records and seals per request, the CPU of linking
    a record and of sealing a transaction (timed here on the run's own records; already
    inside the stages' CPU above), and of ``kip audit verify`` per record.

The digits model (a small convolutional net) takes little CPU per row in ONNX Runtime,
but not nothing, so (a) and (b) also report each figure outside ONNX Runtime's run: the
CPU minus what raw ONNX Runtime takes, in this process, for calls of the same sizes
(``RawDigits``). docs/benchmarks.md keeps the figures with the commit they ran on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import orjson

from kip.devkit.arguments import count, zero_or_more
from kip.devkit import floors
from kip.devkit.cost_report import render
from kip.devkit.cpu import CpuMeter, main_thread_cpu_us
from kip.devkit.cluster import LocalCluster
from kip.devkit.loadgen import sentences
from kip.devkit.stack import DevStack, dev_client
from kip.devkit.own_stack import BUSES, own_stack
from kip.client import KipClient
from kip.runtime import collector
from kip.runtime.settings import KipSettings
from kip.schemas.codec import encode, now_ms
from kip.schemas.audit_chain import ChainHead
from kip.schemas.messages import InferenceResult
from kip.schemas.result_signatures import ResultKeys
from kip.schemas.tensors import Tensor
from kip.transport.clients import KafkaConnection
from kip.workers.session import ModelSession


# The broker keeps the C2 compiler on every bus, as a long-running one has it (the
# JVM's default; a plain dev broker runs C1 alone, for tests' young brokers: devkit/
# broker.py), and is warmed up until C2 has compiled what each scenario runs: a broker
# still compiling spends on a request several times its steady state. (c)'s requests one
# at a time take paths that (a)'s barely use (fetches that wait out their long poll,
# transactions of one record), which C2 otherwise compiles during (c), on a core the
# stages wait for. The floors, run after (c), find them compiled.
WARM_UP = 30000
SEQUENTIAL_WARM_UP = 2500


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=count, default=3000, help="(a) single-row requests")
    p.add_argument("--batched", type=count, default=1000, help="(b) 32-row requests")
    p.add_argument("--sequential", type=count, default=200, help="(c) interactive requests")
    p.add_argument("--warm-up", type=zero_or_more, default=WARM_UP,
                   help="single-row requests run before measuring, unmeasured, no more in "
                   "flight at once than (a): the broker's JIT compilers and every cache reach "
                   f"their steady state (default {WARM_UP:,})")
    p.add_argument("--sequential-warm-up", type=zero_or_more, default=SEQUENTIAL_WARM_UP,
                   help="interactive requests run one at a time before (c), unmeasured: "
                   f"the broker compiles their paths too (default {SEQUENTIAL_WARM_UP:,})")
    p.add_argument("--floor-events", type=count, default=5000, help="(d) faust floor events")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir,
                   help="registry with the reference models (default $KIP_REGISTRY_DIR)")
    p.add_argument("--bus", choices=BUSES, default="plaintext",
                   help="the broker kip runs on: plaintext, or secured with every process "
                   "connecting as its own user over SASL_SSL (scram) or with its "
                   "certificate (mtls); the floors then connect over TLS too")
    p.add_argument("--brokers", type=count, default=1,
                   help="above 1: (a) and (c) on a cluster of this many brokers (replication "
                   "3, min ISR 2) beside one broker, in one run (devkit/replication_cost.py)")
    p.add_argument("--tracing", action="store_true",
                   help="(a) and (c) with tracing off beside tracing on (every process "
                   "exporting spans over OTLP to a receiver here), in one run "
                   "(devkit/tracing_cost.py)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args) -> int:
    collector.settle()   # the client holds thousands of requests (runtime/collector.py)
    if args.tracing:   # tracing's cost, beside none
        from kip.devkit.tracing_cost import measure_tracing, render_tracing
        report = asyncio.run(measure_tracing(args))
        print(json.dumps(report, indent=2) if args.json else render_tracing(report))
        return 0
    if args.brokers > 1:   # replication's cost, beside one broker
        from kip.devkit.replication_cost import measure_replication, render_replication
        report = asyncio.run(measure_replication(args))
        print(json.dumps(report, indent=2) if args.json else render_replication(report))
        return 0
    report = asyncio.run(measure(args))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


async def measure(args) -> dict:
    async with own_stack("cost", args.registry, bus=args.bus, log=_quiet,
                         steady_state=True) as stack:
        stack.start_services(log=_quiet)
        pids = stack_pids(stack)
        raw = RawDigits(stack)
        async with dev_client(stack) as kip:
            report = {"bus": _bus(kip.kafka),
                      "broker_jvm_options": stack.own_broker.jvm_options}
            await warm_up_models(kip)
            if args.warm_up:
                print(f"warming up: {args.warm_up} single-row requests", file=sys.stderr,
                      flush=True)
                for round_size in warm_up_rounds(args.warm_up, args.requests):
                    await all_in_flight(kip, pids, raw, round_size, 1)
            print(f"(a) {args.requests} single-row requests, all in flight", file=sys.stderr, flush=True)
            report["a_single_row"] = await all_in_flight(kip, pids, raw, args.requests, 1)
            print(f"(b) {args.batched} requests of 32 rows, all in flight", file=sys.stderr, flush=True)
            report["b_32_rows"] = await all_in_flight(kip, pids, raw, args.batched, 32)
            print(f"(c) {args.sequential} interactive requests, one at a time, after "
                  f"{args.sequential_warm_up} unmeasured", file=sys.stderr, flush=True)
            report["c_sequential"], report["c_cpu_us_per_request"] = await sequential(
                kip, stack, args.sequential, pids, args.sequential_warm_up)
        print("(d) floors: two bare transactional hops; a bare faust consumer", file=sys.stderr, flush=True)
        report["d_floors"] = await _floors(stack, args, pids["broker"])
        print("(e) audit chains: the run's audit topic", file=sys.stderr, flush=True)
        report["e_audit_chains"] = await _audit_chains(stack)
    return report


def _quiet(*_) -> None:
    pass


def _bus(kafka: KafkaConnection) -> str:
    """How the client reaches the broker, as its connection says."""
    return " ".join(filter(None, [kafka.security_protocol, kafka.sasl_mechanism]))


def stack_pids(stack: DevStack) -> dict[str, int]:
    """broker (or broker 1, 2, ... of a cluster), pipeline, worker <model>..., client: the
    processes charged."""
    kafka = stack.own_broker
    pids = ({f"broker {n.node_id}": n.pid() for n in kafka.nodes}
            if isinstance(kafka, LocalCluster) else {"broker": kafka.pid()})
    for proc in stack.procs:   # args: python -m kip.cli pipeline | worker --model <m>
        pids[" ".join(a for a in proc.args[3:] if a != "--model")] = proc.pid
    return pids | {"client": os.getpid()}


def warm_up_rounds(total: int, at_once: int) -> list[int]:
    """``total`` warm-up requests in rounds of at most ``at_once`` ((a)'s count): all at
    once, a slow machine's backlog outlasts the class's wait budget, and admission
    refuses the rest (``OVERLOADED``)."""
    at_once = at_once or total or 1
    return [min(at_once, total - start) for start in range(0, total, at_once)]


async def warm_up_models(kip: KipClient) -> None:
    for model, inputs in (("digits", {"pixels": np.zeros((1, 64), np.float32)}),
                          ("minilm", {"text": ["warm"]})):
        result = await kip.infer(model, inputs, timeout_s=120, retry_s=120)
        if result.status != "ok":
            raise RuntimeError(f"warm-up on {model} ended {result.status}: {result.error}")


async def all_in_flight(kip: KipClient, pids: dict[str, int], raw: RawDigits, count: int,
                        rows: int) -> dict:
    """CPU per request and per row of each process, for ``count`` digits requests of
    ``rows`` rows submitted at once (building and signing them is the client's cost),
    and outside ONNX Runtime's run."""
    images = np.random.default_rng(0).random((rows, 64), dtype=np.float32)
    meter = CpuMeter(pids)
    loop = CpuMeter({"worker digits": pids["worker digits"]}, read=main_thread_cpu_us)
    meter.start()
    loop.start()
    started = time.perf_counter()
    futures = [await kip.submit(kip.request("digits", {"pixels": images}))
               for _ in range(count)]
    results = await asyncio.wait_for(asyncio.gather(*futures), 600)
    elapsed = time.perf_counter() - started
    spent = meter.stop()
    loop_us = loop.stop()["worker digits"] / count
    _all_ok(results)
    inference_ms = sum(r.timings.inference_ms / max(1, r.batch_size) * rows for r in results)
    per_request = {n: us / count for n, us in spent.items()}
    onnx_us = raw.cpu_us(call_sizes(results, rows)) / count
    total = sum(per_request.values())
    return {"requests": count, "rows": rows, "requests_per_s": count / elapsed,
            "cpu_us_per_request": per_request | {"all": total},
            "cpu_us_per_row": {n: us / rows for n, us in per_request.items()}
            | {"all": total / rows},
            "inference_wall_us_per_request": inference_ms * 1000 / count,
            "onnx_runtime_cpu_us_per_request": onnx_us,
            # CPU minus raw ONNX Runtime's for the same calls: what kip costs around its
            # run (the session's joining and splitting of rows included).
            "outside_inference_us_per_request": {
                "worker digits": per_request["worker digits"] - onnx_us,
                "all": total - onnx_us},
            # The worker's main thread: fetching, checking, answering, signing and
            # committing; not the inference thread (ONNX Runtime's run, and joining and
            # splitting rows) nor ONNX Runtime's own threads.
            "worker_event_loop_us_per_request": {"worker digits": loop_us}}


def call_sizes(results: list[InferenceResult], rows: int) -> dict[int, int]:
    """How many inference calls of each size (rows per call) served ``results``, each
    of ``rows`` rows: a result's ``batch_size`` is its call's rows."""
    share: dict[int, float] = {}
    for r in results:
        share[r.batch_size] = share.get(r.batch_size, 0.0) + rows / r.batch_size
    return {size: max(1, round(calls)) for size, calls in share.items()}


class RawDigits:
    """The digits model in an ONNX Runtime session of this process, made as a worker
    makes its own (every core, no spinning): the CPU its run takes for given calls."""

    def __init__(self, stack: DevStack) -> None:
        session = ModelSession(stack.registry.load_alias("digits"), device="cpu")
        self.session, self.outputs = session.session, session.output_names
        self.input = session.session.get_inputs()[0].name

    def cpu_us(self, calls: dict[int, int]) -> float:
        """CPU µs of ``calls`` (count by rows per call), each size run once first."""
        spent = 0.0
        for size, times in calls.items():
            feed = {self.input: np.random.default_rng(size).random((size, 64), np.float32)}
            self.session.run(self.outputs, feed)
            started = time.process_time()
            for _ in range(times):
                self.session.run(self.outputs, feed)
            spent += time.process_time() - started
        return spent * 1e6


def _all_ok(results: list[InferenceResult]) -> None:
    bad = [r for r in results if r.status != "ok"]
    if bad:
        hint = ("; fewer in flight (--requests, --batched) fit this machine's wait budget"
                if bad[0].error and bad[0].error.code == "OVERLOADED" else "")
        raise RuntimeError(f"{len(bad)} requests did not succeed, e.g. {bad[0].error}{hint}")


async def sequential(kip: KipClient, stack: DevStack, count: int, pids: dict[str, int],
                     warm_up: int) -> tuple[dict, dict]:
    """Wall time and stages of ``count`` interactive MiniLM requests one at a time, and
    raw ONNX Runtime on the same inputs; and each process's CPU µs per request over
    them (set beside the floor's per trip, it shows where the two part ways). After
    ``warm_up`` unmeasured ones (as the floor discards its first trips): the interactive
    class's first request makes the pipeline claim its input partition, fencing and
    reading back admitted ids, and the broker compiles the path's code
    (``SEQUENTIAL_WARM_UP``); both are start-up costs, not the unloaded latency (c) is
    after."""
    for text in sentences(warm_up, seed=2):
        _all_ok([await kip.infer("minilm", {"text": [text]}, priority="interactive")])
    texts = sentences(count)
    stages: dict[str, list[float]] = {k: [] for k in (
        "client_wall", "added_over_inference", "admission", "transport", "batch_wait",
        "inference", "commit_and_return")}
    meter = CpuMeter(pids)
    meter.start()
    for text in texts:
        started = time.perf_counter()
        result = await kip.infer("minilm", {"text": [text]}, priority="interactive")
        wall = (time.perf_counter() - started) * 1000
        received = now_ms()
        _all_ok([result])
        t = result.timings
        stages["client_wall"].append(wall)
        stages["added_over_inference"].append(wall - t.inference_ms)
        stages["admission"].append(t.admission_ms)
        stages["transport"].append(t.queue_ms)
        stages["batch_wait"].append(t.batch_wait_ms)
        stages["inference"].append(t.inference_ms)
        stages["commit_and_return"].append(
            received - t.inference_started_at_ms - t.inference_ms)
    cpu = {name: us / count for name, us in meter.stop().items()}
    out = {k: _p50_p99(v) for k, v in stages.items()}
    out["raw_onnx_runtime"] = _p50_p99(_raw_ms(stack, texts))
    return out, cpu


def _raw_ms(stack: DevStack, texts: list[str]) -> list[float]:
    session = ModelSession(stack.registry.load_alias("minilm"), device="cpu")
    session.run([[Tensor.text("text", [texts[0]])]])
    times = []
    for text in texts:
        started = time.perf_counter()
        session.run([[Tensor.text("text", [text])]])
        times.append((time.perf_counter() - started) * 1000)
    return times


def _p50_p99(values: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(values, 50)),
            "p99_ms": float(np.percentile(values, 99))}


async def _floors(stack: DevStack, args, broker_pid: int) -> dict:
    async with dev_client(stack) as kip:   # a real request message as the payload
        payload = encode(kip.request("digits", {"pixels": np.zeros((1, 64), np.float32)}))
    retries = floors.ProduceRetries()
    meter = CpuMeter({"broker": broker_pid, "hops and client": os.getpid()})
    trips = await floors.two_hop_round_trip(stack.kafka, payload, args.sequential, retries,
                                            meter)
    trip = _p50_p99(trips) | {"trips": len(trips), "produce_retries": retries.count}
    around = await _around_inference(stack, args.sequential, floors.two_hop_around,
                                     broker_pid)
    faust_first = await floors.faust_first_round_trip(stack.kafka, payload, args.sequential)
    shape = await _around_inference(stack, args.sequential, floors.kips_shape_round_trip,
                                    broker_pid)
    faust_us = await floors.faust_consume_cpu(stack.kafka, payload, args.floor_events)
    return {"two_hop_round_trip": trip, "faust_consume_cpu_us_per_event": faust_us,
            "two_hop_cpu_us_per_trip": {k: us / len(trips) for k, us in meter.spent.items()},
            "two_hop_around_inference": around,
            "two_hop_faust_first": _p50_p99(faust_first) | {"trips": len(faust_first)},
            "two_hop_shape_of_kip": shape}


async def _around_inference(stack: DevStack, count: int, floor, broker_pid: int) -> dict:
    """``floor``'s two hops (``floors.two_hop_around`` or ``kips_shape_round_trip``) with
    raw ONNX Runtime inferring (c)'s texts in the second, as (c) paces kip: what they add
    over that inference, the inference, the round trip itself (set beside (c)'s client
    wall time: kip's inference, slower than the floor's, counts there too), and the
    broker's CPU per trip (beside its CPU per (c) request)."""
    session = ModelSession(stack.registry.load_alias("minilm"), device="cpu")

    def infer(value: bytes) -> bytes:
        session.run([[Tensor.text("text", [value.decode()])]])
        return value

    infer(b"warm")
    meter = CpuMeter({"broker": broker_pid})
    trips = await floor(stack.kafka, [t.encode() for t in sentences(count)], infer,
                        meter=meter)
    return {"added": _p50_p99([wall - spent for wall, spent in trips]),
            "broker_cpu_us_per_trip": meter.spent["broker"] / len(trips),
            "inference": _p50_p99([spent for _, spent in trips]),
            "wall": _p50_p99([wall for wall, _ in trips]), "trips": len(trips)}


async def _audit_chains(stack: DevStack) -> dict:
    from kip.audit.chains import ChainCheck
    from kip.audit.reading import kafka_records
    from kip.transport.outputs import Chaining, Record

    found = [r async for r in kafka_records(stack.kafka, stack.names, 0)]
    check = ChainCheck(ResultKeys(keys=stack.result_keys()).verifier())
    started = time.process_time()
    for r in found:
        check.add(r.partition, r.offset, r.value, r.headers)
    summary = check.finish()
    verify_us = (time.process_time() - started) * 1e6 / len(found)
    signer = stack.settings.sealing().signer
    plain = [Record(r.topic, r.key, r.value, []) for r in found[:2000]]
    link_us = _cpu_us(lambda: Chaining("none", signer).link(ChainHead("c"), plain)) / len(plain)
    chained = _cpu_us(lambda: Chaining(stack.names.audit, signer).link(ChainHead("c"), plain))
    requests = len({orjson.loads(r.value)["request_id"] for r in found})
    return {"records": len(found), "requests": requests, "seals": summary.sealed,
            "broken_links": len(summary.problems),
            "link_us_per_record": chained / len(plain) - link_us,
            "seal_us_per_transaction": _cpu_us(lambda: signer.signature(b"x" * 82), 2000),
            "verify_us_per_record": verify_us}


def _cpu_us(work, repeat: int = 1) -> float:
    started = time.process_time()
    for _ in range(repeat):
        work()
    return (time.process_time() - started) * 1e6 / repeat
