"""The backend Django loads for ``ENGINE = "ragmux.core.postgresql"``: Django's own, whose pool
checkout gives up on a database out of reach (see the package's docstring)."""

from __future__ import annotations

import threading

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper
from psycopg_pool import PoolClosed, PoolTimeout

from ragmux.core.postgresql import CheckoutWait, ObservedConnection, check_answering

_replacing_pool = threading.Lock()


class DatabaseWrapper(PostgresDatabaseWrapper):
    def get_new_connection(self, conn_params):
        if self.pool is None:
            return super().get_new_connection(conn_params)
        wait = CheckoutWait()
        while True:
            try:
                return super().get_new_connection(conn_params)
            except (PoolTimeout, PoolClosed):  # an empty slice, or a pool replaced meanwhile
                if wait.should_reconnect(self.pool):
                    self._reconnect(conn_params)

    def _reconnect(self, conn_params) -> None:
        """Raises if the database is still out of reach; else replaces the pool, which may be
        in a long backoff before its next attempt."""
        stale = self.pool
        check_answering(conn_params)
        ObservedConnection.connect(**conn_params).close()
        with _replacing_pool:
            if self._connection_pools.get(self.alias) is not stale:
                return  # another thread replaced it
            # Django's registry of pools (close_pool() would close before forgetting): the next
            # `self.pool` is a new one.
            del self._connection_pools[self.alias]
        threading.Thread(target=stale.close, name="close-stale-pool", daemon=True).start()
