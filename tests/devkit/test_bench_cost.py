"""``kip bench cost`` on a small scale: every process charged, every stage and floor
measured (the figures themselves are for docs/benchmarks.md, not for a test)."""

from __future__ import annotations

import argparse
import asyncio
import os

from kip.devkit import bench_cost, floors
from kip.devkit.cpu import CpuMeter, cpu_us, main_thread_cpu_us


def test_the_cpu_meter_charges_a_busy_process_and_not_an_idle_one():
    meter = CpuMeter({"me": os.getpid()})
    meter.start()
    sum(i * i for i in range(2_000_000))
    assert meter.stop()["me"] > 0 and cpu_us(os.getpid()) > 0


def test_the_main_thread_is_charged_for_its_own_work_and_not_another_threads():
    import threading
    me = os.getpid()
    whole, main = CpuMeter({"me": me}), CpuMeter({"me": me}, read=main_thread_cpu_us)
    whole.start()
    main.start()
    worker = threading.Thread(target=lambda: sum(i * i for i in range(3_000_000)))
    worker.start()
    worker.join()
    assert main.stop()["me"] < whole.stop()["me"] / 2


def test_the_broker_is_warmed_up_for_what_each_scenario_runs():
    """Its C2 compiler is still at work after 6,000 requests all in flight, and (c)'s
    path, one request at a time, is compiled too before it is measured."""
    p = argparse.ArgumentParser()
    bench_cost.add_arguments(p)
    args = p.parse_args([])
    assert (args.warm_up, args.sequential_warm_up) == (30000, 2500)
    assert p.parse_args(["--sequential-warm-up", "0"]).sequential_warm_up == 0


def test_the_warm_up_goes_in_rounds_no_bigger_than_a():
    assert bench_cost.warm_up_rounds(6000, 3000) == [3000, 3000]
    assert bench_cost.warm_up_rounds(7000, 3000) == [3000, 3000, 1000]
    assert bench_cost.warm_up_rounds(20, 40) == [20]
    assert bench_cost.warm_up_rounds(0, 3000) == []


def test_call_sizes_count_each_call_once_from_its_results_shares():
    from types import SimpleNamespace as Result
    two_calls_of_3 = [Result(batch_size=3)] * 6
    assert bench_cost.call_sizes(two_calls_of_3 + [Result(batch_size=1)], 1) == {3: 2, 1: 1}
    assert bench_cost.call_sizes([Result(batch_size=64)] * 4, 32) == {64: 2}


def test_the_floors_produce_retries_are_counted_and_not_printed(caplog):
    """aiokafka's sender warns once per retried produce: the floor's hops take some
    (devkit/floors.py), counted for the report instead of printed mid-run."""
    import logging
    sender = logging.getLogger(floors.ProduceRetries.LOGGER)
    caplog.set_level(logging.WARNING, logger=floors.ProduceRetries.LOGGER)
    with floors.ProduceRetries() as retries:
        sender.warning("Got error produce response on %s, retrying. Error: %s", "tp", "NER")
        sender.warning("Got error produce response on %s, retrying. Error: %s", "tp", "NER")
        sender.warning("something else")
    sender.warning("Got error produce response on %s, retrying. Error: %s", "tp", "after")
    assert retries.count == 2
    assert [r.getMessage() for r in caplog.records] == [
        "something else", "Got error produce response on tp, retrying. Error: after"]


