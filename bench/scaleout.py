"""Scale-out on one machine, each web process and worker on a host of its own.

    python bench/scaleout.py [--documents N] [--embed-latency-ms MS] [--v1-clients N] [--smoke]

Runs as root: it makes a bridge and, for each of two web processes and two Celery workers, a
network namespace joined to it by a veth pair with a fixed private address (10.213.77.0/24; the
bridge is 10.213.77.1), and removes them all when it ends. Where namespaces cannot be made it
says so, reports ``{"skipped": reason}`` and exits 0. PostgreSQL, Redis, the scheduler and an
OpenAI-format upstream whose embeddings answer after ``--embed-latency-ms`` (50 ms: the workers
wait on I/O, as on a remote provider, so scaling shows on two cores) run on the machine itself,
listening on the bridge; the hosts reach them as remote machines would, through
``DATABASE_URL`` / ``REDIS_URL``, sharing the encryption and secret keys and nothing else (each
has its own data folder).

Three rounds of ``--documents`` documents each (256 by default: in shorter rounds the workers' start
weighs on the ratio), uploaded at once:

1. one worker: its ingestion rate;
2. two workers: theirs, and the ratio to one (the target is >= 1.6);
3. two workers and `/v1` chat traffic against both web processes, during which one worker and
   one web process are killed (SIGKILL, the whole host's processes) once a quarter and a half of
   the documents are ready. The killed worker's claim comes back after its lease; `/v1` answers
   are counted by web process and status (a failure to connect by its exception's name).

Then: documents ready against sent (every round: nothing lost), failed ones, and chunks that
exist twice (none may). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import httpx
from harness import REPO, answers, print_table, report, started, wait_for

BENCH = Path(__file__).resolve().parent
RAGMUX = [sys.executable, "-m", "ragmux.launch.cli"]
SUBNET = "10.213.77"
BRIDGE_ADDRESS = f"{SUBNET}.1"
HOSTS = {"web1": 11, "web2": 12, "worker1": 21, "worker2": 22}
WEB_PORT = 8765
CHAT_BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say something short."}]}
WORDS = (
    "turbine blade stress coefficient laminar boundary layer pressure gradient shock wave nozzle "
    "heat transfer wing flutter vortex shedding compressor stall thermal expansion fatigue crack"
).split()


class Network:
    """The bridge and one namespace per host, named after this run so two runs never collide."""

    def __init__(self) -> None:
        self.tag = f"{os.getpid() % 100000}"
        self.bridge = f"rmxbr{self.tag}"
        self.namespaces: dict[str, str] = {}
        self.links: list[str] = []

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def create(self) -> None:
        self._ip("link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        self._ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for name, last in HOSTS.items():
            namespace = f"rmx{self.tag}{name}"
            outside, inside = f"rmx{self.tag}{last}h", f"rmx{self.tag}{last}n"
            self._ip("netns", "add", namespace)
            self.namespaces[name] = namespace
            self._ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self.links.append(outside)
            self._ip("link", "set", inside, "netns", namespace)
            self._ip("link", "set", outside, "master", self.bridge)
            self._ip("link", "set", outside, "up")
            self._ip("-n", namespace, "addr", "add", f"{SUBNET}.{last}/24", "dev", inside)
            self._ip("-n", namespace, "link", "set", inside, "up")
            self._ip("-n", namespace, "link", "set", "lo", "up")

    def signal_host(self, name: str, signum: int) -> None:
        """``signum`` to every process of a host (SIGKILL: as when its machine is switched off)."""
        pids = subprocess.run(["ip", "netns", "pids", self.namespaces[name]], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signum)
            except ProcessLookupError:
                pass

    def kill_host(self, name: str) -> None:
        self.signal_host(name, signal.SIGKILL)

    def remove(self) -> None:
        for name in list(self.namespaces):
            self.kill_host(name)
            subprocess.run(["ip", "netns", "del", self.namespaces.pop(name)], capture_output=True)
        for link in reversed(self.links):
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self.links.clear()


def cannot_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"rmxprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def document_body(number: int, paragraphs: int) -> bytes:
    """A document of ``paragraphs`` chunks' worth of text, different for every number."""
    rng = random.Random(number)
    text = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(150)) for _ in range(paragraphs))
    return f"Report {number}\n\n{text}".encode()


