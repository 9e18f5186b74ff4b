"""The developer tools' ``kip`` commands: ``kafka``, ``up``, ``demo``, ``bench`` and
``faults``. ``add_commands`` is registered under the ``kip.commands`` entry points."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from kip.devkit import (bench_batch, bench_buckets, bench_burst, bench_checks, bench_cost,
                        bench_flood, bench_load, bench_prepare, bench_rollout, bench_scale,
                        bench_throughput,
                        faults)
from kip.devkit.arguments import count
from kip.devkit.settings import DevSettings


SECURE_HELP = ("SASL_SSL (SCRAM) on --port and mTLS on the port after the controller's, "
               "the authorizer denying what no ACL allows; a SCRAM user per role and a "
               "client config per user in the broker's folder")

BROKERS_HELP = ("brokers of a KRaft cluster on loopback, each broker and controller, node i "
                "on --port + 3(i-1); replication factor 3 and min.insync.replicas 2 from 3 "
                "brokers on, unclean leader election off (docs/deploy.md)")


BENCHES = [
    ("load", bench_load, "open-loop load per class; overload; sweep"),
    ("throughput", bench_throughput, "raw ONNX Runtime against kip end to end, one run"),
    ("cost", bench_cost, "CPU per request of every process, latency by stage, and the "
     "bare-library floors, in one run"),
    ("batch", bench_batch, "kip batch run against raw ONNX Runtime: rows/s, peak RSS, "
     "interactive p99 beside the job"),
    ("rollout", bench_rollout, "a 90/10 canary, promote and rollback under interactive "
     "traffic: the canary's share, failed and lost requests, interactive p99"),
    ("scale", bench_scale, "digits workers 1 -> 3 -> 1 under twice one worker's load, each "
     "with a CPU limit: how long each join and leave stops the groups, lost and "
     "duplicated (root)"),
    ("burst", bench_burst, "interactive latency while bursts of standard requests are all "
     "in flight, against steady; one pipeline or two"),
    ("flood", bench_flood, "one tenant floods, signed and unsigned, while another sends "
     "interactive requests: the victim's p99 against alone, the flood's endings"),
    ("checks", bench_checks, "CPU per request of the stamp, signature and replay checks, "
     "beside request authentication (no Kafka)"),
    ("buckets", bench_buckets, "MiniLM batches in length buckets against padding to the "
     "longest text: sequences/s and their ratio (no Kafka)"),
    ("prepare", bench_prepare, "MiniLM chunks tokenized ahead in a thread of their own "
     "against in turn: sequences/s, the inference thread's wait per chunk (no Kafka)"),
]


def add_commands(sub) -> None:
    home = DevSettings().home
    kafka = sub.add_parser("kafka", help="a local Kafka broker, or a cluster (KRaft)")
    kafka.add_argument("action", choices=["start", "stop", "status"])
    kafka.add_argument("--dir", type=Path, default=home / "kafka")
    kafka.add_argument("--port", type=int, default=9092)
    kafka.add_argument("--brokers", type=count, default=1, help=BROKERS_HELP)
    kafka.add_argument("--secure", action="store_true", help=SECURE_HELP)
    kafka.set_defaults(func=_kafka)

    up = sub.add_parser("up", help="broker + topics + models + pipeline + workers")
    up.add_argument("--demo", action="store_true", help="run the demo, then stop everything")
    up.add_argument("--secure", action="store_true", help=SECURE_HELP + "; ACLs applied, "
                    "every process connects as its own role")
    up.add_argument("--port", type=int, default=9092, help="the local broker's port")
    up.add_argument("--brokers", type=count, default=1, help=BROKERS_HELP)
    up.add_argument("--metrics-port", type=int, default=9101,
                    help="the pipeline's metrics port; each worker takes the next (0: none)")
    up.set_defaults(func=_terminable(_up))
    demo = sub.add_parser("demo", help="send demo traffic to a running kip")
    demo.add_argument("--secure", action="store_true", help="the running kip is secured")
    demo.add_argument("--port", type=int, default=9092, help="the running kip's broker port")
    demo.add_argument("--brokers", type=count, default=1, help="the running kip's brokers")
    demo.set_defaults(func=_demo)

    bench = sub.add_parser("bench", help="benchmarks that start a kip of their own")
    benches = bench.add_subparsers(required=True, metavar="BENCH")
    for name, module, about in BENCHES:
        parser = benches.add_parser(name, help=about)
        module.add_arguments(parser)
        parser.set_defaults(func=_terminable(module.run))

    fault = sub.add_parser("faults", help="crash processes under load; count lost and "
                           "duplicated results (starts a kip of its own)")
    faults.add_arguments(fault)
    fault.set_defaults(func=_terminable(faults.run_cli))


def _terminable(run):
    """``run`` with SIGTERM taken as Ctrl-C. A benchmark (or ``kip up``) starts a broker
    and a kip in sessions of their own; stopped by ``timeout`` or a process manager, it
    unwinds and stops them, where SIGTERM's default would leave them running."""
    def terminable(args) -> int:
        # Ctrl-C too, even where the shell started it ignored (``cmd &`` in a script):
        # only then does asyncio.run take it, and SIGTERM with it, as cancelling.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _as_ctrl_c)
        return run(args)
    return terminable


def _as_ctrl_c(signum, frame) -> None:
    """Whatever Ctrl-C does now. Inside ``asyncio.run`` that cancels the main task, so
    its cleanup runs from an ``await``; raising KeyboardInterrupt there instead could
    land anywhere, even inside pydantic's serializer, which reports it as an error."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):   # SIGINT ignored or left to the OS: act as Python's own
        handler = signal.default_int_handler
    handler(signum, frame)


def _kafka(args) -> int:
    from kip.devkit.cluster import local_kafka
    from kip.devkit.stack import DevStack

    users = DevStack().roles() if args.secure else []
    broker = local_kafka(args.dir, args.brokers, port=args.port, secure=args.secure,
                         users=users)
    if args.action == "start":
        broker.start()
    elif args.action == "stop":
        print("kafka stopped" if broker.stop() else "kafka was not running")
    else:
        print(broker.status())
        return 0 if broker.pid() else 3
    return 0


def _up(args) -> int:
    from kip.devkit.stack import DevStack

    stack = DevStack(secure=args.secure, port=args.port, metrics_base_port=args.metrics_port,
                     brokers=args.brokers)
    try:
        stack.prepare()
        stack.start_services()
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
    from kip.devkit.stack import DevStack
    return _demo_against(DevStack(secure=args.secure, port=args.port, brokers=args.brokers))


def _demo_against(stack) -> int:
    from kip.devkit.demo import passed, run_demo
    from kip.devkit.stack import dev_client

    async def go() -> dict:
        async with dev_client(stack) as client:
            return await run_demo(client)
    figures = asyncio.run(go())
    ok = passed(figures)
    print("\ndemo " + ("passed" if ok else "FAILED") + f": similarity {figures['similarity']:.4f} "
          f"(torch reference 0.7553), digit accuracy {figures['digit_accuracy']:.1%}")
    return 0 if ok else 1
