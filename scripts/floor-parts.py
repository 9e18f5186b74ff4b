"""The two-hop floor of ``kip bench cost`` (d), and what each part of kip's shape adds to
it, on a broker of its own with nothing else running:

- ``in process``: the floor as (d) measures it, both aiokafka hops in the client's process;
- ``own process``: the first hop in a process of its own, as kip's stages are;
- ``faust``: the first hop a bare faust agent in a process of its own (stock faust);
- ``faust, kip's consumer``: the same with kip's pipeline's faust consumer (its fetches on
  the agents' loop, the lean drain: pipeline/app.py);
- ``side records``: both hops in process, each also writing two side records per record
  in its transaction, as kip's audit and admitted-ids records ride its stages'.

    .venv/bin/python scripts/floor-parts.py [ROUNDS] [TRIPS]

After a warm-up of the broker, rounds alternate the variants; each prints its p50 and p99, then the median p50 of each
variant and its ratio to the in-process floor's. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kip.devkit import floors   # noqa: E402
from kip.devkit.own_stack import _own_broker  # noqa: E402
from kip.transport.clients import KafkaConnection   # noqa: E402

VARIANTS = ("in process", "own process", "faust", "faust, kip's consumer", "side records")
WARM_UP_TRIPS = 20   # each variant's: its hops' first transactions and fetches
BROKER_WARM_UP = 500   # a fresh broker's first trips run slow (its JIT warms up)
PAYLOAD = b"x" * 600   # about a single-row request's size


async def trips(kafka: KafkaConnection, variant: str, count: int) -> list[float]:
    run = f"parts-{uuid.uuid4().hex[:8]}"
    a, b, c = (f"{run}.{n}" for n in "abc")
    sides = (f"{run}.s1", f"{run}.s2") if variant == "side records" else ()
    await floors._topics(kafka, [a, b, c, *sides])
    async with _first_hop(kafka, variant, a, b, f"{run}-1", sides), \
            floors._running(floors._hop(kafka, b, c, f"{run}-2", sides=sides)), \
            floors._reader(kafka, c) as (producer, consumer):
        for _ in range(WARM_UP_TRIPS):
            await asyncio.wait_for(floors._one_trip(producer, consumer, a, PAYLOAD),
                                   floors.FIRST_TRIP_S)
        return [(await floors._one_trip(producer, consumer, a, PAYLOAD))[0]
                for _ in range(count)]


def _first_hop(kafka: KafkaConnection, variant: str, source: str, target: str, group: str,
               sides: tuple[str, ...]):
    if variant.startswith("faust"):
        return floors._faust_hop(kafka, source, target, group,
                                 kip_consumer=variant != "faust")
    if variant == "own process":
        return _hop_process(kafka, source, target, group)
    return floors._running(floors._hop(kafka, source, target, group, sides=sides))


@asynccontextmanager
async def _hop_process(kafka: KafkaConnection, source: str, target: str, group: str):
    with tempfile.TemporaryDirectory(prefix="kip-parts-") as folder:
        hop = json.dumps({"kafka": str(floors._connection_file(kafka, Path(folder))),
                          "source": source, "target": target, "group": group})
        proc = await asyncio.create_subprocess_exec(sys.executable, __file__, "--hop", hop)
        try:
            yield lambda: "the hop's process ended"
        finally:
            proc.kill()
            await proc.wait()


def _run_hop(settings: dict) -> None:
    kafka = KafkaConnection.model_validate_json(Path(settings["kafka"]).read_bytes())
    with floors.ProduceRetries():
        asyncio.run(floors._hop(kafka, settings["source"], settings["target"],
                                settings["group"]))


async def main(rounds: int, count: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kip-parts-") as home:
        broker = _own_broker(Path(home), "plaintext")
        await asyncio.to_thread(broker.start, log=lambda *_: None)
        try:
            kafka = KafkaConnection(bootstrap=broker.bootstrap)
            p50s: dict[str, list[float]] = {v: [] for v in VARIANTS}
            with floors.ProduceRetries():
                print(f"warming the broker up: {BROKER_WARM_UP} trips", flush=True)
                await trips(kafka, "in process", BROKER_WARM_UP)
                for r in range(rounds):
                    for variant in VARIANTS:
                        q = statistics.quantiles(await trips(kafka, variant, count), n=100)
                        p50s[variant].append(q[49])
                        print(f"round {r + 1}/{rounds}  {variant:22} p50 {q[49]:5.2f} ms  "
                              f"p99 {q[98]:5.2f} ms", flush=True)
            base = statistics.median(p50s["in process"])
            for variant, values in p50s.items():
                print(f"{variant:22} median p50 {statistics.median(values):5.2f} ms: "
                      f"{statistics.median(values) / base:.2f}x; rounds "
                      + " / ".join(f"{v:.2f}" for v in values))
        finally:
            await asyncio.to_thread(broker.stop)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hop"]:
        _run_hop(json.loads(sys.argv[2]))
    else:
        args = [int(a) for a in sys.argv[1:3]]
        asyncio.run(main(*(args + [6, 200][len(args):])))
