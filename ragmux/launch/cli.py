"""The `ragmux` command.

Every subcommand first describes its environment: with ``DATABASE_URL`` / ``REDIS_URL`` unset
it plans the embedded services (and their secrets) under the data folder, validates the
settings before anything is started, then starts what is missing and stops it again on exit.
"""

from __future__ import annotations

import argparse
import getpass
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from ragmux.core.paths import DEFAULT_DATA_DIR


def _data_dir() -> Path:
    return Path(os.environ.get("RAGMUX_DATA_DIR") or DEFAULT_DATA_DIR).resolve()


@contextmanager
def environment(*, start_services: bool = True):
    """Plans and starts the embedded services, sets up Django, and stops what it started."""
    from ragmux.launch.embedded import EmbeddedError, EmbeddedServices

    data_dir = _data_dir()
    os.environ.setdefault("RAGMUX_DATA_DIR", str(data_dir))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
    services = EmbeddedServices.plan(os.environ, data_dir)

    import django

    django.setup()  # validates every setting; a malformed one exits with "config: ..."
    try:
        if start_services:
            services.start(os.environ)
    except EmbeddedError as exc:
        services.stop()
        sys.stderr.write(f"ragmux: {exc}\n")
        raise SystemExit(1) from None
    try:
        yield services
    finally:
        from django.db import connections

        connections.close_all()
        services.stop()


def _migrate(verbosity: int = 0) -> None:
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=verbosity)


def _refuse_a_bad_start() -> None:
    """The start-up refusals, said by the command before any process starts."""
    from ragmux.core.encryption_key_check import check_encryption_key
    from ragmux.launch.checks import check_default_index_config

    check_encryption_key()
    check_default_index_config()


def cmd_migrate(args: argparse.Namespace) -> int:
    with environment():
        _migrate(verbosity=1)
        _refuse_a_bad_start()
    return 0