class Hosts:
    """The processes of each host, started inside its namespace."""

    def __init__(self, network: Network, scratch: Path, environment: dict[str, str]) -> None:
        self.network = network
        self.scratch = scratch
        self.environment = environment
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *command: str) -> None:
        data = self.scratch / "hosts" / name
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o755)
        env = {**self.environment, "RAGMUX_DATA_DIR": str(data)}
        with open(data / "output.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.network.namespaces[name],
                    sys.executable,
                    "-m",
                    "ragmux.launch.cli",
                    *command,
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_tail(self, name: str) -> str:
        return (self.scratch / "hosts" / name / "output.log").read_text(errors="replace")[-2000:]

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def web_url(name: str) -> str:
    return f"http://{SUBNET}.{HOSTS[name]}:{WEB_PORT}"


class ChatLoad:
    """`/v1` chat calls from ``clients`` threads, alternating between the web processes."""

    def __init__(self, key: str, clients: int) -> None:
        self.key = key
        self.clients = clients
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def _run(self, offset: int) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(timeout=30) as client:
            turn = offset
            while not self._stop.is_set():
                web = ("web1", "web2")[turn % 2]
                turn += 1
                try:
                    outcome = str(
                        client.post(f"{web_url(web)}/v1/chat/completions", json=CHAT_BODY, headers=headers).status_code
                    )
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                    time.sleep(0.05)  # a dead host refuses at once; do not spin on it
                with self._lock:
                    self.outcomes[(web, outcome)] += 1

    def __enter__(self) -> ChatLoad:
        for offset in range(self.clients):
            thread = threading.Thread(target=self._run, args=(offset,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, help="documents per round (default 256; 48 with --smoke)")
    parser.add_argument("--paragraphs", type=int, default=4, help="chunks' worth of text per document")
    parser.add_argument("--embed-latency-ms", type=float, default=50.0)
    parser.add_argument("--v1-clients", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a small run (the suite's)")
    args = parser.parse_args()
    args.documents = args.documents or (48 if args.smoke else 256)

    reason = cannot_make_namespaces()
    if reason:
        print(f"skipped: {reason}")
        report({"bench": "scaleout", "skipped": reason})
        return 0

    from ragmux.core.crypto import generate_key
    from ragmux.launch.embedded import EmbeddedPostgres, EmbeddedRedis, free_port

    scratch = Path(tempfile.mkdtemp(prefix="ragmux-scaleout-"))
    scratch.chmod(0o755)
    network = Network()
    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
        cleanup.callback(network.remove)
        network.create()
        pg_port, redis_port, upstream_port = free_port(), free_port(), free_port()
        postgres = EmbeddedPostgres(
            scratch, server_options=f"-c listen_addresses='127.0.0.1,{BRIDGE_ADDRESS}' -c max_connections=300"
        )
        postgres.start(pg_port)
        cleanup.callback(postgres.stop)
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg_port}/postgres", autocommit=True) as admin:
            hba = admin.execute("SHOW hba_file").fetchone()[0]
            with open(hba, "a") as rules:
                rules.write(f"\nhost all all {SUBNET}.0/24 trust\n")
            admin.execute("SELECT pg_reload_conf()")
        redis = EmbeddedRedis(scratch, bind=("127.0.0.1", BRIDGE_ADDRESS))
        redis.start(redis_port)
        cleanup.callback(redis.stop)

        shared = {
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "RAGMUX_ENCRYPTION_KEY": generate_key(),
            "PRIVATE_UPSTREAM_ALLOWLIST": BRIDGE_ADDRESS,
            "INGEST_WORKERS": "1",
            "INGEST_LEASE": "5s",
            "INGEST_REQUEUE_INTERVAL": "1s",
            "WEB_WORKERS": "1",
            "LOG_LEVEL": "warning",
            "RAGMUX_ADMIN_PASSWORD": secrets.token_urlsafe(16),
        }
        remote = {
            **os.environ,
            **shared,
            "DATABASE_URL": postgres.url(pg_port).replace("127.0.0.1", BRIDGE_ADDRESS),
            "REDIS_URL": redis.url(redis_port).replace("127.0.0.1", BRIDGE_ADDRESS),
            "HOST": "0.0.0.0",
            "PORT": str(WEB_PORT),
            "ALLOWED_HOSTS": ",".join(f"{SUBNET}.{last}" for last in HOSTS.values()),
        }
        os.environ.update(
            {**shared, "DATABASE_URL": postgres.url(pg_port), "REDIS_URL": redis.url(redis_port)},
            DJANGO_SETTINGS_MODULE="ragmux.settings",
            RAGMUX_DATA_DIR=str(scratch),
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)

        upstream = f"http://{BRIDGE_ADDRESS}:{upstream_port}"
        cleanup.enter_context(
            started(
                [
                    sys.executable,
                    str(BENCH / "openai_upstream.py"),
                    str(upstream_port),
                    "--host",
                    BRIDGE_ADDRESS,
                    "--embed-latency-ms",
                    str(args.embed_latency_ms),
                ],
                lambda: answers(upstream),
                "the fake upstream",
            )
        )
        hosts = Hosts(network, scratch, remote)
        cleanup.callback(hosts.stop_all)
        scheduler_env = {**os.environ, "RAGMUX_DATA_DIR": str(scratch / "scheduler")}
        cleanup.enter_context(
            started(
                [sys.executable, "-m", "ragmux.launch.cli", "scheduler"],
                lambda: True,
                "the scheduler",
                env=scheduler_env,
            )
        )

        from gateway.clients.services import key_create, project_create
        from gateway.connections.services import connection_create
        from ingestion.services import IncomingFile, document_upload
        from stores.models import Chunk, Document
        from stores.services import store_create

        embed, chat = (
            connection_create(
                name=f"scaleout-{kind}",
                provider_type="custom_openai",
                base_url=f"{upstream}/v1",
                model_name=model,
                dimensions=None,
                api_key="sk-scaleout-upstream-0000000000",
            )
            for kind, model in (("embed", "bench-embed"), ("chat", "gpt-4o-mini"))
        )
        project = project_create(
            name="scaleout", chat_connection_id=chat.id, embedding_connection_id=None, store_id=None, system_prompt=""
        )
        key = key_create(project=project, name="scaleout", scopes=None, expires_at=None).key

        for web in ("web1", "web2"):  # one after the other: the first one migrates and seeds
            hosts.start(web, "serve", "--no-worker")
            if not wait_for(lambda web=web: answers(f"{web_url(web)}/healthz"), timeout=120, poll=0.2):
                raise SystemExit(f"{web} did not start:\n{hosts.log_tail(web)}")

        numbers = iter(range(10**6))

        def upload_round(name: str, paused: tuple[str, ...] = ()):
            """Uploads a round; with ``paused`` workers stopped (SIGSTOP) meanwhile, so the round's
            rate is theirs, not the upload's, and timed from when they are let go."""
            store = store_create(name=name, values={"embedding_connection_id": embed.id})
            files = [
                IncomingFile(filename=f"{n}.txt", data=document_body(n, args.paragraphs))
                for n in (next(numbers) for _ in range(args.documents))
            ]
            for host in paused:
                network.signal_host(host, signal.SIGSTOP)
            started_at = time.monotonic()
            document_upload(store=store, files=files)
            if paused:
                started_at = time.monotonic()
                for host in paused:
                    network.signal_host(host, signal.SIGCONT)
            return store, started_at

        def ready(store) -> int:
            return Document.objects.filter(store=store, status="ready").count()

        def settle(store, started_at: float, what: str, on_progress=None) -> float:
            def done() -> bool:
                count = ready(store)
                if on_progress:
                    on_progress(count)
                return count + Document.objects.filter(store=store, status="failed").count() >= args.documents

            if not wait_for(done, timeout=600, poll=0.1):
                raise SystemExit(f"{what}: documents did not settle in 600 s")
            return args.documents / (time.monotonic() - started_at)

        from ragmux.celery import app
        from ragmux.launch.processes import EVALUATION_WORKER_NAME_PREFIX, WORKER_NAME_PREFIX

        def workers_up(count: int) -> None:
            # A round starts once its workers answer, or the first one up would take all of it. A
            # worker host runs an ingestion node and an evaluation node: both must be up, or the
            # one still starting would share the cores with the round.
            def up() -> bool:
                names = [name for reply in app.control.ping(timeout=1) for name in reply]
                return all(
                    sum(name.startswith(prefix) for name in names) >= count
                    for prefix in (WORKER_NAME_PREFIX, EVALUATION_WORKER_NAME_PREFIX)
                )

            if not wait_for(up, timeout=60):
                raise SystemExit(f"worker{count} did not start:\n{hosts.log_tail(f'worker{count}')}")

        rows, result = [], {"bench": "scaleout", "documents_per_round": args.documents}
        hosts.start("worker1", "worker")
        workers_up(1)
        store_one, began = upload_round("scaleout-one-worker", paused=("worker1",))
        result["docs_per_s_one_worker"] = round(settle(store_one, began, "one worker"), 2)
        hosts.start("worker2", "worker")
        workers_up(2)
        store_two, began = upload_round("scaleout-two-workers", paused=("worker1", "worker2"))
        result["docs_per_s_two_workers"] = round(settle(store_two, began, "two workers"), 2)
        result["two_to_one"] = round(result["docs_per_s_two_workers"] / result["docs_per_s_one_worker"], 2)

        for web in ("web1", "web2"):
            try:
                answer = httpx.post(
                    f"{web_url(web)}/v1/chat/completions",
                    json=CHAT_BODY,
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=30,
                )
            except httpx.HTTPError as exc:
                raise SystemExit(f"{web} does not answer /v1: {exc!r}\n{hosts.log_tail(web)}") from None
            if answer.status_code != 200:
                raise SystemExit(f"{web} answers /v1 with {answer.status_code}: {answer.text[:500]}")
        killed: list[str] = []

        def kill_on_progress(count: int) -> None:
            for host, share in (("worker1", 0.25), ("web2", 0.5)):
                if host not in killed and count >= args.documents * share:
                    network.kill_host(host)
                    killed.append(host)

        with ChatLoad(key, args.v1_clients) as load:
            store_kills, began = upload_round("scaleout-kills")
            result["docs_per_s_with_kills"] = round(settle(store_kills, began, "the kills", kill_on_progress), 2)
            time.sleep(1)  # traffic against the survivors after the last kill
        result["killed"] = killed

        stores = (store_one, store_two, store_kills)
        sent = args.documents * len(stores)
        result["documents_sent"] = sent
        result["documents_ready"] = Document.objects.filter(store__in=stores, status="ready").count()
        result["documents_failed"] = Document.objects.filter(store__in=stores, status="failed").count()
        from django.db.models import Count

        result["duplicate_chunks"] = (
            Chunk.objects.filter(document__store__in=stores)
            .values("document_id", "index")
            .annotate(copies=Count("id"))
            .filter(copies__gt=1)
            .count()
        )
        result["v1"] = {f"{web} {outcome}": count for (web, outcome), count in sorted(load.outcomes.items())}
        rows += [
            ("one worker", f"{result['docs_per_s_one_worker']} docs/s"),
            ("two workers", f"{result['docs_per_s_two_workers']} docs/s ({result['two_to_one']}x)"),
            ("two workers, kills", f"{result['docs_per_s_with_kills']} docs/s, killed {', '.join(killed)}"),
            ("documents", f"{result['documents_ready']} ready of {sent} sent, {result['documents_failed']} failed"),
            ("duplicate chunks", result["duplicate_chunks"]),
            *((f"/v1 {name}", count) for name, count in result["v1"].items()),
        ]
        print_table(rows, ("", "result"))
        from django.db import connections

        connections.close_all()
    report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
