"""The backend Django loads for ``ENGINE = "ragmux.core.postgresql"``: Django's own, whose pool
checkout gives up on a database out of reach (see the package's docstring)."""

from __future__ import annotations

import threading

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper
from psycopg_pool import PoolClosed, PoolTimeout

from ragmux.core.postgresql import CheckoutWait, ObservedConnection, outage

_replacing_pool = threading.Lock()


class DatabaseWrapper(PostgresDatabaseWrapper):
    def get_new_connection(self, conn_params):
        if self.pool is None:
            return super().get_new_connection(conn_params)
        if outage.failure is not None:
            self._reconnect(conn_params)
        wait = CheckoutWait()
        while True:
            try:
                return super().get_new_connection(conn_params)
            except (PoolTimeout, PoolClosed) as exc:  # an empty slice, or a pool replaced meanwhile
                wait.after_empty_slice(exc)

    def _reconnect(self, conn_params) -> None:
        """Raises if the database is still out of reach; else replaces the pool, which may be
        in a long backoff before its next attempt."""
        stale = self.pool
        ObservedConnection.connect(**conn_params).close()
        with _replacing_pool:
            if self.pool is stale:
                self.close_pool()
