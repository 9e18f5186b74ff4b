"""``kip bench flood``: one tenant floods the front door while another sends interactive
requests; the victim's latency against its latency alone.

On a kip of its own (on a secured bus by default: the broker's quotas are per
principal, and a plain bus has none), with two tenants: the victim ``demo`` and the
flooder ``flood``, which has a kip quota (``--flood-quota`` requests/s, ``kip tenants
set``) and a broker quota (``--flood-broker-bytes`` per second and
``--flood-broker-percent`` of a broker thread, ``kip acls apply``). The flooder's
request partition is its own (or, with ``--same-partition``, the victim's).

1. The victim sends ``--victim-rate`` interactive digits requests/s for ``--seconds``
   alone.
2. Then the same while the flooder, from a process of its own, sends as fast as it
   can for ``--seconds``: signed interactive requests of its own, on its partition,
   and unsigned messages of ``--junk-bytes`` keyed with the victim's name, onto the
   victim's partition.

Prints the victim's p50/p99 in each phase and their ratio, its failed or expired
requests, and what became of the flood: the flooder's signed requests by ending, its
unsigned ones answered (UNAUTHENTICATED, on the shared results topic) or shed (the
pipeline's shed records), and the bytes per second the broker let it send. Verdict:
victim p99 under the flood at most ``--max-ratio`` times its p99 alone, none of its
requests failed or expired, and the flooder's signed requests past its quota ended
``QUOTA_EXCEEDED``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from kip.devkit.arguments import above_zero, count
from kip.devkit.bursts import INPUTS
from kip.devkit.stack import ClientSpec, DevStack, tenant_spec
from kip.devkit.own_stack import BUSES, own_stack
from kip.tenants import set_quota
from kip.pipeline.access import AccessConfig, ApiKey, BrokerQuota, TenantPolicy
from kip.runtime import collector
from kip.runtime.settings import KipSettings
from kip.schemas import AuditRecord, decode
from kip.schemas.codec import REQUEST_ID_HEADER
from kip.transport.partitioning import key_partition
from kip.transport.reading import records_since

VICTIM, FLOODER = ("demo", "demo-key"), ("flood", "flood-key")
REQUEST_PARTITIONS = 3   # the catalogue's default


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=above_zero, default=30.0, help="each phase")
    p.add_argument("--victim-rate", type=above_zero, default=10.0,
                   help="the victim's interactive requests/s")
    p.add_argument("--flood-quota", type=above_zero, default=2.0,
                   help="the flooder's kip quota, requests/s")
    p.add_argument("--flood-broker-bytes", type=count, default=1024 * 1024,
                   help="the flooder's broker quota (producer_byte_rate), bytes/s")
    p.add_argument("--flood-broker-percent", type=above_zero, default=10.0,
                   help="the flooder's broker quota (request_percentage)")
    p.add_argument("--junk-bytes", type=count, default=16 * 1024,
                   help="each unsigned message the flooder sends")
    p.add_argument("--same-partition", action="store_true",
                   help="the flooder's requests on the victim's request partition")
    p.add_argument("--bus", choices=BUSES, default="scram")
    p.add_argument("--max-ratio", type=above_zero, default=2.0,
                   help="the verdict's bound on victim p99 flooded / alone")
    p.add_argument("--json", action="store_true")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir)


def run(args) -> int:
    report = asyncio.run(measure(args))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["passed"] else 1


def access(args) -> AccessConfig:
    """The victim, placed by Kafka's default partitioner, and the flooder, on a request
    partition of its own unless ``--same-partition``."""
    victims = key_partition(VICTIM[0].encode(), list(range(REQUEST_PARTITIONS)))
    flooders = victims if args.same_partition else (victims + 1) % REQUEST_PARTITIONS
    quota = BrokerQuota(producer_bytes_per_s=args.flood_broker_bytes,
                        request_percentage=args.flood_broker_percent)
    return AccessConfig(
        keys={VICTIM[1]: ApiKey(tenant=VICTIM[0], secret=os.urandom(16).hex()),
              FLOODER[1]: ApiKey(tenant=FLOODER[0], secret=os.urandom(16).hex())},
        tenants={VICTIM[0]: TenantPolicy(models=["*"]),
                 FLOODER[0]: TenantPolicy(models=["*"], request_partition=flooders,
                                          broker_quota=quota)})


async def measure(args) -> dict:
    async with own_stack("flood", args.registry, bus=args.bus, log=_quiet,
                         access=access(args)) as stack:
        await set_quota(stack.connection("operator"), stack.names, FLOODER[0], None,
                        {"requests_per_s": args.flood_quota,
                         "burst_requests": args.flood_quota})
        stack.start_services(log=_quiet)
        victim = tenant_spec(stack, VICTIM[1])
        async with victim.client() as kip:
            await kip.infer("digits", INPUTS["digits"], timeout_s=120)   # every stage warm
            sender = Victim(kip, args.victim_rate)
            ticker = asyncio.create_task(sender.run())
            await asyncio.sleep(args.seconds)
            since_ms = int(time.time() * 1000)
            flood = await flood_from_child(tenant_spec(stack, FLOODER[1]), args,
                                           _partition_of(VICTIM[0], stack))
            ticker.cancel()
            await sender.drain()
        shed = await _shed_since(stack, since_ms)
    return _report(args, sender, flood, shed)


class Victim:
    """Interactive requests at a steady rate: when each was sent (Unix s), its latency
    (ms) or how it ended otherwise."""

    def __init__(self, kip, rate: float) -> None:
        self.kip, self.rate = kip, rate
        self.samples: list[tuple[float, float | None, str | None]] = []
        self.stages: dict[float, dict] = {}   # sent -> its result's timings
        self.tasks: set[asyncio.Task] = set()

    async def run(self) -> None:
        while True:
            task = asyncio.create_task(self._one())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            await asyncio.sleep(1 / self.rate)

    async def drain(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _one(self) -> None:
        sent = time.time()
        try:
            result = await self.kip.infer("digits", INPUTS["digits"], priority="interactive",
                                          timeout_s=30)
        except (TimeoutError, ConnectionError) as err:
            self.samples.append((sent, None, type(err).__name__))
            return
        ending = None if result.status == "ok" else (
            result.error.code if result.error else result.status.value)
        self.samples.append((sent, (time.time() - sent) * 1000, ending))
        self.stages[sent] = result.timings.model_dump(exclude_none=True)

    def slowest(self, start_s: float, end_s: float, count: int = 3) -> list[dict]:
        """The ``count`` slowest requests sent between two instants: when each was sent
        (s after the first instant), its latency and its stages."""
        inside = sorted((ms, sent) for sent, ms, ending in self.samples
                        if start_s <= sent < end_s and ms is not None)[-count:]
        return [{"ms": round(ms, 1), "sent_s": round(sent - start_s, 2)} | {k: round(v, 1) for k, v in self.stages[sent].items()
                                         if k.endswith("_ms") and k != "inference_started_at_ms"}
                for ms, sent in reversed(inside)]

    def between(self, start_s: float, end_s: float) -> tuple[list[float], Counter]:
        """Latencies of the requests sent between two instants, and the other endings."""
        inside = [(ms, ending) for sent, ms, ending in self.samples if start_s <= sent < end_s]
        return ([ms for ms, ending in inside if ending is None],
                Counter(ending for _, ending in inside if ending is not None))


def _partition_of(tenant: str, stack: DevStack) -> int:
    policy = AccessConfig.from_file(stack.access_file).tenants[tenant]
    if policy.request_partition is not None:
        return policy.request_partition % REQUEST_PARTITIONS
    return key_partition(tenant.encode(), list(range(REQUEST_PARTITIONS)))


async def flood_from_child(spec: ClientSpec, args, victim_partition: int) -> dict:
    """``flood`` in a process of its own (a producer elsewhere, at full speed)."""
    pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"))
    try:
        return await asyncio.get_running_loop().run_in_executor(
            pool, _flood_in_child, spec, args.seconds, args.junk_bytes, victim_partition)
    finally:
        await asyncio.to_thread(pool.shutdown)


def _flood_in_child(spec: ClientSpec, seconds: float, junk_bytes: int,
                    victim_partition: int) -> dict:
    collector.settle()
    return asyncio.run(flood(spec, seconds, junk_bytes, victim_partition))


async def flood(spec: ClientSpec, seconds: float, junk_bytes: int, victim_partition: int
                ) -> dict:
    """As fast as the client goes for ``seconds``: a signed interactive request of the
    flooder's own, then an unsigned message keyed as the victim onto its partition; then
    up to 30 s for the signed ones' results."""
    junk, victim = os.urandom(junk_bytes), VICTIM[0].encode()
    pending: list[asyncio.Future] = []
    unsigned = sent_bytes = 0
    async with spec.client() as kip:
        topic, started, began_at = kip.names.requests("interactive"), time.monotonic(), time.time()
        while time.monotonic() - started < seconds:
            request = kip.request("digits", INPUTS["digits"], priority="interactive")
            pending.append(await kip.submit(request))
            await kip.send_raw(topic, junk, key=victim, partition=victim_partition,
                               headers=[(REQUEST_ID_HEADER, f"junk-{unsigned}".encode())])
            unsigned += 1
            sent_bytes += junk_bytes + 1024
        elapsed = time.monotonic() - started
        await kip.flush()
        done, _ = await asyncio.wait(pending, timeout=30)
    endings = Counter(_ending(f) for f in done)
    return {"signed": len(pending), "unsigned": unsigned, "seconds": elapsed,
            "from_s": began_at, "to_s": began_at + elapsed,
            "bytes_per_s": sent_bytes / elapsed, "signed_endings": dict(endings),
            "signed_unanswered": len(pending) - len(done)}


