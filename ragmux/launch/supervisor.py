"""The process supervisor of `ragmux serve`, `worker` and `scheduler`: runs the child processes
until Ctrl-C, restarts those allowed to die after a back-off, and stops them all at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

# A restarted child that dies again waits twice as long, up to this; one that ran for
# BACKOFF_RESET seconds counts as healthy and is restarted at once again.
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0
BACKOFF_RESET = 60.0
# How long the web server may take to answer its health URL at start-up, and the children to
# stop once asked.
READY_WITHIN = 120
STOP_WITHIN = 20
POLL_SECONDS = 0.2


class Backoff:
    """The wait before a restart: doubled by each restart, back to the first after a healthy run."""

    def __init__(self) -> None:
        self.seconds = BACKOFF_FIRST
        self.started_at = time.monotonic()

    def next_wait(self, now: float) -> float:
        if now - self.started_at >= BACKOFF_RESET:
            self.seconds = BACKOFF_FIRST
        wait, self.seconds = self.seconds, min(self.seconds * 2, BACKOFF_MAX)
        return wait


class DaemonWatch:
    """An embedded service that runs as a daemon, not as our child (the embedded Redis): started
    again when it dies, with the children's back-off."""

    def __init__(self, name: str, *, alive: Callable[[], bool], start: Callable[[], object]) -> None:
        self.name, self._alive, self._start = name, alive, start
        self._backoff = Backoff()
        self._restart_at: float | None = None

    def check(self, now: float) -> None:
        from ragmux.launch.embedded import EmbeddedError

        if self._restart_at is None:
            if self._alive():
                return
            wait = self._backoff.next_wait(now)
            sys.stderr.write(f"ragmux: {self.name} exited; restarting it in {wait:g} s\n")
            self._restart_at = now + wait
        elif now >= self._restart_at:
            self._restart_at = None
            self._backoff.started_at = now
            try:
                self._start()
            except EmbeddedError as exc:
                sys.stderr.write(f"ragmux: {self.name} did not restart: {exc}\n")
            else:
                sys.stderr.write(f"ragmux: {self.name} restarted\n")


class NotReady(Exception):
    pass


class Supervisor:
    """The children of one command. A child named in ``restart`` that exits is started again
    after a back-off; any other child that exits stops the rest."""

    def __init__(self, commands: dict[str, list[str]], *, restart: frozenset[str]) -> None:
        self.commands, self.restart = commands, restart
        self.children: dict[str, subprocess.Popen] = {}
        self.backoff = {name: Backoff() for name in commands}
        self.restart_at: dict[str, float] = {}
        self.stopping = False
        self.exit_code = 0

    def start(self, name: str) -> None:
        # Each child gets its own process group so Ctrl-C reaches it only through us.
        self.children[name] = subprocess.Popen(self.commands[name], start_new_session=True)
        self.backoff[name].started_at = time.monotonic()

    def note_exits(self, now: float) -> None:
        for name, child in self.children.items():
            if name in self.restart_at or child.poll() is None:
                continue
            if name not in self.restart:
                sys.stderr.write(f"ragmux: {name} exited with status {child.returncode}; stopping\n")
                self.exit_code, self.stopping = 1, True
                return
            wait = self.backoff[name].next_wait(now)
            sys.stderr.write(f"ragmux: {name} exited with status {child.returncode}; restarting it in {wait:g} s\n")
            self.restart_at[name] = now + wait

    def restart_due(self, now: float) -> None:
        for name, due in list(self.restart_at.items()):
            if not self.stopping and now >= due:
                del self.restart_at[name]
                self.start(name)
                sys.stderr.write(f"ragmux: {name} restarted (pid {self.children[name].pid})\n")

    def wait_until_ready(self, url: str) -> None:
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            for name, child in self.children.items():
                if child.poll() is not None:
                    raise NotReady(f"{name} exited with status {child.returncode} during start-up")
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(POLL_SECONDS)
        raise NotReady(f"the web server did not answer {url} within {READY_WITHIN} s")

    def stop_all(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WITHIN
        for child in self.children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def run_children(
    commands: dict[str, list[str]],
    *,
    restart: frozenset[str] = frozenset(),
    on_ready: Callable[[], None] | None = None,
    ready_url: str | None = None,
    daemons: tuple[DaemonWatch, ...] = (),
) -> int:
    """Runs the child processes until Ctrl-C, then stops them all; the ``daemons`` are started
    again as the children are. Returns the command's exit status."""
    supervisor = Supervisor(commands, restart=restart)

    def request_stop(signum, frame):
        supervisor.stopping = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for name in commands:
            supervisor.start(name)
        if ready_url and on_ready:
            supervisor.wait_until_ready(ready_url)
            on_ready()
        while not supervisor.stopping:
            now = time.monotonic()
            supervisor.note_exits(now)
            supervisor.restart_due(now)
            for daemon in daemons if not supervisor.stopping else ():
                daemon.check(now)
            time.sleep(POLL_SECONDS)
    except NotReady as exc:
        sys.stderr.write(f"ragmux: {exc}\n")
        supervisor.exit_code = 1
    finally:
        supervisor.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return supervisor.exit_code
