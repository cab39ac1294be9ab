"""The `ragmux` command as an operator runs it: in a subprocess."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest
import redis

from gateway.connections.credentials import connection_key_aad
from gateway.connections.models import ModelConnection
from gateway.connections.services import connection_create
from ragmux.core.crypto import generate_key, unseal
from ragmux.launch.embedded import ROOT_MODE_HOME, free_port
from ragmux.settings import decode_encryption_key
from tests.helpers import METRICS_AUTHORIZATION, METRICS_ENV, run_ragmux, settled

EMBEDDED_ONLY = (
    "DATABASE_URL",
    "REDIS_URL",
    "DJANGO_SECRET_KEY",
    "RAGMUX_ENCRYPTION_KEY",
    "PRIVATE_UPSTREAM_ALLOWLIST",
)


@pytest.mark.django_db(transaction=True)
def test_rotate_key_re_encrypts_every_credential(subprocess_env):
    connection = connection_create(
        name="openai",
        provider_type="openai",
        base_url="",
        model_name="text-embedding-3-small",
        dimensions=None,
        api_key="sk-rotate-me-0123456789",
    )
    # One key in 64 starts with "-": the `=` form the help names must take it too.
    new_key = "-" + generate_key()[1:]
    result = run_ragmux(subprocess_env, "rotate-key", f"--new={new_key}")
    assert result.returncode == 0, result.stderr
    assert "re-encrypted 1 credential(s) with the new key" in result.stdout
    assert new_key in result.stdout
    sealed = ModelConnection.objects.get(pk=connection.pk).api_key_sealed
    opened = unseal(sealed, aad=connection_key_aad(connection.pk), key=decode_encryption_key(new_key))
    assert opened == b"sk-rotate-me-0123456789"
    old_key_start = run_ragmux(subprocess_env, "migrate")
    assert "startup refused" in old_key_start.stderr
    new_key_start = run_ragmux({**subprocess_env, "RAGMUX_ENCRYPTION_KEY": new_key}, "migrate")
    assert new_key_start.returncode == 0, new_key_start.stderr


@pytest.mark.django_db(transaction=True)
def test_createadmin_makes_a_user_in_the_chosen_role(subprocess_env, settings):
    from django.conf import global_settings
    from django.contrib.auth.models import User

    from ragmux.core.roles import user_role

    result = run_ragmux(
        subprocess_env,
        "createadmin",
        "--username",
        "erin",
        "--role",
        "editor",
        "--password-stdin",
        stdin="a long enough password\n",
    )
    assert result.returncode == 0, result.stderr
    user = User.objects.get(username="erin")
    assert user_role(user) == "editor"
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS  # the subprocess used the real hasher
    assert user.check_password("a long enough password")
    again = run_ragmux(subprocess_env, "createadmin", "--username", "ERIN")
    assert again.returncode == 1
    assert "already exists" in again.stderr


@pytest.mark.django_db(transaction=True)
def test_createadmin_applies_the_password_validators(subprocess_env):
    from django.contrib.auth.models import User

    result = run_ragmux(subprocess_env, "createadmin", "--username", "weak", "--password-stdin", stdin="x\n")
    assert result.returncode == 1
    assert "ragmux: password refused: This password is too short." in result.stderr
    assert "Traceback" not in result.stderr
    assert not User.objects.filter(username="weak").exists()


@pytest.mark.django_db(transaction=True)
def test_serve_refuses_a_weak_first_admin_password(subprocess_env):
    env = {**subprocess_env, "RAGMUX_ADMIN_PASSWORD": "x", "PORT": str(free_port())}
    result = run_ragmux(env, "serve", "--no-worker")
    assert result.returncode == 1
    assert "ragmux: RAGMUX_ADMIN_PASSWORD refused: This password is too short." in result.stderr


class Served:
    """`ragmux serve` in a subprocess, on the embedded default, reading what it prints."""

    def __init__(self, data_dir, port, *, log_file):
        env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_ONLY}
        env.update(
            {
                "RAGMUX_DATA_DIR": str(data_dir),
                "PORT": str(port),
                "INGEST_WORKERS": "1",
                "INGEST_REQUEUE_INTERVAL": "0.5",  # several lease sweeps while the test runs
            }
        )
        with open(log_file, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ragmux.launch.cli", "serve"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.lines: list[str] = []

    def wait_for(self, pattern: str, timeout: float = 180) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"ragmux serve exited: {self.lines}")
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"{pattern!r} not printed: {self.lines}")

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def celery_child(self, kind: str) -> psutil.Process | None:
        """The running `celery worker` (the ingestion node) or `celery beat` started by serve itself."""
        for child in alive(psutil.Process(self.process.pid).children()):
            command = child.cmdline()
            if kind in command and "evaluation" not in command:
                return child
        return None

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def data_dir_processes(data_dir) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if str(data_dir) in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except psutil.Error:
            continue
    return alive(found)


def poll(condition, message: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.2)


@pytest.fixture
def data_dir(tmp_path):
    """A data folder under pytest's private (0700) temp folder, and its cluster removed after."""
    folder = tmp_path / "var"
    yield folder
    if (folder / "pg").is_symlink():  # root mode put the cluster under /var/lib/ragmux
        shutil.rmtree((folder / "pg").resolve().parent)


