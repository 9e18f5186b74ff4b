"""The ``kip`` command. Every subcommand is a thin shell over a module that does the work.

The commands here run and operate kip (topics, models, schemas, tenants, fallbacks, the
pipeline, a worker). Other packages add commands through the ``kip.commands`` entry
points: each names a function that takes the subcommand parsers and adds its own (the
developer tools in ``devkit`` add ``kafka``, ``up``, ``demo``, ``bench`` and ``faults``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from pydantic import ValidationError

from kip.runtime.settings import KipSettings

COMMANDS_GROUP = "kip.commands"


def main(argv: list[str] | None = None) -> int:
    try:
        settings = KipSettings()
    except ValidationError as err:
        print(f"kip: error: {bad_settings(err)}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv).parse_args(argv)
    logging.basicConfig(level=settings.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if settings.profile_dir:   # developers: profile this process
            return _profiled(args, settings.profile_dir)
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the CLI's last word: one clear line, no traceback
        if settings.debug:
            raise
        print(f"kip: error: {str(exc) or type(exc).__name__}", file=sys.stderr)
        if type(exc).__name__ == "KafkaConnectionError":
            print("kip: is the broker running? Start one with `kip kafka start`, or point "
                  "KIP_BOOTSTRAP at yours.", file=sys.stderr)
        return 1


def bad_settings(err: ValidationError) -> str:
    """One line naming each ``KIP_`` variable that does not parse, and why."""
    problems = [f"KIP_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
                for e in err.errors(include_url=False)]
    return "; ".join(problems)


def _profiled(args, folder: Path) -> int:
    import cProfile

    path = folder / f"{args.func.__name__.strip('_')}-{os.getpid()}.prof"
    profile = cProfile.Profile()
    try:
        return profile.runcall(args.func, args) or 0
    finally:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(path)


def parser(argv: list[str] = ()) -> argparse.ArgumentParser:
    """kip's own commands, and the plugins' unless ``argv`` names one of kip's own: a
    pipeline or a worker process never imports the developer tools."""
    p = argparse.ArgumentParser(prog="kip", description="Kafka Inference Pipeline")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    _add_operator_commands(sub)
    _add_client_commands(sub)
    _add_process_commands(sub)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in sub.choices:
        for plugin in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
            try:
                add = plugin.load()
            except ImportError:   # its packages are another install's (kip[dev])
                continue
            add(sub)
    return p


def _add_client_commands(sub) -> None:
    """The commands of kip's users beside producers: batch jobs, audit consumers, and the
    operator's dead letters."""
    from kip.audit.command import add_command as add_audit
    from kip.batch.command import add_command as add_batch
    from kip.deadletter.command import add_command as add_deadletter

    add_batch(sub)
    add_audit(sub)
    add_deadletter(sub)


def _add_operator_commands(sub) -> None:
    topics = sub.add_parser("topics", help="the topic catalogue")
    topics.add_argument("action", choices=["apply", "list"])
    topics.add_argument("--models", default="minilm,digits", help="comma-separated names")
    topics.add_argument("--partitions", type=int, default=3)
    topics.set_defaults(func=_topics)

    _add_model_commands(sub)

    acls = sub.add_parser("acls", help="least-privilege Kafka ACLs for every kip role, and "
                          "the broker's quotas on each tenant's principal, from the topic "
                          "catalogue and the access file")
    acls.add_argument("action", choices=["plan", "apply"])
    acls.add_argument("--models", default="minilm,digits", help="comma-separated names")
    acls.add_argument("--prune", action="store_true",
                      help="delete grants of kip's principals that the plan does not have")
    acls.set_defaults(func=_acls)

    security = sub.add_parser("security", help="TLS material, users and client configs of "
                              "a secured single-broker deployment (compose's init)")
    security.add_argument("action", choices=["init"])
    security.add_argument("--out", type=Path, required=True, help="the shared folder")
    security.add_argument("--broker-config", type=Path, required=True,
                          help="where the broker's server.properties goes")
    security.add_argument("--host", default="kafka", help="the broker's host name")
    security.add_argument("--models", default="minilm,digits", help="comma-separated names")
    security.add_argument("--owner", type=int, help="uid the broker runs as")
    security.add_argument("--kip-owner", type=int, help="uid kip's processes run as (init "
                          "runs as root and hands every other file to it)")
    security.set_defaults(func=_security)

    schemas = sub.add_parser("schemas", help="the wire contract as JSON Schema")
    schemas.add_argument("action", choices=["export"])
    schemas.add_argument("--out", type=Path, default=Path("docs/schemas"))
    schemas.set_defaults(func=_schemas)

    _add_tenant_commands(sub)
    _add_key_commands(sub)


