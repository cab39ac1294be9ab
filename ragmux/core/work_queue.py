"""A table whose rows are the work: the one leased queue that ingestion (the `documents` table)
and evaluation (`evaluation_runs`) both run on.

A row is queued, then claimed by a worker: a conditional UPDATE moves it to its running status,
names the worker (the owner column), bumps its fencing token and gives it a lease
(``lease_expires_at``) and an attempt. The worker renews the lease while it works and writes
only while the row still carries its token and its running status, so a worker that lost its
claim (lease expired, row deleted, requeued or reprocessed) writes nothing. The scheduler's
sweep puts the rows whose lease ran out back in the queue, and fails those claimed the most
times a queue allows. A worker that is stopped gracefully (SIGTERM, ``stop_requested``) gives
its claims back at once, and those claims do not count as attempts.

The column names differ between the two tables (``lease_owner``/``lease_token`` for documents,
``claimed_by``/``claim_token`` for runs): renaming them would need a data migration on every
existing install for no change in behaviour, so each queue names its own.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from celery.signals import task_prerun, worker_process_init
from django.conf import settings
from django.db import connection

# Set when this worker process is asked to stop: a job treats its claims as lost from then on,
# so work stops at the next step and nothing more is written, and gives them back.
stop_requested = threading.Event()


def worker_identity() -> str:
    """The owner a worker's claims are written under: its host, its process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeasedQueue:
    """A table as a queue: where its claim is written, its statuses, and its settings."""

    table: str
    owner_column: str
    token_column: str
    queued: str
    running: str
    failed: str
    # The settings that hold the lease's seconds and the claims a row may have.
    lease_setting: str
    max_attempts_setting: str
    # What the worker was doing to a row, in the reason a row given up on is failed with.
    worker_doing: str

    def lease(self) -> timedelta:
        return timedelta(seconds=getattr(settings, self.lease_setting))

    @property
    def lease_expired(self) -> str:
        return f"the worker {self.worker_doing} it stopped before finishing (its lease expired)"

    def claim(self, ids: Sequence[int], *, owner: str, also: str = "") -> list[tuple[int, int, int]]:
        """Claims those of the rows ``ids`` that are queued, for ``owner``; returns (id, token,
        attempts) of each claimed. ``also``: more assignments (", started_at = now()")."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.table} SET status = %s, {self.owner_column} = %s, "
                f"{self.token_column} = {self.token_column} + 1, lease_expires_at = now() + %s, "
                f"attempts = attempts + 1, updated_at = now(){also} "
                f"WHERE id = ANY(%s) AND status = %s RETURNING id, {self.token_column}, attempts",
                [self.running, owner, self.lease(), list(ids), self.queued],
            )
            return cursor.fetchall()

    def _update_held(self, held: Sequence[tuple[int, int]], assignments: str, params: list) -> list[int]:
        """Runs ``assignments`` on the rows still held by the (id, token) claims; their ids."""
        if not held:
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.table} q SET {assignments} "
                "FROM unnest(%s::bigint[], %s::bigint[]) AS held(id, token) "
                f"WHERE q.id = held.id AND q.{self.token_column} = held.token AND q.status = %s RETURNING q.id",
                [*params, [row_id for row_id, _ in held], [token for _, token in held], self.running],
            )
            return [row[0] for row in cursor.fetchall()]

    def renew(self, held: Sequence[tuple[int, int]], *, also: str = "") -> set[int]:
        """Extends the leases still held; returns the ids of the rows still held."""
        return set(self._update_held(held, f"lease_expires_at = now() + %s{also}", [self.lease()]))

    def release(self, held: Sequence[tuple[int, int]]) -> list[int]:
        """Puts held claims back in the queue as if they had never been made (a graceful stop is
        not a failed attempt); returns the ids of those still held."""
        return self._update_held(
            held,
            f"status = %s, attempts = q.attempts - 1, {self.owner_column} = '', lease_expires_at = NULL, "
            f"{self.token_column} = q.{self.token_column} + 1, updated_at = now()",
            [self.queued],
        )

    def holds(self, row_id: int, token: int) -> bool:
        """Locks the claimed row for the rest of the transaction if the claim still holds."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {self.table} WHERE id = %s AND {self.token_column} = %s AND status = %s FOR UPDATE",
                [row_id, token, self.running],
            )
            return cursor.fetchone() is not None

    def held_filter(self, token: int) -> dict:
        """The ORM filter of a row (with its pk) that a claim of ``token`` still holds."""
        return {"status": self.running, self.token_column: token}

    def ended(self) -> dict:
        """The ORM assignments that end a held claim (with the row's final status)."""
        return {self.owner_column: "", "lease_expires_at": None}

    def requeue_expired(self, *, also: str = "", params: dict | None = None) -> list[tuple[int, str]]:
        """Puts back in the queue the rows whose lease ran out, or fails those claimed the most
        times allowed (the reason says so); returns (id, new status) of each. ``also``: more
        assignments, with their named ``params``."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                UPDATE {self.table}
                SET status = CASE WHEN attempts >= %(max)s THEN %(failed)s ELSE %(queued)s END,
                    error = CASE WHEN attempts >= %(max)s
                            THEN 'gave up after ' || attempts || ' attempts: ' || %(reason)s ELSE error END,
                    {self.owner_column} = '', lease_expires_at = NULL,
                    {self.token_column} = {self.token_column} + 1, updated_at = now(){also}
                WHERE status = %(running)s AND lease_expires_at < now()
                RETURNING id, status
                """,
                {
                    **(params or {}),
                    "max": getattr(settings, self.max_attempts_setting),
                    "failed": self.failed,
                    "queued": self.queued,
                    "running": self.running,
                    "reason": self.lease_expired,
                },
            )
            return cursor.fetchall()


# Pool processes only: SIGTERM (what `ragmux` sends every worker process on Ctrl-C) ends the
# job in hand at its next step and gives its claims back, instead of Celery's default of ending
# the process mid-job, which leaves the claims held for a whole lease, counts them as attempts
# and logs a WorkerLostError. The task then returns, so the warm shutdown completes cleanly; a
# second SIGTERM (a cold shutdown) gets the default again. The handler is installed as a task
# starts because the pool resets signal handlers after its process initialisers run.
_pool_process = False
_default_sigterm = signal.SIG_DFL


@worker_process_init.connect
def _note_pool_process(**_) -> None:
    global _pool_process
    _pool_process = True


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, _default_sigterm)
    stop_requested.set()


@task_prerun.connect
def _stop_gracefully_on_sigterm(**_) -> None:
    global _default_sigterm
    current = signal.getsignal(signal.SIGTERM)
    if _pool_process and current is not _on_sigterm:
        _default_sigterm = current
        signal.signal(signal.SIGTERM, _on_sigterm)