def parent_modes(path) -> dict[str, int]:
    return {str(parent): parent.stat().st_mode for parent in path.parents}


@pytest.mark.skipif(os.geteuid() != 0, reason="root mode: PostgreSQL runs as a system user")
def test_as_root_the_embedded_default_runs_in_a_private_folder_and_opens_none_up(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    data_dir = private / "var"
    before = parent_modes(data_dir)
    env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_ONLY}
    try:
        result = run_ragmux({**env, "RAGMUX_DATA_DIR": str(data_dir)}, "migrate")
        assert result.returncode == 0, result.stderr
        assert parent_modes(data_dir) == before
        cluster = (data_dir / "pg").resolve()
        assert cluster.parent.parent == ROOT_MODE_HOME
        assert (cluster / "PG_VERSION").exists()
    finally:
        if (data_dir / "pg").is_symlink():
            shutil.rmtree((data_dir / "pg").resolve().parent)


@pytest.mark.slow
def test_serve_starts_the_embedded_default_and_stops_everything(tmp_path, data_dir):
    port = free_port()
    served = Served(data_dir, port, log_file=tmp_path / "serve.log")
    try:
        url = served.wait_for(r"Dashboard: (http://\S+/admin/)").group(1)
        database_port = served.wait_for(r"Embedded PostgreSQL: postgres://\S+@127\.0\.0\.1:(\d+)/ragmux").group(1)
        password = served.wait_for(r"with password (\S+) \(shown once").group(1)
        assert url == f"http://127.0.0.1:{port}/admin/"
        assert httpx.get(f"{url}login/").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz").json()
        assert (ready["ready"], ready["status"]) == (True, "ok")
        login = httpx.post(f"{url}api/login", json={"username": "admin", "password": password, "bearer": True})
        assert login.status_code == 200
        token = login.json()["token"]
        connections = httpx.get(f"{url}api/models", headers={"Authorization": f"Bearer {token}"}).json()
        assert [(c["name"], c["provider_type"], c["dimensions"]) for c in connections] == [("local", "local", 384)]
        children = served.descendants()
        assert len(children) >= 3  # web, worker, scheduler (and their own children)
        time.sleep(3)  # several lease sweeps
    finally:
        exit_code = served.stop()
    assert exit_code == 0
    assert settled(lambda: alive(children) + data_dir_processes(data_dir), within=1) == []
    assert (data_dir / "secrets.env").stat().st_mode & 0o777 == 0o600
    log = (tmp_path / "serve.log").read_text()
    assert "Uvicorn running" in log  # the processes' own output is there...
    assert "requeue" not in log  # ...but the periodic lease sweep does not log every run

    again = Served(data_dir, port, log_file=tmp_path / "serve.log")
    try:
        again.wait_for(r"Dashboard: ")
        # The database keeps its port across restarts, so a client configured once keeps working.
        assert again.wait_for(r"Embedded PostgreSQL: \S+:(\d+)/").group(1) == database_port
        assert not any("with password" in line for line in again.lines)
        login = httpx.post(f"{url}api/login", json={"username": "admin", "password": password, "bearer": True})
        assert login.status_code == 200  # the data, and the admin, survived the restart
    finally:
        assert again.stop() == 0
    assert settled(lambda: data_dir_processes(data_dir), within=1) == []