def _add_model_commands(sub) -> None:
    from kip.registry import add_command
    from kip.rollout import add_command as add_rollout

    add_command(sub)
    add_rollout(sub)


def _add_key_commands(sub) -> None:
    keys = sub.add_parser("keys", help="the deployment's own keys: work-item stamps and "
                          "result signatures (files named by the KIP_*_FILE settings)")
    keys.add_argument("action", choices=["init", "rotate-stamp", "drop-stamp", "show"])
    keys.add_argument("key_id", nargs="?", help="the stamp key to add or drop")
    keys.set_defaults(func=_keys)


def _add_tenant_commands(sub) -> None:
    tenants = sub.add_parser("tenants", help="tenant quotas (on the control topic)")
    tenants.add_argument("action", choices=["set", "show", "clear"])
    tenants.add_argument("tenant", nargs="?")
    tenants.add_argument("--model", help="limit this tenant on this model only")
    tenants.add_argument("--requests-per-s", type=float)
    tenants.add_argument("--burst-requests", type=float)
    tenants.add_argument("--bytes-per-s", type=float)
    tenants.add_argument("--burst-bytes", type=float)
    tenants.set_defaults(func=_tenants)

    fallback = sub.add_parser("fallback", help="the model to degrade to when one is overloaded")
    fallback.add_argument("model")
    fallback.add_argument("target", nargs="?", help="alias to fall back to; omit to remove")
    fallback.set_defaults(func=_fallback)


def _add_process_commands(sub) -> None:
    pipeline = sub.add_parser("pipeline", help="run the admission/routing stream processor")
    pipeline.add_argument("--classes", help="comma-separated classes to admit (default: "
                          "all; e.g. interactive, or standard,batch)")
    pipeline.add_argument("--nice", type=int, help="lower this process's CPU priority")
    pipeline.set_defaults(func=_pipeline)
    worker = sub.add_parser("worker", help="run an inference worker for one model")
    worker.add_argument("--model", help="alias to serve (default: KIP_MODEL or minilm)")
    worker.set_defaults(func=_worker)
    scaling = sub.add_parser("scaling", help="serve the scaling signal: lag and desired "
                             "workers per model, as Prometheus metrics (KIP_METRICS_PORT)")
    scaling.set_defaults(func=_scaling)


def _topics(args) -> int:
    from kip.transport.admin import apply, cluster_brokers
    from kip.topics.catalogue import Replication, catalogue

    settings = KipSettings()

    def specs(replication: Replication = Replication()) -> list:
        return catalogue(settings.names, args.models.split(","), args.partitions,
                         list(_tenant_classes()), replication)
    if args.action == "list":
        for s in specs():
            print(f"{s.name:40} partitions={s.partitions} key={s.key:12} {s.purpose}")
        return 0
    brokers = asyncio.run(cluster_brokers(settings.kafka))
    replication = settings.replication(brokers)
    print(f"{brokers} broker{'s' if brokers > 1 else ''}: replication factor "
          f"{replication.factor}, min.insync.replicas {replication.min_insync}")
    report = asyncio.run(apply(settings.kafka, specs(replication)))
    print("\n".join(report.lines()))
    return 2 if report.drift else 0


def _acls(args) -> int:
    from kip.tenants import broker_quotas
    from kip.transport.acl_admin import apply
    from kip.topics.acls import plan
    from kip.transport.quota_admin import apply_quotas

    settings = KipSettings()
    wanted = plan(settings.names, args.models.split(","), _tenant_classes())
    quotas = broker_quotas(_access())
    if args.action == "plan":
        print("\n".join(acl.line() for acl in sorted(wanted)))
        print("\n".join(f"quota User:{u} {q}" for u, q in sorted(quotas.items())))
        return 0
    report = asyncio.run(apply(settings.kafka, settings.names, wanted, prune=args.prune))
    print("\n".join(report.lines()))
    quota_report = asyncio.run(apply_quotas(settings.kafka, quotas, prune=args.prune))
    print("\n".join(quota_report.lines()))
    print(f"{len(report.created)} created, {len(report.unchanged)} unchanged, "
          f"{len(report.drift)} drifted, {len(report.removed)} removed; quotas: "
          f"{len(quota_report.set)} set, {len(quota_report.unchanged)} unchanged, "
          f"{len(quota_report.drift)} drifted, {len(quota_report.removed)} removed")
    return 2 if report.drift or quota_report.drift else 0


