"""``kip audit tail|explain|export``: the governance topic for audit consumers.

    kip audit tail --tenant acme --code QUOTA_EXCEEDED --follow
    kip audit explain REQUEST_ID --since 2h
    kip audit export --out audit.parquet --since 24h

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


def since_ms(value: str, now_ms: int) -> int:
    """Unix ms, or an age before ``now_ms``."""
    found = AGE.match(value)
    if found:
        return now_ms - int(found.group(1)) * UNIT_MS[found.group(2)]
    if value.isdigit():
        return int(value)
    raise ValueError(f"a time is Unix ms or an age like 90s, 15m, 2h, 7d; got {value!r}")


def _context():
    from runtime.settings import KipSettings
    from schemas.codec import now_ms
    from topics.names import TopicNames

    settings = KipSettings()
    return settings.kafka, TopicNames(settings.topic_prefix), now_ms()


def _warn(problem: str) -> None:
    print(f"kip audit: a record that does not decode: {problem}", file=sys.stderr)


def _tail(args) -> int:
    from kip.audit.reading import Filter, explain, records

    kafka, names, now = _context()
    wanted = Filter(args.tenant, args.model, args.decision, args.code)

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


def _flat(row: dict) -> dict:
    """Nested timings as ``timings_<name>`` columns (Parquet wants one type per column)."""
    timings = row.pop("timings", None) or {}
    return row | {f"timings_{k}": v for k, v in timings.items()}