@pytest.mark.slow
def test_serve_restarts_a_killed_worker_while_the_web_keeps_answering(tmp_path, data_dir):
    port = free_port()
    log_file = tmp_path / "serve.log"
    served = Served(data_dir, port, log_file=log_file)
    try:
        served.wait_for(r"Dashboard: ")
        worker = served.celery_child("worker")
        worker.kill()  # kill -9 of the Celery worker's main process
        poll(lambda: "ragmux: worker exited with status -9; restarting it in 1 s" in log_file.read_text(), "the notice")
        poll(lambda: (served.celery_child("worker") or worker).pid != worker.pid, "a new worker")
        assert "ragmux: worker restarted" in log_file.read_text()
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert served.process.poll() is None
    finally:
        assert served.stop() == 0


@pytest.mark.slow
def test_serve_restarts_the_embedded_redis_when_it_dies(tmp_path, data_dir):
    port = free_port()
    log_file = tmp_path / "serve.log"
    served = Served(data_dir, port, log_file=log_file)
    try:
        served.wait_for(r"Dashboard: ")
        redis_url = served.wait_for(r"Embedded Redis: (\S+)").group(1)
        redis_server = psutil.Process(int((data_dir / "redis" / "redis.pid").read_text()))
        redis_server.kill()  # kill -9 of redis-server
        poll(lambda: "ragmux: embedded Redis exited; restarting it in 1 s" in log_file.read_text(), "the notice")
        poll(lambda: "ragmux: embedded Redis restarted" in log_file.read_text(), "the restart")
        with redis.Redis.from_url(redis_url, socket_timeout=5) as client:
            assert client.ping()  # at the same address
        assert int((data_dir / "redis" / "redis.pid").read_text()) != redis_server.pid
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert served.process.poll() is None
    finally:
        assert served.stop() == 0
    assert settled(lambda: data_dir_processes(data_dir), within=1) == []


COMMITS = 'ragmux_ingest_stage_seconds_count{stage="commit"}'
REFUSED = 'ragmux_v1_requests_total{endpoint="models",status="401"}'


def served_value(url: str, series: str) -> float | None:
    try:
        text = httpx.get(url, headers=METRICS_AUTHORIZATION).text
    except httpx.TransportError:
        return None
    return next((float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(series)), None)


