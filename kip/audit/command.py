"""``kip audit tail|explain|export|verify``: the governance topic for audit consumers.

    kip audit tail --tenant acme --code QUOTA_EXCEEDED --follow
    kip audit explain REQUEST_ID --since 2h
    kip audit export --out audit.parquet --since 24h
    kip audit verify --since 7d
    kip audit pseudonym acme     (what audit records call tenant acme, under pseudonyms)

Time ranges take Unix ms or an age (``90s``, ``15m``, ``2h``, ``7d``).
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import orjson

AGE = re.compile(r"^(\d+)([smhd])$")
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def add_command(sub) -> None:
    audit = sub.add_parser("audit", help="read the governance topic")
    actions = audit.add_subparsers(required=True, metavar="ACTION")
    tail = actions.add_parser("tail", help="audit records, filtered; --follow for new ones")
    for name in ("tenant", "model", "decision", "code"):
        tail.add_argument(f"--{name}")
    tail.add_argument("--since", default="1h", help="Unix ms or an age (default 1h)")
    tail.add_argument("--follow", action="store_true")
    tail.add_argument("--json", action="store_true", help="one JSON record per line")
    tail.set_defaults(func=_tail)
    explain = actions.add_parser("explain", help="every stage's record for one request, "
                                 "in order, in words")
    explain.add_argument("request_id")
    explain.add_argument("--since", default="24h")
    explain.set_defaults(func=_explain)
    export = actions.add_parser("export", help="a time range as JSON Lines or Parquet")
    export.add_argument("--out", type=Path, required=True, help=".jsonl or .parquet")
    export.add_argument("--since", default="24h")
    export.add_argument("--until", help="Unix ms or an age (default: now)")
    export.set_defaults(func=_export)
    verify = actions.add_parser("verify", help="check the audit records' hash chains; "
                                "exit 1 naming the first broken link")
    verify.add_argument("--since", default="0", help="Unix ms or an age (default: all)")
    verify.add_argument("--until", help="Unix ms or an age (default: the topic's end)")
    verify.add_argument("--keys", type=Path, help="trusted public keys (default "
                        "KIP_RESULT_PUBLIC_KEYS_FILE)")
    verify.add_argument("--every", type=float, metavar="S", help="verify again every S "
                        "seconds over the last --since (an age), serving the result as "
                        "gauges on KIP_METRICS_PORT (kip/audit/watch.py)")
    verify.set_defaults(func=_verify)
    pseudonym = actions.add_parser("pseudonym", help="the pseudonym audit records give a "
                                   "tenant or key id (KIP_AUDIT_PSEUDONYM_KEY_FILE)")
    pseudonym.add_argument("value", nargs="?", help="a tenant (or a key id with --kind)")
    pseudonym.add_argument("--kind", choices=["tenant", "key_id"], default="tenant")
    pseudonym.add_argument("--new-key", type=Path, metavar="PATH",
                           help="write a new pseudonym key to PATH instead")
    pseudonym.set_defaults(func=_pseudonym)


def since_ms(value: str, now_ms: int) -> int:
    """Unix ms, or an age before ``now_ms``."""
    found = AGE.match(value)
    if found:
        return now_ms - int(found.group(1)) * UNIT_MS[found.group(2)]
    if value.isdigit():
        return int(value)
    raise ValueError(f"a time is Unix ms or an age like 90s, 15m, 2h, 7d; got {value!r}")


def _context():
    from kip.runtime.settings import KipSettings
    from kip.schemas.codec import now_ms
    from kip.topics.names import TopicNames

    settings = KipSettings()
    return settings.kafka, TopicNames(settings.topic_prefix), now_ms()


def _keep_verifying(args, kafka, names, verifier, now: int) -> int:
    from kip.audit.watch import keep_verifying
    from kip.cli import run_until_signal
    from kip.runtime import metrics
    from kip.runtime.settings import KipSettings

    settings = KipSettings()
    if not settings.metrics_port:
        raise SystemExit("kip audit verify --every serves gauges: set KIP_METRICS_PORT")
    metrics.serve(settings.metrics_port, settings.metrics_host)
    window_ms = now - since_ms(args.since if args.since != "0" else "1h", now)
    run_until_signal(keep_verifying(kafka, names, verifier, window_ms, args.every))
    return 0


def _warn(problem: str) -> None:
    print(f"kip audit: a record that does not decode: {problem}", file=sys.stderr)


def _tail(args) -> int:
    from kip.audit.reading import Filter, explain, records

    kafka, names, now = _context()
    key = _pseudonym_key()
    tenant = key.of("tenant", args.tenant) if key and args.tenant else args.tenant
    wanted = Filter(tenant, args.model, args.decision, args.code)

    async def go() -> None:
        async for record in records(kafka, names, since_ms(args.since, now),
                                    follow=args.follow, on_bad=_warn):
            if wanted(record):
                print(record.model_dump_json(exclude_none=True) if args.json
                      else f"{record.request_id} | {explain([record])[1]}", flush=True)
    asyncio.run(go())
    return 0


def _explain(args) -> int:
    from kip.audit.reading import explain, trail

    kafka, names, now = _context()
    found = asyncio.run(trail(kafka, names, args.request_id, since_ms(args.since, now)))
    print("\n".join(explain(found)))
    return 0 if found else 1


def _export(args) -> int:
    from kip.audit.reading import records

    kafka, names, now = _context()
    until = since_ms(args.until, now) if args.until else None

    async def collect() -> list[dict]:
        return [r.model_dump(mode="json") async for r in records(
            kafka, names, since_ms(args.since, now), until, on_bad=_warn)]
    rows = asyncio.run(collect())
    if args.out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.Table.from_pylist([_flat(r) for r in rows]), args.out)
    else:
        args.out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    print(f"kip audit: {len(rows)} records -> {args.out}")
    return 0


def _verify(args) -> int:
    from kip.audit.reading import verify
    from kip.runtime import keys
    from kip.runtime.settings import KipSettings

    kafka, names, now = _context()
    trusted = keys.result_keys(args.keys or KipSettings().result_public_keys_file)
    if args.every:
        return _keep_verifying(args, kafka, names, trusted.verifier(), now)
    until = since_ms(args.until, now) if args.until else None
    summary = asyncio.run(verify(kafka, names, trusted.verifier(),
                                 since_ms(args.since, now), until))
    print(f"kip audit verify: {summary.records} records in {summary.chains} chains, "
          f"{summary.sealed} seals, {summary.heads} committed heads"
          + (f", {summary.unsealed_in_range} awaiting a seal after the range"
             if summary.unsealed_in_range else ""))
    for line in summary.heads_set_aside[:20]:
        print(f"kip audit verify: committed offset metadata set aside, {line}",
              file=sys.stderr)
    if summary.ok:
        print("kip audit verify: every chain holds")
        return 0
    first, *more = summary.problems
    print(f"kip audit verify: BROKEN at {names.audit}{first.where}: {first.what}",
          file=sys.stderr)
    for problem in more[:19]:
        print(f"  also {names.audit}{problem.where}: {problem.what}", file=sys.stderr)
    if len(summary.problems) > 20:
        print(f"  and {len(summary.problems) - 20} more", file=sys.stderr)
    return 1


def _pseudonym_key():
    from kip.runtime.settings import KipSettings

    return KipSettings().pseudonym_key()


def _pseudonym(args) -> int:
    from kip.runtime import keys

    if args.new_key:
        keys.new_pseudonym_key(args.new_key)
        print(f"kip audit: wrote a pseudonym key to {args.new_key}; set "
              "KIP_AUDIT_PSEUDONYM_KEY_FILE to it for the pipeline and the workers")
        return 0
    key = _pseudonym_key()
    if key is None or not args.value:
        raise ValueError("kip audit pseudonym VALUE needs KIP_AUDIT_PSEUDONYM_KEY_FILE set "
                         "(or --new-key PATH to make a key)")
    print(key.of(args.kind, args.value))
    return 0


def _flat(row: dict) -> dict:
    """Nested timings as ``timings_<name>`` columns (Parquet wants one type per column)."""
    timings = row.pop("timings", None) or {}
    return row | {f"timings_{k}": v for k, v in timings.items()}
