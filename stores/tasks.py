"""Background work of the stores app: rebuilding lexical indexes (see stores.rebuild)."""

from __future__ import annotations

from celery import shared_task

from stores import rebuild

# A rebuild is one transaction; cut short by the global task limit it would roll back and be
# started again by the sweep forever. At about 1,000 chunks a second this allows ~20M chunks.
REBUILD_TIME_LIMIT = 6 * 3600


@shared_task(name="stores.rebuild_lexical_index", ignore_result=True, time_limit=REBUILD_TIME_LIMIT)
def rebuild_lexical_index(store_id: int) -> str:
    return rebuild.lexical_index_rebuild(store_id=store_id)


@shared_task(name="stores.sweep_lexical_indexes", ignore_result=True)
def sweep_lexical_indexes() -> None:
    """Restarts rebuilds that a stopped worker left undone (a running one makes these no-ops)."""
    for store_id in rebuild.stores_needing_rebuild():
        rebuild_lexical_index.delay(store_id)
