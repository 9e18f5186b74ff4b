"""How ``kip bench cost`` prints its report (devkit/bench_cost.py measures it)."""

from __future__ import annotations


def _floor_lines(d: dict, added_p50_ms: float, wall_p50_ms: float) -> list[str]:
    trip, around = d["two_hop_round_trip"], d["two_hop_around_inference"]
    faust_first = d["two_hop_faust_first"]
    return [f"\n(d) floors: two bare transactional hops p50 {trip['p50_ms']:.1f} ms, "
            f"p99 {trip['p99_ms']:.1f} ms, {trip['produce_retries']} produce retries in "
            f"{trip['trips']} trips and their warm-up; bare faust consumer "
            f"{d['faust_consume_cpu_us_per_event']:.0f} µs CPU/event",
            f"    kip's added latency p50 / floor p50: {added_p50_ms / trip['p50_ms']:.2f}x",
            f"    CPU µs per trip: {_cpu_line(d['two_hop_cpu_us_per_trip'])}",
            f"  the same hops around raw ONNX Runtime (the second infers (c)'s texts inline): "
            f"added p50 {around['added']['p50_ms']:.1f} ms, p99 {around['added']['p99_ms']:.1f} "
            f"ms over inference p50 {around['inference']['p50_ms']:.1f} ms; broker "
            f"{around['broker_cpu_us_per_trip']:.0f} µs CPU per trip",
            f"    kip's added latency p50 / this p50: "
            f"{added_p50_ms / around['added']['p50_ms']:.2f}x",
            f"  the same hops, the first a bare faust agent (one event at a time, in a "
            f"process of its own): p50 {faust_first['p50_ms']:.1f} ms, p99 "
            f"{faust_first['p99_ms']:.1f} ms",
            f"    kip's added latency p50 / this p50: "
            f"{added_p50_ms / faust_first['p50_ms']:.2f}x",
            *_shape_lines(d["two_hop_shape_of_kip"], added_p50_ms, wall_p50_ms)]


def _shape_lines(shape: dict, added_p50_ms: float, wall_p50_ms: float) -> list[str]:
    return [f"  the floor of kip's shape (the first hop a bare faust agent, side records "
            f"in each transaction as kip's audit records ride its stages', the second hop "
            f"inferring in a thread): added p50 "
            f"{shape['added']['p50_ms']:.1f} ms, p99 {shape['added']['p99_ms']:.1f} ms over "
            f"inference p50 {shape['inference']['p50_ms']:.1f} ms; broker "
            f"{shape['broker_cpu_us_per_trip']:.0f} µs CPU per trip",
            f"    kip's added latency p50 / this p50: "
            f"{added_p50_ms / shape['added']['p50_ms']:.2f}x",
            f"    kip's client wall p50 / this round trip's p50 ({shape['wall']['p50_ms']:.1f}"
            f" ms, inference included): {wall_p50_ms / shape['wall']['p50_ms']:.2f}x"]


def _cpu_line(cpu: dict[str, float]) -> str:
    return ", ".join(f"{name} {us:.0f}" for name, us in cpu.items())


def render(report: dict) -> str:
    lines = [f"bus: {report['bus']}; broker JVM: {' '.join(report['broker_jvm_options'])}"]
    for key, title in (("a_single_row", "(a) single-row requests, all in flight"),
                       ("b_32_rows", "(b) 32-row requests, all in flight")):
        r = report[key]
        lines.append(f"\n{title}: {r['requests']} requests, {r['requests_per_s']:.0f}/s; "
                     f"inference wall {r['inference_wall_us_per_request']:.0f} µs/request, "
                     f"raw ONNX Runtime's CPU for the same calls "
                     f"{r['onnx_runtime_cpu_us_per_request']:.0f} µs/request")
        lines.append(f"  {'process':16} {'CPU µs/request':>15} {'CPU µs/row':>11}")
        for name, us in r["cpu_us_per_request"].items():
            lines.append(f"  {name:16} {us:15.0f} {r['cpu_us_per_row'][name]:11.1f}")
        outside = r["outside_inference_us_per_request"]
        lines.append(f"  outside ONNX Runtime's run (CPU minus raw ONNX Runtime's): worker "
                     f"digits {outside['worker digits']:.0f} µs/request, all "
                     f"{outside['all']:.0f} µs/request, {outside['all'] / r['rows']:.1f} "
                     "µs/row")
        loop = r["worker_event_loop_us_per_request"]["worker digits"]
        lines.append(f"  worker digits' event loop (its main thread): {loop:.0f} µs/request")
    c = report["c_sequential"]
    lines.append("\n(c) interactive MiniLM, one at a time (ms):")
    for stage, figures in c.items():
        lines.append(f"  {stage:22} p50 {figures['p50_ms']:7.1f}   p99 {figures['p99_ms']:7.1f}")
    lines.append(f"  CPU µs per request: {_cpu_line(report['c_cpu_us_per_request'])}")
    lines += _floor_lines(report["d_floors"], c["added_over_inference"]["p50_ms"],
                          c["client_wall"]["p50_ms"])
    e = report["e_audit_chains"]
    per_request = (e["records"] * e["link_us_per_record"] + e["seals"]
                   * e["seal_us_per_transaction"]) / e["requests"]
    lines.append(f"\n(e) audit chains: {e['records']} records, {e['seals']} seals for "
                 f"{e['requests']} requests; link {e['link_us_per_record']:.1f} µs/record, "
                 f"seal {e['seal_us_per_transaction']:.1f} µs/transaction: "
                 f"{per_request:.1f} µs CPU/request in the stages; verify "
                 f"{e['verify_us_per_record']:.1f} µs/record; broken links "
                 f"{e['broken_links']}")
    return "\n".join(lines)
