"""``kip batch run``: a Parquet, CSV or JSON Lines file through kip into another.

    KIP_API_SECRET=... kip batch run --model minilm --input in.parquet --out out.parquet \\
        --column text=sentence --id-column id --tenant acme --key-id acme-k1

Progress goes to the terminal as a bar (rows/s, ETA, counts by outcome), or as a log
line every few seconds when stderr is not a terminal. The exit status is 0 when every
row got an ok result, 1 when some failed (they are in the errors file with their code
and message), 2 when the job could not run.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

from kip.runtime import collector

LOG_EVERY_S = 5.0


def add_command(sub) -> None:
    batch = sub.add_parser("batch", help="run a file of rows through kip (offline jobs)")
    actions = batch.add_subparsers(required=True, metavar="ACTION")
    run = actions.add_parser("run", help="Parquet, CSV or JSON Lines in and out; "
                             "resumable (--resume)")
    run.add_argument("--model", required=True, help="model alias")
    run.add_argument("--input", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True, help=".parquet, .csv or .jsonl")
    run.add_argument("--column", action="append", default=[], metavar="INPUT=COLUMNS",
                     help="model input from column(s), e.g. text=sentence or pixels=p* "
                     "(repeat per input; default: a column named as the input)")
    run.add_argument("--id-column", help="a column copied to the output with each row")
    run.add_argument("--rows-per-request", type=int, default=32)
    run.add_argument("--in-flight", type=int, default=64, help="requests awaiting results")
    run.add_argument("--retries", type=int, default=3, help="for INTERNAL, expired and "
                     "timed-out requests (OVERLOADED and QUOTA_EXCEEDED wait and retry)")
    run.add_argument("--priority", default="batch", choices=["batch", "standard"])
    run.add_argument("--errors", type=Path, help="failed rows (default OUT.errors.jsonl)")
    run.add_argument("--job-id", help="default: a new one (kept in OUT.job/)")
    run.add_argument("--resume", action="store_true", help="continue the job of OUT")
    run.add_argument("--tenant", required=True)
    run.add_argument("--key-id", required=True, help="API key id; its secret comes from "
                     "KIP_API_SECRET")
    run.set_defaults(func=_run)


def _run(args) -> int:
    try:
        from kip.batch import job as job_module  # pyarrow lives in the batch extra
    except ImportError as err:
        print(f"kip batch needs pyarrow and rich: pip install 'kip[batch]' ({err})",
              file=sys.stderr)
        return 2
    from kip.batch.settings import BatchSettings

    secret = BatchSettings().api_secret
    if secret is None:
        print("kip batch: set KIP_API_SECRET to the secret of --key-id", file=sys.stderr)
        return 2
    job = job_module.JobDir(args.out)
    collector.settle()   # thousands of requests in flight (runtime/collector.py)
    try:
        return asyncio.run(_job(args, job, secret.get_secret_value()))
    finally:
        job.close()


async def _job(args, job, secret: str) -> int:
    from kip.batch import runner
    from kip.batch.tables import InputMap

    columns = runner.input_columns(args.input, InputMap.parse(args.column or ["text"]))
    spec = runner.new_spec(args.job_id or uuid.uuid4().hex[:12], args.model, args.input,
                           columns, args.id_column, args.rows_per_request, args.priority)
    if job.exists():
        spec = _resumed(job, spec, args.resume)
        if spec is None:
            return 2
        if spec.finished:
            print(f"kip batch: job {spec.job_id} already finished: {args.out}")
            return 0
    else:
        job.create(spec)
    progress = runner.Progress(runner.total_rows(args.input))
    show = _display(progress)
    try:
        async with _client(args, secret) as client:
            await runner.run_job(client, job, spec, columns, progress, show,
                                 args.in_flight, args.retries)
    finally:
        getattr(show, "close", lambda: None)()
    errors = args.errors or args.out.with_name(args.out.name + ".errors.jsonl")
    ok, failed = job.combine(errors)
    spec.finished = True
    job.save(spec)
    _summary(progress, ok, failed, args.out, errors)
    return 1 if failed else 0


def _resumed(job, spec, resume: bool):
    earlier = job.load()
    if not resume and not earlier.finished:
        print(f"kip batch: {job.root} holds an unfinished job ({earlier.job_id}): add "
              "--resume to continue it, or remove the folder to start over",
              file=sys.stderr)
        return None
    differs = earlier.same_job(spec)
    if differs:
        print(f"kip batch: {job.root} is another job ({differs}): use another --out",
              file=sys.stderr)
        return None
    return earlier


def _client(args, secret: str):
    from kip.client import KipClient
    from kip.runtime.settings import KipSettings

    settings = KipSettings()
    kafka = settings.kafka.model_dump(exclude={"bootstrap"}, exclude_none=True)
    return KipClient(settings.kafka.bootstrap, tenant=args.tenant, key_id=args.key_id,
                     secret=secret, topic_prefix=settings.topic_prefix,
                     result_keys=settings.result_public_keys_file, **kafka)


def _display(progress):
    """A callable that shows ``progress``: a rich bar on a terminal, else log lines."""
    if sys.stderr.isatty():
        from kip.batch.display import Bar
        return Bar(progress)
    last = [0.0]
    started = time.monotonic()

    def log(p) -> None:
        now = time.monotonic()
        if now - last[0] >= LOG_EVERY_S:
            last[0] = now
            rate = (p.done - p.skipped) / max(now - started, 1e-9)
            print(f"kip batch: {p.done}{'/' + str(p.total) if p.total else ''} rows, "
                  f"{rate:.0f} rows/s, {_counts(p)}", file=sys.stderr, flush=True)
    return log


def _counts(progress) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(progress.counts.items())) or "-"


def _summary(progress, ok: int, failed: int, out: Path, errors: Path) -> None:
    print(f"kip batch: {ok} rows ok, {failed} failed -> {out}"
          + (f" (failed rows: {errors})" if failed else ""))
    if progress.skipped or progress.collected:
        print(f"kip batch: resumed: {progress.skipped} rows were already written, "
              f"{progress.collected} answered while the job was away were read back")