def _ending(fut: asyncio.Future) -> str:
    if fut.exception() is not None:
        return type(fut.exception()).__name__
    result = fut.result()
    return result.error.code if result.error else result.status.value


async def _shed_since(stack: DevStack, since_ms: int) -> int:
    """Unsigned messages the pipeline shed since ``since_ms``, by its shed records."""
    shed = 0
    async for record in records_since(stack.kafka, stack.names.audit, since_ms,
                                      what="audit topic"):
        audit = decode(AuditRecord, record.value)
        if audit.decision == "shed":
            shed += int(re.match(r"(\d+) ", audit.reason).group(1))
    return shed


def _report(args, victim: Victim, flood: dict, shed: int) -> dict:
    """The victim alone (before the flood) and flooded (while the flooder sent)."""
    alone, failed_alone = victim.between(0, flood["from_s"])
    flooded, failed = victim.between(flood["from_s"], flood["to_s"])
    p99_alone, p99_flooded = _pct(alone, 99), _pct(flooded, 99)
    ratio = p99_flooded / p99_alone if p99_alone else float("inf")
    quota_ok = flood["signed_endings"].get("ok", 0)
    allowed = args.flood_quota * (flood["seconds"] + 30) + args.flood_quota
    lost = sum(failed.values()) + sum(failed_alone.values())
    passed = ratio <= args.max_ratio and lost == 0 and quota_ok <= allowed and bool(flooded)
    return {"bus": args.bus, "same_partition": args.same_partition,
            "victim": {"alone": {"requests": len(alone), "p50_ms": _pct(alone, 50),
                                 "p99_ms": p99_alone},
                       "flooded": {"requests": len(flooded), "p50_ms": _pct(flooded, 50),
                                   "p99_ms": p99_flooded},
                       "p99_ratio": ratio, "failed": lost,
                       "slowest_flooded": victim.slowest(flood["from_s"], flood["to_s"]),
                       "failures": dict(failed + failed_alone)},
            "flood": flood | {"unsigned_shed": shed,
                              "unsigned_answered": flood["unsigned"] - shed},
            "passed": passed}


