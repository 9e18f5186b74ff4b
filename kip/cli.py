"""The ``kip`` command. Every subcommand is a thin shell over a module that does the work."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from kip.settings import kip_home

HOME = kip_home()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("KIP_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if os.environ.get("KIP_PROFILE_DIR"):   # developers: profile this process
            return _profiled(args)
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the CLI's last word: one clear line, no traceback
        if os.environ.get("KIP_DEBUG"):
            raise
        print(f"kip: error: {str(exc) or type(exc).__name__}", file=sys.stderr)
        if type(exc).__name__ == "KafkaConnectionError":
            print("kip: is the broker running? Start one with `kip kafka start`, or point "
                  "KIP_BOOTSTRAP at yours.", file=sys.stderr)
        return 1


def _profiled(args) -> int:
    import cProfile

    path = Path(os.environ["KIP_PROFILE_DIR"]) / f"{args.func.__name__.strip('_')}-{os.getpid()}.prof"
    profile = cProfile.Profile()
    try:
        return profile.runcall(args.func, args) or 0
    finally:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kip", description="Kafka Inference Pipeline")
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    kafka = sub.add_parser("kafka", help="a local single-node Kafka broker (KRaft)")
    kafka.add_argument("action", choices=["start", "stop", "status"])
    kafka.add_argument("--dir", type=Path, default=HOME / "kafka")
    kafka.add_argument("--port", type=int, default=9092)
    kafka.set_defaults(func=_kafka)

    topics = sub.add_parser("topics", help="the topic catalogue")
    topics.add_argument("action", choices=["apply", "list"])
    topics.add_argument("--models", default="minilm,digits", help="comma-separated names")
    topics.add_argument("--partitions", type=int, default=3)
    topics.set_defaults(func=_topics)

    models = sub.add_parser("models", help="the model registry")
    models.add_argument("action", choices=["build-reference", "list"])
    models.add_argument("--force", action="store_true", help="rebuild even if present")
    models.set_defaults(func=_models)

    schemas = sub.add_parser("schemas", help="the wire contract as JSON Schema")
    schemas.add_argument("action", choices=["export"])
    schemas.add_argument("--out", type=Path, default=Path("docs/schemas"))
    schemas.set_defaults(func=_schemas)

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

    bench = sub.add_parser("bench", help="benchmarks that start a kip of their own")
    bench_sub = bench.add_subparsers(required=True, metavar="BENCH")
    load = bench_sub.add_parser("load", help="open-loop load per class; overload; sweep")
    from kip.benchload import add_arguments
    add_arguments(load)
    load.set_defaults(func=_bench_load)

    faults = sub.add_parser("faults", help="crash processes under load; count lost and "
                            "duplicated results (starts a kip of its own)")
    from kip.faults import add_arguments as add_fault_arguments
    add_fault_arguments(faults)
    faults.set_defaults(func=_faults)

    pipeline = sub.add_parser("pipeline", help="run the admission/routing stream processor")
    pipeline.add_argument("--classes", help="comma-separated classes to admit (default: "
                          "all; e.g. interactive, or standard,batch)")
    pipeline.add_argument("--nice", type=int, help="lower this process's CPU priority")
    pipeline.set_defaults(func=_pipeline)
    worker = sub.add_parser("worker", help="run an inference worker for one model")
    worker.add_argument("--model", help="alias to serve (default: KIP_MODEL or minilm)")
    worker.set_defaults(func=_worker)

    up = sub.add_parser("up", help="broker + topics + models + pipeline + workers")
    up.add_argument("--demo", action="store_true", help="run the demo, then stop everything")
    up.set_defaults(func=_up)
    sub.add_parser("demo", help="send demo traffic to a running kip").set_defaults(func=_demo)
    return p


def _kafka(args) -> int:
    from kip.broker import LocalBroker

    broker = LocalBroker(args.dir, port=args.port)
    if args.action == "start":
        broker.start()
    elif args.action == "stop":
        print("kafka broker stopped" if broker.stop() else "kafka broker was not running")
    else:
        print(broker.status())
        return 0 if broker.pid() else 3
    return 0


def _topics(args) -> int:
    from kip.settings import KipSettings
    from topics.admin import apply
    from topics.catalogue import catalogue

    settings = KipSettings()
    specs = catalogue(settings.names, args.models.split(","), args.partitions)
    if args.action == "list":
        for s in specs:
            print(f"{s.name:40} partitions={s.partitions} key={s.key:12} {s.purpose}")
        return 0
    report = asyncio.run(apply(settings.bootstrap, specs))
    print("\n".join(report.lines()))
    return 2 if report.drift else 0


def _models(args) -> int:
    from kip.export.reference import build_reference
    from kip.registry import Registry
    from kip.settings import KipSettings

    registry = Registry(KipSettings().registry_dir)
    if args.action == "build-reference":
        build_reference(registry, force=args.force)
    else:
        for alias, target in sorted(registry.aliases().items()):
            print(f"{alias:12} -> {target}")
    return 0


def _tenants(args) -> int:
    from kip.settings import KipSettings
    from kip.tenants import clear_quota, set_quota, show_quotas

    settings = KipSettings()
    if args.action == "show":
        print(asyncio.run(show_quotas(settings, args.tenant)))
        return 0
    if not args.tenant:
        raise ValueError(f"kip tenants {args.action} needs a tenant name")
    if args.action == "clear":
        asyncio.run(clear_quota(settings, args.tenant))
        print(f"quota of {args.tenant} removed: unlimited")
        return 0
    limit = {k: getattr(args, k) for k in ("requests_per_s", "burst_requests", "bytes_per_s",
                                             "burst_bytes")}
    quota = asyncio.run(set_quota(settings, args.tenant, args.model, limit))
    print(quota.model_dump_json(exclude_none=True, indent=2))
    return 0


def _fallback(args) -> int:
    from kip.settings import KipSettings
    from pipeline.control import fallback_record, publish_control

    settings = KipSettings()
    key, value = fallback_record(args.model, args.target)
    asyncio.run(publish_control(settings.bootstrap, settings.names.control, key, value))
    print(f"{args.model} falls back to {args.target}" if args.target
          else f"{args.model} has no fallback")
    return 0


def _bench_load(args) -> int:
    from kip.benchload import run
    return run(args)


def _faults(args) -> int:
    from kip.faults import run_cli
    return run_cli(args)


def _schemas(args) -> int:
    from schemas.jsonschema import export

    for path in export(args.out):
        print(f"wrote {path}")
    return 0


def _pipeline(args) -> int:
    from pipeline.app import run
    from pipeline.settings import PipelineSettings

    overrides = {}
    if args.classes:
        overrides["classes"] = tuple(args.classes.split(","))
    if args.nice is not None:
        overrides["nice"] = args.nice
    run(PipelineSettings(**overrides))
    return 0


def _worker(args) -> int:
    from workers.settings import WorkerSettings
    from workers.worker import run

    settings = WorkerSettings(**({"model": args.model} if args.model else {}))
    _run_until_signal(run(settings))
    return 0


def _run_until_signal(coro) -> None:
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


def _up(args) -> int:
    import time

    from kip.devstack import DevStack

    stack = DevStack(home=HOME)
    stack.prepare()
    stack.start_services()
    try:
        if args.demo:
            return _demo_against(stack)
        print("kip is up; Ctrl-C stops the pipeline and workers (`kip kafka stop` the broker)")
        while True:
            stack.check_services()
            time.sleep(1)
    finally:
        stack.stop_services()
        if args.demo:
            stack.broker.stop()


def _demo(args) -> int:
    from kip.devstack import DevStack
    return _demo_against(DevStack(home=HOME))


def _demo_against(stack) -> int:
    from kip.client import KipClient
    from kip.demo import run_demo
    from kip.devstack import DEV_KEY_ID, ensure_dev_access

    access = ensure_dev_access(stack.access_file)
    key = access.keys[DEV_KEY_ID]

    async def go() -> dict:
        async with KipClient(stack.bootstrap, tenant=key.tenant, key_id=DEV_KEY_ID,
                             secret=key.secret.get_secret_value(),
                             topic_prefix=stack.prefix) as client:
            return await run_demo(client)
    figures = asyncio.run(go())
    ok = abs(figures["similarity"] - 0.7553) <= 1e-3 and figures["digit_accuracy"] >= 0.95
    print("\ndemo " + ("passed" if ok else "FAILED") + f": similarity {figures['similarity']:.4f} "
          f"(torch reference 0.7553), digit accuracy {figures['digit_accuracy']:.1%}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
