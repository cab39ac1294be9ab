"""A pool's connections and checkouts, as sampled into the metrics."""

from __future__ import annotations

import pytest
from psycopg_pool import ConnectionPool

from ragmux.core.pool_metrics import PoolSampler
from tests.helpers import counted


@pytest.fixture
def pool(db):
    from django.db import connection

    database = connection.settings_dict
    kwargs = {
        "dbname": database["NAME"],
        "user": database["USER"],
        "password": database["PASSWORD"],
        "host": database["HOST"],
        "port": database["PORT"],
    }
    with ConnectionPool(kwargs=kwargs, min_size=1, max_size=3, open=True) as opened:
        opened.wait()
        yield opened


def gauges() -> dict[str, float]:
    return {
        kind: counted(f"ragmux_db_pool_{kind}_conns", pool="sampled") for kind in ("total", "idle", "acquired", "max")
    }


def test_a_pools_connections_and_checkouts_are_sampled(pool):
    sampler = PoolSampler()
    acquires = counted("ragmux_db_pool_acquires_total", pool="sampled")
    with pool.connection(), pool.connection():
        sampler.sample("sampled", [pool])
        assert gauges() == {"total": 2, "idle": 0, "acquired": 2, "max": 3}
        assert counted("ragmux_db_pool_acquires_total", pool="sampled") == acquires + 2
    sampler.sample("sampled", [pool])
    assert gauges() == {"total": 2, "idle": 2, "acquired": 0, "max": 3}
    # Each checkout is counted once, however often the pool is sampled.
    assert counted("ragmux_db_pool_acquires_total", pool="sampled") == acquires + 2