def serve_without_worker(env: dict[str, str], tmp_path) -> subprocess.Popen:
    with open(tmp_path / "serve.log", "a") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "ragmux.launch.cli", "serve", "--no-worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_web_workers_metrics_are_served_together_and_outlive_a_redis_restart(subprocess_env, tmp_path):
    from django.conf import settings

    port = free_port()
    env = {
        **subprocess_env,
        "RAGMUX_DATA_DIR": str(tmp_path),
        "PORT": str(port),
        "WEB_WORKERS": "2",
        "RAGMUX_ADMIN_PASSWORD": "a long enough password",
        **METRICS_ENV,
    }
    served = serve_without_worker(env, tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        poll(lambda: served_value(f"{base}/metrics", "ragmux_") is not None or served.poll() is not None, "the server")
        for _ in range(20):  # a new connection each, for either web worker to take
            assert httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer sk-proj-wrong"}).status_code == 401
        # Each scrape is answered by one of the workers, and counts the calls of both.
        poll(lambda: [served_value(f"{base}/metrics", REFUSED) for _ in range(4)] == [20.0] * 4, "the 20 calls")
        with redis.Redis.from_url(settings.REDIS_URL) as suite_redis:
            suite_redis.flushdb()  # what a Redis restarted without its data holds
        assert [served_value(f"{base}/metrics", REFUSED) for _ in range(6)] == [20.0] * 6
    finally:
        served.send_signal(signal.SIGINT)
        served.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_serves_the_metrics_of_its_pool_processes(subprocess_env, fake_connection, tmp_path):
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create

    port = free_port()
    env = {**subprocess_env, "INGEST_WORKERS": "2", "RAGMUX_DATA_DIR": str(tmp_path), **METRICS_ENV}
    with open(tmp_path / "worker.log", "a") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ragmux.launch.cli", "worker", "--metrics-port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    try:
        store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
        files = [IncomingFile(filename=f"{n}.txt", data=f"text {n}".encode()) for n in range(4)]
        document_upload(store=store, files=files)  # each committed, each waking the worker
        url = f"http://127.0.0.1:{port}/metrics"
        poll(lambda: served_value(url, COMMITS) == 4.0, "the four documents in the worker's metrics")
        assert served_value(url, 'ragmux_ingest_jobs_total{outcome="ready"}') == 4.0
        assert served_value(url, 'ragmux_ingest_claims_total{outcome="claimed"}') >= 1.0
        assert served_value(url, "ragmux_build_info{") == 1.0
        refused = httpx.get(url)
        assert (refused.status_code, "ragmux_" in refused.text) == (401, False)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def api_login(client, username, password):
    return client.post("/admin/api/login", json={"username": username, "password": password})


@pytest.mark.django_db(transaction=True)
def test_reset_password_lets_a_locked_out_admin_back_in(api, settings, subprocess_env):
    from django.conf import global_settings

    from tests.factories import PASSWORD, UserFactory

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS  # the subprocess uses the real hasher
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_RATE_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 3
    UserFactory(username="locked-admin", role="admin")
    client = api()
    for _ in range(3):
        assert api_login(client, "locked-admin", "a wrong guess").status_code == 401
    assert api_login(client, "locked-admin", PASSWORD).status_code == 429

    result = run_ragmux(subprocess_env, "reset-password", "LOCKED-ADMIN", "--generate")
    assert result.returncode == 0, result.stderr
    generated = re.search(r"password \(shown once\): (\S+)", result.stdout).group(1)
    assert api_login(client, "locked-admin", generated).status_code == 200
    assert api_login(client, "locked-admin", PASSWORD).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_reset_password_reads_the_password_and_applies_the_validators(api, settings, subprocess_env):
    from django.conf import global_settings

    from tests.factories import UserFactory

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    UserFactory(username="erin", role="editor")
    weak = run_ragmux(subprocess_env, "reset-password", "erin", stdin="short\n")
    assert weak.returncode == 1
    assert "password refused" in weak.stderr
    common = run_ragmux(subprocess_env, "reset-password", "erin", stdin="12345678\n")
    assert common.returncode == 1
    assert "This password is too common. This password is entirely numeric." in common.stderr
    chosen = run_ragmux(subprocess_env, "reset-password", "erin", stdin="a long enough new password\n")
    assert chosen.returncode == 0, chosen.stderr
    assert "shown once" not in chosen.stdout
    assert api_login(api(), "erin", "a long enough new password").status_code == 200
    unknown = run_ragmux(subprocess_env, "reset-password", "nobody", "--generate")
    assert unknown.returncode == 1
    assert "no user 'nobody'" in unknown.stderr


def test_version_prints_the_installed_version():
    import importlib.metadata

    result = run_ragmux(dict(os.environ), "version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ragmux {importlib.metadata.version('ragmux')}"


@pytest.mark.django_db(transaction=True)
def test_healthcheck_answers_for_the_web_process(subprocess_env):
    from tests.helpers import web_process

    down = run_ragmux(subprocess_env, "healthcheck", "--url", f"http://127.0.0.1:{free_port()}/healthz")
    assert down.returncode == 1
    assert "did not answer" in down.stderr
    with web_process(subprocess_env):
        up = run_ragmux(subprocess_env, "healthcheck")
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip() == "web ok"


@pytest.mark.parametrize(
    ("enabled", "listen", "metrics_port", "address"),
    [
        (False, None, 9100, None),
        (True, None, None, None),
        (True, None, 9100, ("127.0.0.1", 9100)),
        (True, ("::1", 9108), None, ("::1", 9108)),
        (True, ("::1", 9108), 9100, ("::1", 9100)),
    ],
)
def test_a_worker_serves_its_metrics_where_the_settings_say(settings, enabled, listen, metrics_port, address):
    from ragmux.launch.processes import worker_metrics_address

    settings.METRICS_ENABLED, settings.METRICS_LISTEN, settings.HOST = enabled, listen, "127.0.0.1"
    assert worker_metrics_address(metrics_port) == address


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_healthcheck_pings_this_hosts_worker(subprocess_env, tmp_path):
    env = {**subprocess_env, "RAGMUX_DATA_DIR": str(tmp_path)}
    absent = run_ragmux(env, "healthcheck", "--worker", "--timeout", "1")
    assert absent.returncode == 1
    assert "no worker of this host" in absent.stderr
    worker = subprocess.Popen(
        [sys.executable, "-m", "ragmux.launch.cli", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        poll(
            lambda: run_ragmux(env, "healthcheck", "--worker", "--timeout", "1").returncode == 0,
            "the worker answering the health check's ping",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


# Transactional: `ragmux serve` creates its first admin in the test database, which a flush removes.
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_metrics_listener_serves_the_hosts_metrics_and_the_public_port_does_not(subprocess_env, tmp_path):
    port, metrics_port = free_port(), free_port()
    env = {
        **subprocess_env,
        "RAGMUX_DATA_DIR": str(tmp_path),
        "PORT": str(port),
        "RAGMUX_ADMIN_PASSWORD": "a long enough password",
        "METRICS_ENABLED": "true",
        "METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
    }
    served = serve_without_worker(env, tmp_path)
    listener = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        poll(lambda: answers(f"http://127.0.0.1:{port}/healthz") or served.poll() is not None, "the web server")
        assert served.poll() is None
        assert served_value(listener, "ragmux_build_info{") == 1.0
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
        # The web worker's count, read by `ragmux serve` itself from the folder they share.
        poll(lambda: served_value(listener, REFUSED) == 1.0, "the refused call")
        assert httpx.get(listener).headers["Cache-Control"] == "no-store"
        for authorization in ({}, METRICS_AUTHORIZATION):
            public = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=authorization)
            assert (public.status_code, "ragmux_" in public.text) == (404, False)
        # The database's gauges too.
        assert served_value(listener, "ragmux_rag_index_missing") == 0.0
    finally:
        served.send_signal(signal.SIGINT)
        served.wait(timeout=60)


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"METRICS_ENABLED": "true"}, "METRICS_ENABLED: /metrics would publish per-project usage and spend"),
        ({"METRICS_ENABLED": "maybe"}, "METRICS_ENABLED: 'maybe' is not a boolean"),
        ({"METRICS_LISTEN": "127.0.0.1:9108"}, "METRICS_LISTEN: set, but METRICS_ENABLED is not true"),
        ({"METRICS_ENABLED": "true", "METRICS_LISTEN": "127.0.0.1"}, "METRICS_LISTEN: '127.0.0.1' is not host:port"),
    ],
)
def test_metrics_settings_that_would_publish_them_or_make_no_sense_stop_the_start(subprocess_env, environment, message):
    result = run_ragmux({**subprocess_env, **environment}, "migrate")
    assert result.returncode != 0
    assert f"config: {message}" in result.stderr


