"""The `ragmux` command: its parser, and the subcommands that run ragmux (serve, worker,
scheduler, healthcheck), feed it (ingest-dir) and evaluate it (eval). Each runs in the
environment of `ragmux.launch.environment`; the installation's upkeep is in `admin_commands`,
the processes started in `processes`, and their supervision in `supervisor`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path

from ragmux.launch import admin_commands
from ragmux.launch.environment import environment, migrate, ragmux_version, refuse_a_bad_start
from ragmux.launch.processes import (
    WORKER_NAME_PREFIX,
    WorkerMetrics,
    listen_for_metrics,
    scheduler_command,
    share_metrics,
    web_command,
    worker_commands,
    worker_metrics_address,
)
from ragmux.launch.supervisor import DaemonWatch, run_children


def cmd_version(args: argparse.Namespace) -> int:
    print(f"ragmux {ragmux_version()}")
    return 0


def cmd_healthcheck(args: argparse.Namespace) -> int:
    """Exit 0 when the web process (or, with --worker, this host's Celery worker) answers; for
    container health checks, so nothing is started and nothing is migrated."""
    with environment(start_services=False):
        import httpx
        from django.conf import settings

        if args.worker:
            from ragmux.celery import app

            mine = f"{WORKER_NAME_PREFIX}{os.uname().nodename}-"
            try:
                answers = app.control.ping(timeout=args.timeout)
            except Exception as exc:  # the broker's client raises many kinds; each means "not healthy"
                sys.stderr.write(f"ragmux: the broker did not answer: {exc}\n")
                return 1
            if not any(name.startswith(mine) for answer in answers for name in answer):
                sys.stderr.write(f"ragmux: no worker of this host ({mine}*) answered a ping\n")
                return 1
            print("worker ok")
            return 0
        host = "127.0.0.1" if settings.HOST in ("0.0.0.0", "::", "") else settings.HOST
        url = args.url or f"http://{host}:{settings.PORT}/healthz"
        try:
            status = httpx.get(url, timeout=args.timeout).status_code
        except httpx.HTTPError as exc:
            sys.stderr.write(f"ragmux: {url} did not answer: {exc}\n")
            return 1
        if status != 200:
            sys.stderr.write(f"ragmux: {url} answered {status}\n")
            return 1
        print("web ok")
    return 0


def _first_start_done() -> str | None:
    """Migrates, checks and sets up a fresh installation, one `ragmux serve` at a time; the
    first admin's notice (None: nothing to say), or SystemExit when the password is refused."""
    from ragmux.core.errors import InvalidInput
    from ragmux.launch.first_run import ensure_first_admin, ensure_local_connection, one_start_at_a_time

    with one_start_at_a_time():
        migrate()
        refuse_a_bad_start()
        try:
            admin_notice = ensure_first_admin()
        except InvalidInput as exc:
            sys.stderr.write(f"ragmux: RAGMUX_ADMIN_PASSWORD refused: {exc.message}\n")
            raise SystemExit(1) from None
        ensure_local_connection()
    return admin_notice


def _announce(services, base: str, admin_notice: str | None) -> None:
    print(f"ragmux is running. Dashboard: {base}/admin/", flush=True)
    if services.postgres is not None:
        log = services.postgres.log_file
        print(f"Embedded PostgreSQL: {os.environ['DATABASE_URL']} (log: {log})", flush=True)
    if services.redis is not None:
        print(f"Embedded Redis: {os.environ['REDIS_URL']}", flush=True)
    if admin_notice:
        print(admin_notice, flush=True)
    print("Press Ctrl-C to stop.", flush=True)


def _watched_daemons(services) -> tuple[DaemonWatch, ...]:
    if services.redis is None:
        return ()
    redis = services.redis
    return (
        DaemonWatch(
            "embedded Redis",
            alive=lambda: redis.running_port() is not None,
            start=partial(redis.start, redis.running_port()),
        ),
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from ragmux.launch.embedded import port_is_free

    with environment() as services:
        from django.conf import settings

        if not port_is_free(settings.PORT, settings.HOST):
            sys.stderr.write(f"ragmux: {settings.HOST}:{settings.PORT} is already in use (set PORT)\n")
            return 1
        admin_notice = _first_start_done()
        shown_host = "127.0.0.1" if settings.HOST in ("0.0.0.0", "::") else settings.HOST
        base = f"http://{shown_host}:{settings.PORT}"
        # The web server's workers, and the worker and scheduler started with them, are summed
        # by every web worker's /metrics, or by this process's METRICS_LISTEN.
        share_metrics(f"serve-{settings.PORT}")
        if settings.METRICS_LISTEN is not None:
            from ragmux.views import HostMetrics

            if not listen_for_metrics(settings.METRICS_LISTEN, HostMetrics()):
                return 1
        commands = {"web": web_command()}
        if not args.no_worker:
            commands.update(worker_commands())
            commands["scheduler"] = scheduler_command()
        return run_children(
            commands,
            restart=frozenset(commands) - {"web"},
            on_ready=partial(_announce, services, base, admin_notice),
            ready_url=f"{base}/healthz",
            daemons=_watched_daemons(services),
        )


def cmd_worker(args: argparse.Namespace) -> int:
    with environment():
        from django.conf import settings

        if args.metrics_port is not None and not settings.METRICS_ENABLED:
            # A deployment's worker command may name the port whether or not the metrics are on.
            sys.stderr.write("ragmux: the metrics are off (METRICS_ENABLED), --metrics-port is not served\n")
        refuse_a_bad_start()
        address = worker_metrics_address(args.metrics_port)
        if address is not None:
            # Served from this process, which outlives the pool processes that do the work.
            folder = share_metrics(f"worker-{address[1]}")
            if not listen_for_metrics(address, WorkerMetrics(folder)):
                return 1
        return run_children(worker_commands())


def cmd_scheduler(args: argparse.Namespace) -> int:
    with environment():
        refuse_a_bad_start()
        return run_children({"scheduler": scheduler_command()})


def cmd_ingest_dir(args: argparse.Namespace) -> int:
    with environment():
        from ingestion.directory import DirectoryRefused, find_store, ingest_directory, plan_directory

        try:
            files = plan_directory(Path(args.path))
            store = find_store(args.store)
        except DirectoryRefused as exc:
            sys.stderr.write(f"Error: {exc}\n")
            return 1
        if args.dry_run:
            for planned in files:
                print(f"{planned.path}\t{planned.title}\t{planned.size} bytes")
            print(f"dry_run=true documents={len(files)}")
            return 0
        outcome = ingest_directory(store=store, files=files)
        for problem in outcome.refused:
            print(f"refused {problem}", file=sys.stderr)
        print(
            f"uploaded={outcome.uploaded} duplicates={outcome.duplicates} refused={len(outcome.refused)} "
            f"store={store.name!r}"
        )
        if outcome.stopped:
            sys.stderr.write(f"Error: stopped at {outcome.stopped}\n")
            return 1
    return 0


def _eval_configs(texts: list[str], labels: list[str]) -> list[dict]:
    """Each ``--config`` JSON object as a run's configuration, labelled by its ``--label`` or by
    its letter (A, B, …); SystemExit with the reason when one is not a valid search override."""
    from retrieval.serializers import SearchOverrides

    if len(labels) > len(texts):
        raise SystemExit(f"ragmux: {len(labels)} --label for {len(texts)} --config")
    configs = []
    for number, text in enumerate(texts):
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"ragmux: --config {text!r} is not JSON: {exc.msg}") from None
        data = SearchOverrides(data=overrides)
        if not data.is_valid():
            raise SystemExit(f"ragmux: --config {text!r} is not a search configuration: {json.dumps(data.errors)}")
        label = labels[number] if number < len(labels) else chr(ord("A") + number)
        configs.append({"label": label, "overrides": data.validated_data})
    return configs


EVAL_COLUMNS = ("nDCG@10", "recall@100", "MRR", "hit rate", "mean ms", "p95 ms")


def _eval_row(label: str, summary: dict) -> list[str]:
    scores = [f"{summary[name]:.4f}" for name in ("ndcg", "recall", "mrr", "hit_rate")]
    return [label, *scores, *(f"{summary[name]:.1f}" for name in ("latency_mean_ms", "latency_p95_ms"))]


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def cmd_eval(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.core.errors import ServiceError
        from ragmux.core.work_queue import worker_identity
        from retrieval.evaluation import run_services, selectors

        refuse_a_bad_start()
        configs = _eval_configs(args.config, args.label or [])
        try:
            evaluation_set = selectors.evaluation_set_named(store_name=args.store, set_name=args.set)
            runs = run_services.evaluation_runs_start(evaluation_set=evaluation_set, configs=configs, enqueue=False)
        except ServiceError as exc:
            sys.stderr.write(f"ragmux: {exc.message}\n")
            return 1
        owner = f"ragmux eval {worker_identity()}"
        for run in runs:
            sys.stderr.write(f"evaluating {run.label!r} over {run.questions_total} question(s)\n")
            run_services.evaluation_run_execute(run=run_services.evaluation_run_claim(run_id=run.pk, owner=owner))
        finished = [selectors.evaluation_run_get(evaluation_set=evaluation_set, run_id=run.pk) for run in runs]
        done = [run for run in finished if run.status == "done"]
        if done:
            _print_table([["configuration", *EVAL_COLUMNS], *(_eval_row(run.label, run.summary) for run in done)])
        for run in finished:
            if run.status != "done":
                sys.stderr.write(f"ragmux: {run.label!r} failed: {run.error}\n")
        if len(done) == 2:
            print(selectors.evaluation_comparison(a=done[0], b=done[1])[1])
    return 0 if len(done) == len(finished) else 1


def cmd_manage(args: argparse.Namespace) -> int:
    from django.core.management import execute_from_command_line

    with environment():
        execute_from_command_line(["ragmux manage", *args.rest])
    return 0


def _add_process_parsers(sub) -> None:
    """The subcommands that start ragmux's processes."""
    serve = sub.add_parser("serve", help="start the web server, a worker and the scheduler")
    serve.add_argument("--no-worker", action="store_true", help="start only the web server")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="start the Celery workers: ingestion, and evaluation runs beside it")
    worker.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the worker's metrics on PORT/metrics (its pool processes summed), on METRICS_LISTEN's host "
        "or else HOST; needs METRICS_ENABLED (default: on METRICS_LISTEN when it is set)",
    )
    worker.set_defaults(func=cmd_worker)
    sub.add_parser("scheduler", help="start the periodic scheduler (lease recovery)").set_defaults(func=cmd_scheduler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragmux", description="Self-hosted AI gateway with retrieval built in.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_process_parsers(sub)
    admin_commands.add_parsers(sub)

    ingest = sub.add_parser("ingest-dir", help="upload every supported file under a folder into a store")
    ingest.add_argument("--store", required=True, help="name of the RAG store")
    ingest.add_argument("--path", required=True, help="folder to walk")
    ingest.add_argument("--dry-run", action="store_true", help="list what would be uploaded, write nothing")
    ingest.set_defaults(func=cmd_ingest_dir)

    sub.add_parser("version", help="print the version").set_defaults(func=cmd_version)

    health = sub.add_parser("healthcheck", help="exit 0 when the web process (or this host's worker) answers")
    health.add_argument("--worker", action="store_true", help="ping this host's Celery worker instead")
    health.add_argument("--url", help="the health URL to read (default: http://HOST:PORT/healthz)")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    health.set_defaults(func=cmd_healthcheck)

    evaluate = sub.add_parser(
        "eval", help="evaluate search configurations over a store's evaluation set (in this process)"
    )
    evaluate.add_argument("--store", required=True, help="name of the RAG store")
    evaluate.add_argument("--set", required=True, help="name of the store's evaluation set")
    evaluate.add_argument(
        "--config",
        required=True,
        action="append",
        metavar="JSON",
        help='search overrides as a JSON object, e.g. \'{"mode": "lexical"}\' ({} for the store\'s settings); '
        "repeat to compare (with two, the second is compared with the first)",
    )
    evaluate.add_argument("--label", action="append", help="a name for each --config, in order (default: A, B, …)")
    evaluate.set_defaults(func=cmd_eval)

    manage = sub.add_parser("manage", help="run a Django management command")
    manage.add_argument("rest", nargs=argparse.REMAINDER)
    manage.set_defaults(func=cmd_manage)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    raise SystemExit(main())