def cmd_createadmin(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.core.accounts import UserExists, user_create
        from ragmux.core.errors import InvalidInput

        _migrate()
        password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
        try:
            user, generated = user_create(username=args.username, password=password, role=args.role)
        except UserExists as exc:
            sys.stderr.write(f"ragmux: {exc}\n")
            return 1
        except InvalidInput as exc:
            sys.stderr.write(f"ragmux: password refused: {exc.message}\n")
            return 1
        print(f"created {args.role} {user.username!r}")
        if generated:
            print(f"password (shown once): {generated}")
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    from ragmux.core.crypto import generate_key
    from ragmux.launch.embedded import load_or_create_secrets, write_secrets

    new_key_text = args.new or generate_key()
    with environment() as services:
        from ragmux.launch.encryption_key_rotation import EncryptionKeyRotationFailed, rotate_encryption_key
        from ragmux.settings import decode_encryption_key

        _migrate()
        _refuse_a_bad_start()
        try:
            count = rotate_encryption_key(new_key=decode_encryption_key(new_key_text))
        except EncryptionKeyRotationFailed as exc:
            sys.stderr.write(f"ragmux: key rotation failed, nothing was changed: {exc}\n")
            return 1
        print(f"re-encrypted {count} credential(s) with the new key")
        if services.secrets_from_file:
            values = load_or_create_secrets(services.data_dir)
            values["RAGMUX_ENCRYPTION_KEY"] = new_key_text
            write_secrets(services.data_dir, values)
            print(f"the new key is saved in {services.data_dir / 'secrets.env'}; restart ragmux to use it")
        else:
            print("install this key as RAGMUX_ENCRYPTION_KEY and restart every ragmux process:")
            print(new_key_text)
    return 0


def cmd_reset_password(args: argparse.Namespace) -> int:
    with environment():
        from django.contrib.auth.models import User

        from ragmux.core.accounts import user_reset_password
        from ragmux.core.errors import InvalidInput
        from ragmux.core.signin import forget_failures

        _migrate()
        user = User.objects.filter(username__iexact=args.username).first()
        if user is None:
            sys.stderr.write(f"ragmux: no user {args.username!r}\n")
            return 1
        password = None
        if not args.generate:
            password = (getpass.getpass("new password: ") if sys.stdin.isatty() else sys.stdin.readline()).rstrip("\n")
            if not password:
                sys.stderr.write("ragmux: no password given (type one, pipe one in, or pass --generate)\n")
                return 1
        try:
            generated = user_reset_password(user=user, password=password)
        except InvalidInput as exc:
            sys.stderr.write(f"ragmux: password refused: {exc.message}\n")
            return 1
        forget_failures(username=user.username)
        print(f"password reset for {user.username!r}: their sessions ended and their failed sign-ins were forgotten")
        if generated:
            print(f"password (shown once): {generated}")
        if not user.is_active:
            print(f"note: {user.username!r} is deactivated and still cannot sign in")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    print(f"ragmux {ragmux_version()}")
    return 0


def ragmux_version() -> str:
    return importlib.metadata.version("ragmux")


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


def cmd_backup(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.launch.backup import BackupFailed, backup_create

        target = Path(args.output)
        if not target.is_dir() and not target.parent.is_dir():
            sys.stderr.write(f"ragmux: {target.parent} is not a folder\n")
            return 1
        try:
            path, manifest = backup_create(target=target, version=ragmux_version())
        except BackupFailed as exc:
            sys.stderr.write(f"ragmux: backup failed, nothing was written: {exc}\n")
            return 1
        counts = ", ".join(f"{count} {label}" for label, count in manifest["counts"].items())
        print(f"backup written to {path} ({manifest['dump_bytes']} bytes of database: {counts})")
        print("the encryption key is not in it: keep RAGMUX_ENCRYPTION_KEY (or the data folder's secrets.env) apart")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.launch.backup import BackupFailed, backup_restore, sealed_with_this_key
        from ragmux.launch.encryption_key_rotation import credentials_of_another_key_cleared

        try:
            manifest = backup_restore(path=Path(args.file), replace=args.replace)
        except BackupFailed as exc:
            sys.stderr.write(f"ragmux: restore refused or failed, the database is as it was: {exc}\n")
            return 1
        _migrate()  # a backup made by an older version is brought up to this one
        cleared = [] if sealed_with_this_key(manifest) else credentials_of_another_key_cleared()
        _refuse_a_bad_start()
        counts = ", ".join(f"{count} {label}" for label, count in manifest["counts"].items())
        print(f"restored the backup of {manifest['created_at']} ({counts})")
        if cleared:
            print(
                f"the backup's API keys were sealed with another encryption key: {len(cleared)} connection(s) "
                f"need theirs entered again ({', '.join(cleared)}); everything else is restored"
            )
    return 0


# A restarted child that dies again waits twice as long, up to this; one that ran for
# BACKOFF_RESET seconds counts as healthy and is restarted at once again.
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0
BACKOFF_RESET = 60.0


class _DaemonWatch:
    """An embedded service that runs as a daemon, not as our child (the embedded Redis): started
    again when it dies, with the children's back-off."""

    def __init__(self, name: str, *, alive, start) -> None:
        self.name, self._alive, self._start = name, alive, start
        self._backoff = BACKOFF_FIRST
        self._started_at = time.monotonic()
        self._restart_at: float | None = None

    def check(self, now: float) -> None:
        from ragmux.launch.embedded import EmbeddedError

        if self._restart_at is None:
            if self._alive():
                return
            if now - self._started_at >= BACKOFF_RESET:
                self._backoff = BACKOFF_FIRST
            sys.stderr.write(f"ragmux: {self.name} exited; restarting it in {self._backoff:g} s\n")
            self._restart_at = now + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
        elif now >= self._restart_at:
            self._restart_at = None
            self._started_at = now
            try:
                self._start()
            except EmbeddedError as exc:
                sys.stderr.write(f"ragmux: {self.name} did not restart: {exc}\n")
            else:
                sys.stderr.write(f"ragmux: {self.name} restarted\n")


def _run_children(
    commands: dict[str, list[str]],
    *,
    restart: frozenset[str] = frozenset(),
    on_ready=None,
    ready_url=None,
    daemons: tuple[_DaemonWatch, ...] = (),
) -> int:
    """Runs the child processes until Ctrl-C, then stops them all.

    A child named in ``restart`` that exits is started again after a back-off; any other child
    that exits stops the rest. The ``daemons`` are started again likewise.
    """
    children: dict[str, subprocess.Popen] = {}
    started_at: dict[str, float] = {}
    backoff = dict.fromkeys(commands, BACKOFF_FIRST)
    restart_at: dict[str, float] = {}
    stopping = False

    def request_stop(signum, frame):
        nonlocal stopping
        stopping = True

    def start(name: str) -> None:
        # Each child gets its own process group so Ctrl-C reaches it only through us.
        children[name] = subprocess.Popen(commands[name], start_new_session=True)
        started_at[name] = time.monotonic()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    exit_code = 0
    try:
        for name in commands:
            start(name)
        if ready_url and on_ready:
            _wait_until_ready(ready_url, children)
            on_ready()
        while not stopping:
            now = time.monotonic()
            for name, child in children.items():
                if name in restart_at or child.poll() is None:
                    continue
                if name not in restart:
                    sys.stderr.write(f"ragmux: {name} exited with status {child.returncode}; stopping\n")
                    exit_code = 1
                    stopping = True
                    break
                if now - started_at[name] >= BACKOFF_RESET:
                    backoff[name] = BACKOFF_FIRST
                sys.stderr.write(
                    f"ragmux: {name} exited with status {child.returncode}; restarting it in {backoff[name]:g} s\n"
                )
                restart_at[name] = now + backoff[name]
                backoff[name] = min(backoff[name] * 2, BACKOFF_MAX)
            for name, due in list(restart_at.items()):
                if not stopping and now >= due:
                    del restart_at[name]
                    start(name)
                    sys.stderr.write(f"ragmux: {name} restarted (pid {children[name].pid})\n")
            for daemon in daemons if not stopping else ():
                daemon.check(now)
            time.sleep(0.2)
    except _NotReady as exc:
        sys.stderr.write(f"ragmux: {exc}\n")
        exit_code = 1
    finally:
        for child in children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exit_code


class _NotReady(Exception):
    pass


def _wait_until_ready(url: str, children: dict[str, subprocess.Popen]) -> None:
    import urllib.request

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for name, child in children.items():
            if child.poll() is not None:
                raise _NotReady(f"{name} exited with status {child.returncode} during start-up")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise _NotReady(f"the web server did not answer {url} within 120 s")


def _share_metrics(name: str) -> Path:
    """Puts the processes this command starts in prometheus_client's multiprocess mode, in a
    folder of their own under the data folder, emptied first: counters start again with the
    processes, as Prometheus expects of a restart. This process itself stays out of it."""
    from ragmux.core.metrics import MULTIPROCESS_DIR

    folder = _data_dir() / "metrics" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ[MULTIPROCESS_DIR] = str(folder)
    return folder


def _celery(*args: str) -> list[str]:
    from django.conf import settings

    # With JSON logs, no start-up banner: it is many lines of text among the JSON ones.
    quiet = ["--quiet"] if settings.LOG_FORMAT == "json" else []
    return [sys.executable, "-m", "celery", "-A", "ragmux", *quiet, *args]


# A worker's Celery name is this, its host's name and the launching process's id.
WORKER_NAME_PREFIX = "ragmux@"


# The evaluation worker node's name starts with this instead (ragmux.settings.EVALUATION_QUEUE).
EVALUATION_WORKER_NAME_PREFIX = "ragmux-evaluation@"


def worker_command() -> list[str]:
    """The ingestion worker node: the default queue (ingestion and the scheduler's jobs)."""
    from django.conf import settings

    return _celery(
        "worker",
        "--loglevel",
        settings.LOG_LEVEL,
        "--queues",
        settings.CELERY_TASK_DEFAULT_QUEUE,
        "--concurrency",
        str(settings.INGEST_WORKERS),
        "--hostname",
        f"{WORKER_NAME_PREFIX}{os.uname().nodename}-{os.getpid()}",
    )


def evaluation_worker_command() -> list[str]:
    """The evaluation worker node beside it: one run at a time, on a queue of its own, so that
    a run never holds up ingestion."""
    from django.conf import settings

    return _celery(
        "worker",
        "--loglevel",
        settings.LOG_LEVEL,
        "--queues",
        settings.EVALUATION_QUEUE,
        "--concurrency",
        "1",
        "--hostname",
        f"{EVALUATION_WORKER_NAME_PREFIX}{os.uname().nodename}-{os.getpid()}",
    )


def worker_commands() -> dict[str, list[str]]:
    """What `ragmux worker` (and `ragmux serve`) start: both worker nodes."""
    return {"worker": worker_command(), "evaluation worker": evaluation_worker_command()}


def scheduler_command() -> list[str]:
    from django.conf import settings

    schedule = Path(settings.RAGMUX_DATA_DIR) / "celerybeat-schedule"
    schedule.parent.mkdir(parents=True, exist_ok=True)
    return _celery("beat", "--loglevel", settings.LOG_LEVEL, "--schedule", str(schedule))


def web_command() -> list[str]:
    from django.conf import settings

    return [
        sys.executable,
        "-m",
        "uvicorn",
        "ragmux.asgi:application",
        "--host",
        settings.HOST,
        "--port",
        str(settings.PORT),
        "--workers",
        str(settings.WEB_WORKERS),
        "--no-access-log",
        "--lifespan",
        "on",
        "--timeout-graceful-shutdown",
        "15",
    ]


def cmd_serve(args: argparse.Namespace) -> int:
    from ragmux.launch.embedded import port_is_free

    with environment() as services:
        from django.conf import settings

        from ragmux.core.errors import InvalidInput
        from ragmux.launch.first_run import ensure_first_admin, ensure_local_connection, one_start_at_a_time

        if not port_is_free(settings.PORT, settings.HOST):
            sys.stderr.write(f"ragmux: {settings.HOST}:{settings.PORT} is already in use (set PORT)\n")
            return 1
        with one_start_at_a_time():
            _migrate()
            _refuse_a_bad_start()
            try:
                admin_notice = ensure_first_admin()
            except InvalidInput as exc:
                sys.stderr.write(f"ragmux: RAGMUX_ADMIN_PASSWORD refused: {exc.message}\n")
                return 1
            ensure_local_connection()
        shown_host = "127.0.0.1" if settings.HOST in ("0.0.0.0", "::") else settings.HOST
        base = f"http://{shown_host}:{settings.PORT}"

        def announce() -> None:
            print(f"ragmux is running. Dashboard: {base}/admin/", flush=True)
            if services.postgres is not None:
                log = services.postgres.log_file
                print(f"Embedded PostgreSQL: {os.environ['DATABASE_URL']} (log: {log})", flush=True)
            if services.redis is not None:
                print(f"Embedded Redis: {os.environ['REDIS_URL']}", flush=True)
            if admin_notice:
                print(admin_notice, flush=True)
            print("Press Ctrl-C to stop.", flush=True)

        # The web server's workers, and the worker and scheduler started with them, are summed
        # by every web worker's /metrics, or by this process's METRICS_LISTEN.
        _share_metrics(f"serve-{settings.PORT}")
        if settings.METRICS_LISTEN is not None:
            from ragmux.views import HostMetrics

            if not _listen_for_metrics(settings.METRICS_LISTEN, HostMetrics()):
                return 1
        commands = {"web": web_command()}
        if not args.no_worker:
            commands.update(worker_commands())
            commands["scheduler"] = scheduler_command()
        daemons = ()
        if services.redis is not None:
            redis = services.redis
            daemons = (
                _DaemonWatch(
                    "embedded Redis",
                    alive=lambda: redis.running_port() is not None,
                    start=partial(redis.start, redis.running_port()),
                ),
            )
        return _run_children(
            commands,
            restart=frozenset(commands) - {"web"},
            on_ready=announce,
            ready_url=f"{base}/healthz",
            daemons=daemons,
        )


def _listen_for_metrics(address: tuple[str, int], collector) -> bool:
    from django.conf import settings

    from ragmux.launch import metrics_listener

    try:
        metrics_listener.start(address, collector, settings.METRICS_TOKEN)
    except OSError as exc:
        sys.stderr.write(f"ragmux: cannot serve metrics on {address[0]}:{address[1]}: {exc}\n")
        return False
    return True


class _WorkerMetrics:
    """A worker's metrics: those of its pool processes, summed, and the build's."""

    def __init__(self, folder: Path):
        from ragmux.core.metrics import BuildInfoCollector, multiprocess_registry

        self._parts = (multiprocess_registry(str(folder)), BuildInfoCollector())

    def collect(self):
        for part in self._parts:
            yield from part.collect()


def worker_metrics_address(metrics_port: int | None) -> tuple[str, int] | None:
    """Where a worker serves its metrics: ``--metrics-port`` on METRICS_LISTEN's host (else
    HOST), or METRICS_LISTEN itself; None when neither is given or the metrics are off."""
    from django.conf import settings

    if not settings.METRICS_ENABLED:
        return None
    if metrics_port is None:
        return settings.METRICS_LISTEN
    host = settings.METRICS_LISTEN[0] if settings.METRICS_LISTEN is not None else settings.HOST
    return host, metrics_port


def cmd_worker(args: argparse.Namespace) -> int:
    with environment():
        from django.conf import settings

        if args.metrics_port is not None and not settings.METRICS_ENABLED:
            # A deployment's worker command may name the port whether or not the metrics are on.
            sys.stderr.write("ragmux: the metrics are off (METRICS_ENABLED), --metrics-port is not served\n")
        _refuse_a_bad_start()
        address = worker_metrics_address(args.metrics_port)
        if address is not None:
            # Served from this process, which outlives the pool processes that do the work.
            folder = _share_metrics(f"worker-{address[1]}")
            if not _listen_for_metrics(address, _WorkerMetrics(folder)):
                return 1
        return _run_children(worker_commands())


def cmd_scheduler(args: argparse.Namespace) -> int:
    with environment():
        _refuse_a_bad_start()
        return _run_children({"scheduler": scheduler_command()})


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
        from retrieval.evaluation import selectors, services

        _refuse_a_bad_start()
        configs = _eval_configs(args.config, args.label or [])
        try:
            evaluation_set = selectors.evaluation_set_named(store_name=args.store, set_name=args.set)
            runs = services.evaluation_runs_start(evaluation_set=evaluation_set, configs=configs, enqueue=False)
        except ServiceError as exc:
            sys.stderr.write(f"ragmux: {exc.message}\n")
            return 1
        owner = f"ragmux eval {worker_identity()}"
        for run in runs:
            sys.stderr.write(f"evaluating {run.label!r} over {run.questions_total} question(s)\n")
            services.evaluation_run_execute(run=services.evaluation_run_claim(run_id=run.pk, owner=owner))
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragmux", description="Self-hosted AI gateway with retrieval built in.")
    sub = parser.add_subparsers(dest="command", required=True)

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
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)

    create = sub.add_parser("createadmin", help="create a user (an admin unless --role says otherwise)")
    create.add_argument("--username", required=True)
    create.add_argument("--role", choices=("admin", "editor", "viewer"), default="admin")
    create.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    create.set_defaults(func=cmd_createadmin)

    rotate = sub.add_parser("rotate-key", help="re-encrypt every stored credential with a new key")
    rotate.add_argument(
        "--new",
        metavar="KEY",
        help="the new key (32 bytes, base64url), written --new=KEY since a key may start with '-'; "
        "generated when omitted",
    )
    rotate.set_defaults(func=cmd_rotate_key)

    ingest = sub.add_parser("ingest-dir", help="upload every supported file under a folder into a store")
    ingest.add_argument("--store", required=True, help="name of the RAG store")
    ingest.add_argument("--path", required=True, help="folder to walk")
    ingest.add_argument("--dry-run", action="store_true", help="list what would be uploaded, write nothing")
    ingest.set_defaults(func=cmd_ingest_dir)

    reset = sub.add_parser("reset-password", help="set a user's password and lift their sign-in lockout")
    reset.add_argument("username")
    reset.add_argument("--generate", action="store_true", help="generate the password and print it once")
    reset.set_defaults(func=cmd_reset_password)

    sub.add_parser("version", help="print the version").set_defaults(func=cmd_version)

    health = sub.add_parser("healthcheck", help="exit 0 when the web process (or this host's worker) answers")
    health.add_argument("--worker", action="store_true", help="ping this host's Celery worker instead")
    health.add_argument("--url", help="the health URL to read (default: http://HOST:PORT/healthz)")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    health.set_defaults(func=cmd_healthcheck)

    backup = sub.add_parser("backup", help="write a backup of the database (pg_dump) and its manifest")
    backup.add_argument(
        "--output", default=".", help="a folder (a dated file is made in it) or the file to write (default: .)"
    )
    backup.set_defaults(func=cmd_backup)

    restore = sub.add_parser("restore", help="restore a backup into an empty database")
    restore.add_argument("file", help="the backup file")
    restore.add_argument("--replace", action="store_true", help="drop what the database holds first")
    restore.set_defaults(func=cmd_restore)

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