@pytest.mark.django_db(transaction=True)
def test_eval_prints_each_configurations_scores_and_their_comparison(subprocess_env, evaluation_set):
    from retrieval.models import EvaluationRun

    result = run_ragmux(
        subprocess_env,
        *("eval", "--store", "kb", "--set", "basics"),
        *("--config", '{"mode": "lexical"}', "--label", "lexical", "--config", '{"mode": "vector", "top_k": 0}'),
    )

    assert result.returncode == 0, result.stderr
    header, lexical, vector, words = result.stdout.splitlines()
    assert header.split() == ["configuration", "nDCG@10", "recall@100", "MRR", "hit", "rate", "mean", "ms", "p95", "ms"]
    # Two of the three questions find their document first, by their words.
    assert lexical.split()[:5] == ["lexical", "0.6667", "0.6667", "0.6667", "0.6667"]
    assert vector.split()[0] == "B"
    assert re.fullmatch(r"B is (better|worse) than lexical by 0\.\d{3}.*|B and lexical score the same.*", words)
    runs = EvaluationRun.objects.order_by("id")
    assert [(run.label, run.status, run.questions_done) for run in runs] == [("lexical", "done", 3), ("B", "done", 3)]
    assert "evaluating 'lexical' over 3 question(s)" in result.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--store", "nope", "--set", "basics", "--config", "{}"), "ragmux: no store named 'nope'"),
        (
            ("--store", "kb", "--set", "nope", "--config", "{}"),
            "ragmux: the store 'kb' has no evaluation set named 'nope'",
        ),
        (("--store", "kb", "--set", "basics", "--config", "{mode"), "ragmux: --config '{mode' is not JSON"),
        (("--store", "kb", "--set", "basics", "--config", '{"mode": "x"}'), "is not a search configuration"),
        (("--store", "kb", "--set", "basics", "--config", '{"typo": 1}'), "unknown field"),
    ],
)
def test_eval_refuses_what_it_cannot_run_saying_why(subprocess_env, evaluation_set, arguments, message):
    result = run_ragmux(subprocess_env, "eval", *arguments)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.django_db(transaction=True)
def test_eval_exits_1_saying_why_a_run_failed(subprocess_env, evaluation_set, fake_upstream):
    fake_upstream.configure("openai.embeddings", status=500)
    result = run_ragmux(subprocess_env, "eval", "--store", "kb", "--set", "basics", "--config", '{"mode": "vector"}')
    assert result.returncode == 1
    assert result.stdout == ""
    assert "ragmux: 'A' failed: question 1 of 3 ('how long to boil spaghetti'): embedding the query failed" in (
        result.stderr
    )
