"""``kip deadletter list|show|replay``: the messages kip could not use, for the operator.

    kip deadletter list --since 24h --code INVALID_REQUEST
    kip deadletter show 17
    kip deadletter replay 17 18 --dry-run
    kip deadletter replay --all --since 2h

Letters are named by their offset in the dead-letter topic. Read as the ``operator``
principal on a secured cluster (no other role may read dead letters).
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from datetime import datetime, timezone

import orjson


def add_command(sub) -> None:
    dead = sub.add_parser("deadletter", help="messages kip could not use: list, show, replay")
    actions = dead.add_subparsers(required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one line per dead letter")
    _range(listing)
    listing.set_defaults(func=_list)
    show = actions.add_parser("show", help="one dead letter in full")
    show.add_argument("offset", type=int)
    show.set_defaults(func=_show)
    replay = actions.add_parser("replay", help="send kept payloads back to their request "
                                "topic, once each")
    replay.add_argument("offsets", type=int, nargs="*", help="the letters (or --all)")
    replay.add_argument("--all", action="store_true", help="every letter in the range")
    replay.add_argument("--dry-run", action="store_true", help="say what would happen")
    _range(replay)
    replay.set_defaults(func=_replay)


def _range(parser) -> None:
    parser.add_argument("--since", default="7d", help="Unix ms or an age (default 7d)")
    parser.add_argument("--code", help="only letters with this error code")


def _context():
    from kip.runtime.settings import KipSettings
    from kip.schemas.codec import now_ms

    settings = KipSettings()
    return settings.kafka, settings.names, now_ms()


async def _chosen(kafka, names, since: int, code: str | None, offsets=None) -> list:
    from kip.deadletter.letters import letters

    return [letter async for letter in letters(kafka, names, since)
            if (code is None or letter.record.error_code == code)
            and (offsets is None or letter.offset in offsets)]


def _list(args) -> int:
    from kip.audit.command import since_ms
    from kip.deadletter.letters import replayed

    kafka, names, now = _context()

    async def go():
        return (await _chosen(kafka, names, since_ms(args.since, now), args.code),
                await replayed(kafka, names))
    found, done = asyncio.run(go())
    for letter in found:
        r = letter.record
        kept = "payload kept" if r.payload_b64 is not None else "payload not kept"
        again = " | replayed" if letter.origin in done else ""
        print(f"{letter.offset:>6} {_time(letter.at_ms)} {r.error_code} {r.request_id or '-'} "
              f"| from {letter.origin} | {r.payload_bytes} bytes, {kept}{again} | "
              f"{r.reason[:120]}")
    print(f"kip deadletter: {len(found)} letters", file=sys.stderr)
    return 0


def _show(args) -> int:
    from kip.deadletter.letters import describe, replayed

    kafka, names, _ = _context()

    async def go():
        return (await _chosen(kafka, names, 0, None, {args.offset}),
                await replayed(kafka, names))
    found, done = asyncio.run(go())
    if not found:
        print(f"kip deadletter: no letter at offset {args.offset} of {names.deadletter}",
              file=sys.stderr)
        return 1
    shown = describe(found[0]) | {"replayed": done.get(found[0].origin)}
    print(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())
    return 0


def _replay(args) -> int:
    from kip.audit.command import since_ms
    from kip.deadletter.replay import replay

    if not args.all and not args.offsets:
        raise ValueError("name the letters to replay (their offsets), or --all")
    kafka, names, now = _context()
    since = since_ms(args.since, now) if args.all else 0

    async def go():
        chosen = await _chosen(kafka, names, since, args.code,
                               None if args.all else set(args.offsets))
        return await replay(kafka, names, chosen, getpass.getuser(), args.dry_run)
    verdicts = asyncio.run(go())
    verb = "would replay" if args.dry_run else "replayed"
    for v in verdicts:
        print(f"{v.letter.offset:>6} {verb if v.replayable else 'not replayed'}: {v.why}")
    sent = sum(v.replayable for v in verdicts)
    print(f"kip deadletter: {verb} {sent} of {len(verdicts)}", file=sys.stderr)
    missing = set(args.offsets) - {v.letter.offset for v in verdicts}
    for offset in sorted(missing):
        print(f"kip deadletter: no letter at offset {offset} of {names.deadletter}",
              file=sys.stderr)
    return 1 if missing else 0


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