def render(report: dict) -> str:
    v, f = report["victim"], report["flood"]
    lines = [
        f"kip bench flood on {report['bus']} "
        f"({'the victim' if report['same_partition'] else 'its own'} request partition)",
        f"victim alone:   {v['alone']['requests']} requests, p50 {v['alone']['p50_ms']:.1f} "
        f"ms, p99 {v['alone']['p99_ms']:.1f} ms",
        f"victim flooded: {v['flooded']['requests']} requests, p50 "
        f"{v['flooded']['p50_ms']:.1f} ms, p99 {v['flooded']['p99_ms']:.1f} ms "
        f"({v['p99_ratio']:.2f}x); failed or expired: {v['failed']} {v['failures'] or ''}",
        f"flooder: {f['signed']} signed and {f['unsigned']} unsigned messages in "
        f"{f['seconds']:.0f} s, {f['bytes_per_s'] / 2**20:.2f} MiB/s let through",
        f"  signed, by ending: {f['signed_endings']}"
        + (f", {f['signed_unanswered']} unanswered" if f["signed_unanswered"] else ""),
        f"  unsigned: {f['unsigned_answered']} answered UNAUTHENTICATED, "
        f"{f['unsigned_shed']} shed",
        f"verdict: {'PASS' if report['passed'] else 'FAIL'}"]
    return "\n".join(lines)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _quiet(*_) -> None:
    pass

