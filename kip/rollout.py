"""``kip rollout start|status|promote|rollback``: staged releases of a model version.

    kip rollout start digits digits@3f2a91c0 --canary 10 --reason "retrained on May data"
    kip rollout status digits
    kip rollout promote digits
    kip rollout rollback digits --reason "p99 doubled"
    kip rollout pin digits acme digits@3f2a91c0    (a tenant's requests to one version)

Each command writes one ``Release`` (schemas/releases.py) to the releases topic; the
pipeline routes by the latest within a second or two. A version is released only if it
verifies here as a worker would check it (its files against the manifest, and the
manifest's signature where ``KIP_REQUIRE_SIGNED_MODELS`` is on). ``rollback`` goes back,
in one command, to the last revision before the current one that served one version
(the registry's alias where there is none): the stable state before a canary or a
promotion.
"""

from __future__ import annotations

import asyncio
import getpass
from datetime import datetime, timezone


def add_command(sub) -> None:
    rollout = sub.add_parser("rollout", help="staged releases: canary, promote, rollback")
    actions = rollout.add_subparsers(required=True, metavar="ACTION")
    start = actions.add_parser("start", help="send a share of an alias's requests to a "
                               "new version")
    start.add_argument("alias")
    start.add_argument("version", help="NAME@VERSION (or an alias that points to it)")
    start.add_argument("--canary", type=float, default=10.0, help="percent (default 10)")
    start.add_argument("--reason", default="")
    start.set_defaults(func=_start)
    pin = actions.add_parser("pin", help="send one tenant's requests to one version "
                             "(unpin: drop the pin)")
    pin.add_argument("alias")
    pin.add_argument("tenant")
    pin.add_argument("version", nargs="?", help="NAME@VERSION; omit to unpin")
    pin.add_argument("--reason", default="")
    pin.set_defaults(func=_pin)
    for name, func, text in (("promote", _promote, "send every request to the canary"),
                             ("rollback", _rollback, "back to the last stable revision"),
                             ("status", _status, "an alias's release history")):
        action = actions.add_parser(name, help=text)
        action.add_argument("alias")
        if name != "status":
            action.add_argument("--reason", default="")
        action.set_defaults(func=func)


def _context():
    from kip.models.registry import Registry
    from kip.models.signing import configured_trust
    from kip.runtime.settings import KipSettings

    settings = KipSettings()
    return settings, Registry(settings.registry_dir), configured_trust(settings)


async def history(kafka, names, alias: str) -> list:
    """Every release of ``alias``, oldest first."""
    from kip.schemas.releases import Release
    from kip.transport.reading import records_since

    found = [Release.model_validate_json(r.value) async for r in
             records_since(kafka, names.releases, 0, what="releases topic")
             if r.key == alias.encode() and r.value]
    return sorted(found, key=lambda r: r.revision)


def weighted(registry, trust, target: str, weight: float):
    """``target``'s version with ``weight``, once it verifies as a worker would check it."""
    from kip.schemas.releases import WeightedVersion

    m = registry.resolve(target).manifest
    registry.load(m.name, m.version, trust)   # ModelUnverified: not released
    return WeightedVersion(version=f"{m.name}@{m.version}", weight=weight,
                           artifact_sha256=m.artifact_sha256)


def _start(args) -> int:
    settings, registry, trust = _context()

    def change(current, past):
        if current is not None and current.canary is not None:
            raise ValueError(f"{args.alias}: the canary of {current.canary.version} (revision "
                             f"{current.revision}) is on: promote or roll back first")
        if not 0 < args.canary < 100:
            raise ValueError("--canary is a percent between 0 and 100")
        stable = current.stable.version if current else args.alias
        routes = [weighted(registry, trust, stable, 100 - args.canary),
                  weighted(registry, trust, args.version, args.canary)]
        return "start", routes, current.pins if current else {}
    return _release(settings, args, change)


def _promote(args) -> int:
    settings, registry, trust = _context()

    def change(current, past):
        if current is None or current.canary is None:
            raise ValueError(f"{args.alias} has no canary to promote")
        return "promote", [current.canary.model_copy(update={"weight": 100.0})], current.pins
    return _release(settings, args, change)


def _rollback(args) -> int:
    settings, registry, trust = _context()

    def change(current, past):
        if current is None:
            raise ValueError(f"{args.alias} has no release to roll back")
        stable = [r for r in past[:-1] if len(r.routes) == 1]
        if stable:
            return "rollback", stable[-1].routes, stable[-1].pins
        return "rollback", [weighted(registry, trust, args.alias, 100.0)], {}
    return _release(settings, args, change)


def _pin(args) -> int:
    settings, registry, trust = _context()

    def change(current, past):
        routes = current.routes if current else [weighted(registry, trust, args.alias, 100.0)]
        pins = dict(current.pins) if current else {}
        if args.version is None:
            pins.pop(args.tenant, None)
            return "unpin", routes, pins
        pins[args.tenant] = weighted(registry, trust, args.version, 100.0).version
        return "pin", routes, pins
    return _release(settings, args, change)


def _release(settings, args, change) -> int:
    """Read the alias's history, make the next revision with ``change``, publish it."""
    from kip.pipeline.control import publish_control
    from kip.schemas.releases import Release
    from kip.schemas.codec import now_ms

    past = asyncio.run(history(settings.kafka, settings.names, args.alias))
    current = past[-1] if past else None
    action, routes, pins = change(current, past)
    release = Release(alias=args.alias, revision=(current.revision if current else 0) + 1,
                      action=action, routes=routes, pins=pins, by=getpass.getuser(),
                      at_ms=now_ms(), reason=args.reason)
    asyncio.run(publish_control(settings.kafka, settings.names.releases, args.alias,
                                release.model_dump_json().encode()))
    print(describe(release))
    return 0


def _status(args) -> int:
    from kip.runtime.settings import KipSettings

    settings = KipSettings()
    past = asyncio.run(history(settings.kafka, settings.names, args.alias))
    if not past:
        print(f"{args.alias}: no release yet; routed by the registry's aliases.json")
    for release in past:
        print(describe(release))
    return 0


def describe(release) -> str:
    when = datetime.fromtimestamp(release.at_ms / 1000, timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S")
    routes = ", ".join(f"{r.version} {r.weight:g}%" for r in release.routes)
    pins = f"; pins {release.pins}" if release.pins else ""
    why = f" ({release.reason})" if release.reason else ""
    return (f"{release.alias} revision {release.revision}: {release.action} by "
            f"{release.by} at {when}: {routes}{pins}{why}")