def test_a_small_cost_run_reports_every_process_stage_and_floor(registry, capsys):
    args = argparse.Namespace(requests=40, batched=10, sequential=10, floor_events=300, warm_up=20,
                              sequential_warm_up=20,
                              registry=registry.root, json=True, bus="plaintext")
    report = asyncio.run(bench_cost.measure(args))
    assert report["bus"] == "PLAINTEXT"
    assert "-XX:TieredStopAtLevel=1" not in report["broker_jvm_options"]   # C2, as in production
    assert "broker JVM: -Xms512m" in bench_cost.render(report)
    a = report["a_single_row"]
    assert set(a["cpu_us_per_request"]) == {"broker", "pipeline", "worker minilm",
                                            "worker digits", "client", "all"}
    assert a["cpu_us_per_request"]["all"] > 0 and report["b_32_rows"]["rows"] == 32
    outside = a["outside_inference_us_per_request"]
    assert a["onnx_runtime_cpu_us_per_request"] > 0
    assert outside["all"] == a["cpu_us_per_request"]["all"] - a["onnx_runtime_cpu_us_per_request"]
    assert outside["worker digits"] < a["cpu_us_per_request"]["worker digits"]
    loop = a["worker_event_loop_us_per_request"]["worker digits"]
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")   # /proc counts CPU in ticks, read apart
    assert 0 <= loop <= a["cpu_us_per_request"]["worker digits"] + 2 * tick_us / args.requests
    stages = report["c_sequential"]
    assert {"admission", "transport", "batch_wait", "inference", "commit_and_return",
            "raw_onnx_runtime"} <= set(stages)
    assert all(v["p50_ms"] >= 0 for v in stages.values())
    sequential_cpu = report["c_cpu_us_per_request"]
    assert set(sequential_cpu) == {"broker", "pipeline", "worker minilm", "worker digits",
                                   "client"}
    assert sequential_cpu["broker"] > 0 and min(sequential_cpu.values()) >= 0
    d = report["d_floors"]
    assert set(d["two_hop_cpu_us_per_trip"]) == {"broker", "hops and client"}
    assert d["two_hop_cpu_us_per_trip"]["broker"] > 0
    around = d["two_hop_around_inference"]
    assert around["trips"] == args.sequential
    assert around["inference"]["p50_ms"] > 0 and around["added"]["p50_ms"] > 0
    assert d["two_hop_round_trip"]["p50_ms"] > 0 and d["faust_consume_cpu_us_per_event"] > 0
    assert d["two_hop_round_trip"]["trips"] == args.sequential
    assert d["two_hop_round_trip"]["produce_retries"] >= 0
    assert d["two_hop_faust_first"]["trips"] == args.sequential
    assert d["two_hop_faust_first"]["p50_ms"] > 0
    shape = d["two_hop_shape_of_kip"]
    assert shape["trips"] == args.sequential
    assert shape["inference"]["p50_ms"] > 0 and shape["added"]["p50_ms"] > 0
    assert shape["wall"]["p50_ms"] > shape["added"]["p50_ms"]
    assert shape["broker_cpu_us_per_trip"] > 0 and around["broker_cpu_us_per_trip"] > 0
    assert "the floor of kip's shape" in bench_cost.render(report)
    assert "floor p50" in bench_cost.render(report)
    assert "kip's client wall p50 / this round trip's p50" in bench_cost.render(report)
    assert "CPU µs per trip: broker" in bench_cost.render(report)
    assert "the first a bare faust agent" in bench_cost.render(report)
    assert floors.FAUST_TAKE == 500


def test_on_the_secured_bus_every_process_and_floor_connects_over_tls(registry):
    """``--bus mtls``: the broker has no plaintext listener, so a run that completes
    connected kip's processes and the client with their certificates and both floors
    over TLS."""
    args = argparse.Namespace(requests=20, batched=4, sequential=4, floor_events=200, warm_up=0,
                              sequential_warm_up=2,
                              registry=registry.root, json=True, bus="mtls")
    report = asyncio.run(bench_cost.measure(args))
    assert report["bus"] == "SSL"
    assert report["a_single_row"]["cpu_us_per_request"]["broker"] > 0
    d = report["d_floors"]
    assert d["two_hop_round_trip"]["p50_ms"] > 0 and d["faust_consume_cpu_us_per_event"] > 0
    assert d["two_hop_faust_first"]["p50_ms"] > 0
    assert d["two_hop_shape_of_kip"]["added"]["p50_ms"] > 0
    assert bench_cost.render(report).startswith("bus: SSL")


def test_the_replication_report_sets_every_broker_beside_the_one():
    from kip.devkit.replication_cost import render_replication

    def run(cpu: dict, wall: float) -> dict:
        stages = {s: {"p50_ms": wall, "p99_ms": 2 * wall} for s in (
            "client_wall", "added_over_inference", "admission", "transport",
            "commit_and_return")}
        return {"replication": "x", "a_single_row": {"requests_per_s": 100.0,
                                                     "cpu_us_per_request": cpu | {"all": 0}},
                "c_sequential": stages, "c_cpu_us_per_request": cpu}

    one = run({"broker": 100.0, "pipeline": 50.0}, 10.0)
    three = run({"broker 1": 120.0, "broker 2": 60.0, "broker 3": 60.0, "pipeline": 50.0}, 15.0)
    text = render_replication({"1 broker": one, "3 brokers": three})
    assert "brokers, summed" in text and "2.40x" in text   # 240 beside 100
    assert "all" in text and "1.93x" in text                # 290 beside 150
    assert "client_wall" in text and "(1.50x)" in text
