"""How the database's migrations compare with this build's, for `/readyz`.

Django's migration plan (the migrations this build has that the database has not applied) costs
a walk of every app's migration modules, so it is worked out again only when the
`django_migrations` table changed: each probe reads the table's row count and highest id (one
indexed query) and reuses the last answer while they stay the same. Unapplying a migration
deletes its row and applying one adds a row, so either changes them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder


@dataclass(frozen=True)
class MigrationState:
    # Migrations of this build, and how many of them the database has applied.
    expected: int
    applied: int
    # Migrations the database has applied that this build does not have (a newer build ran).
    unknown: int

    @property
    def behind(self) -> bool:
        return self.applied < self.expected


_last: tuple[tuple[int, int], MigrationState] | None = None
_computing = threading.Lock()


def _fingerprint() -> tuple[int, int]:
    if not MigrationRecorder(connection).has_table():
        return 0, 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), coalesce(max(id), 0) FROM {MigrationRecorder.Migration._meta.db_table}")
        count, highest = cursor.fetchone()
    return count, highest


def _plan() -> MigrationState:
    executor = MigrationExecutor(connection)
    loader = executor.loader
    nodes = set(loader.graph.nodes)
    pending = executor.migration_plan(loader.graph.leaf_nodes())
    replaced = {key for migration in loader.replacements.values() for key in migration.replaces}
    unknown = [
        key
        for key in loader.applied_migrations
        if key[0] in loader.migrated_apps and key not in nodes and key not in replaced
    ]
    return MigrationState(expected=len(nodes), applied=len(nodes) - len(pending), unknown=len(unknown))


def migration_state() -> MigrationState:
    """This build's migrations against the database's (blocking: the ORM's connection)."""
    global _last
    fingerprint = _fingerprint()
    last = _last
    if last is not None and last[0] == fingerprint:
        return last[1]
    # One walk at a time: probes arriving meanwhile wait for it instead of walking too.
    with _computing:
        last = _last
        if last is not None and last[0] == fingerprint:
            return last[1]
        state = _plan()
        _last = (fingerprint, state)
        return state