def _security(args) -> int:
    from kip.security import ensure_access_file, init_deployment
    from kip.pipeline.settings import PipelineSettings
    from kip.topics.catalogue import MAX_MESSAGE_BYTES

    access = ensure_access_file(PipelineSettings().access_file, "demo", "demo-key")
    users = (["pipeline", "operator", "audit-reader", "scaling"]
             + [f"worker-{m}" for m in args.models.split(",")]
             + [f"tenant-{t}" for t in access.tenants])
    written = KipSettings().ensure_keys()
    written += init_deployment(args.out, users, args.host, args.broker_config,
                               MAX_MESSAGE_BYTES, args.owner, kip_owner=args.kip_owner)
    print("\n".join(f"wrote {path}" for path in written))
    print(f"client configs for {', '.join(users)} (KIP_KAFKA_CONFIG={args.out}/clients/"
          f"<user>.json); access file {PipelineSettings().access_file}")
    return 0


def _keys(args) -> int:
    from kip.runtime import keys

    settings = KipSettings()
    if args.action == "init":
        made = settings.ensure_keys()
        print("\n".join(f"wrote {p}" for p in made) or "every key file is present")
    elif args.action == "show":
        ring = settings.stamp_keys()
        print(f"stamp keys: {', '.join(ring.keys)} (current {ring.current})")
        public = keys.result_keys(settings.result_public_keys_file)
        print("\n".join(f"result key {k}: {v}" for k, v in public.keys.items()))
    elif not args.key_id:
        raise ValueError(f"kip keys {args.action} needs a key id")
    elif args.action == "rotate-stamp":
        keys.rotate_stamp(settings.stamp_keys_file, args.key_id)
        print(f"stamp key {args.key_id} added and current: restart the workers, then the "
              "pipeline; drop the old key once no work stamped with it is left")
    else:
        keys.drop_stamp(settings.stamp_keys_file, args.key_id)
        print(f"stamp key {args.key_id} dropped")
    return 0


def _tenant_classes() -> dict:
    """Each tenant of the access file with the classes it may send (none without a file)."""
    return {t: p.priorities for t, p in _access().tenants.items()}


def _access():
    """The access file (empty without one)."""
    from kip.pipeline.access import AccessConfig
    from kip.pipeline.settings import PipelineSettings

    path = PipelineSettings().access_file
    return AccessConfig.from_file(path) if path.exists() else AccessConfig()


def _tenants(args) -> int:
    from kip.tenants import clear_quota, set_quota, show_quotas

    settings = KipSettings()
    if args.action == "show":
        print(asyncio.run(show_quotas(settings.kafka, settings.names, args.tenant)))
        return 0
    if not args.tenant:
        raise ValueError(f"kip tenants {args.action} needs a tenant name")
    if args.action == "clear":
        asyncio.run(clear_quota(settings.kafka, settings.names, args.tenant))
        print(f"quota of {args.tenant} removed: unlimited")
        return 0
    limit = {k: getattr(args, k) for k in ("requests_per_s", "burst_requests", "bytes_per_s",
                                             "burst_bytes")}
    quota = asyncio.run(set_quota(settings.kafka, settings.names, args.tenant, args.model,
                                  limit))
    print(quota.model_dump_json(exclude_none=True, indent=2))
    return 0


def _fallback(args) -> int:
    from kip.pipeline.control import fallback_record, publish_control

    settings = KipSettings()
    key, value = fallback_record(args.model, args.target)
    asyncio.run(publish_control(settings.kafka, settings.names.control, key, value))
    print(f"{args.model} falls back to {args.target}" if args.target
          else f"{args.model} has no fallback")
    return 0


def _schemas(args) -> int:
    from kip.schemas.jsonschema import export

    for path in export(args.out):
        print(f"wrote {path}")
    return 0


def _pipeline(args) -> int:
    from kip.pipeline.app import run
    from kip.pipeline.settings import PipelineSettings

    overrides = {}
    if args.classes:
        overrides["classes"] = tuple(args.classes.split(","))
    if args.nice is not None:
        overrides["nice"] = args.nice
    run(PipelineSettings(**overrides))
    return 0


def _worker(args) -> int:
    from kip.workers.settings import WorkerSettings
    from kip.workers.worker import run

    settings = WorkerSettings(**({"model": args.model} if args.model else {}))
    run_until_signal(run(settings))
    return 0


def _scaling(args) -> int:
    from kip.runtime import metrics
    from kip.scaling.settings import ScalingSettings
    from kip.scaling.signal import serve

    settings = ScalingSettings()
    if not settings.metrics_port:
        raise SystemExit("kip scaling serves metrics only: set KIP_METRICS_PORT")
    metrics.serve(settings.metrics_port, settings.metrics_host)
    run_until_signal(serve(settings))
    return 0


def run_until_signal(coro) -> None:
    """Run ``coro`` until it ends or SIGINT/SIGTERM cancels it."""
    import signal

    async def main() -> None:
        task = asyncio.create_task(coro)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass
    asyncio.run(main())


if __name__ == "__main__":
    sys.exit(main())
