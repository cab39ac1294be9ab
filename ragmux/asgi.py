import asyncio
import logging
import os
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.db import DatabaseError, connections

from ragmux.core.allocator import keep_large_blocks_mapped
from ragmux.core.postgresql import POOL_OPTIONS

# Before anything large is allocated: an upload's memory must go back after the request.
keep_large_blocks_mapped()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
# The web process pools its database connections: every blocking step of a request runs in a
# thread of its own whose connection is closed at the step's end, and opening a PostgreSQL
# connection (authentication included) costs milliseconds. Only here: a Celery worker forks
# after its start-up checks, and a pool opened before a fork cannot be shared by the children.
# Every statement of a request is bounded by the server too (the async pool reads these options).
_options = settings.DATABASES["default"]["OPTIONS"]
_options["options"] = (
    f"{_options.get('options', '')} -c statement_timeout={round(settings.DATABASE_STATEMENT_TIMEOUT * 1000)}"
).strip()
settings.DATABASES["default"]["OPTIONS"]["pool"] = {
    "min_size": 2,
    "max_size": settings.WEB_DB_POOL_SIZE,
    **POOL_OPTIONS,
}
django.setup(set_prefix=False)

from ragmux.core.bodies import BodyCappedASGIHandler  # noqa: E402  (needs the app registry)
from ragmux.core.errors import is_client_api_path  # noqa: E402

django_application = BodyCappedASGIHandler()

from ragmux.launch.checks import run_startup_checks  # noqa: E402  (needs the app registry)


def _checks_off_the_loop() -> None:
    from ragmux.core import readiness

    try:
        run_startup_checks()
        try:
            # Walked once here, so the first /readyz answers from the cache in time.
            readiness.migration_state()
        except DatabaseError:
            pass  # /readyz walks it when the database is back
    finally:
        connections.close_all()


# With WEB_WORKERS > 1 uvicorn imports this module in each worker's running event loop, where
# Django refuses a query: the checks run in a thread of their own.
with ThreadPoolExecutor(max_workers=1) as startup:
    startup.submit(_checks_off_the_loop).result()

from gateway.clients import ledger  # noqa: E402  (needs the app registry)
from ragmux.core import asyncdb, pool_metrics  # noqa: E402

if settings.METRICS_ENABLED:
    pool_metrics.start_sampling()


class _OnTheLoop(Executor):
    """Runs each call at once, in the calling thread: the event loop's."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


# Django hops to a thread twice per request: to send request_started and to close the response
# (which sends request_finished), so their receivers can use the thread's database connection.
# Those receivers only reset and close the calling thread's connections, and a `/v1` call opens
# none on the loop (the key lookup uses ragmux.core.asyncdb, every ORM call runs in
# ragmux.core.offloop's threads or the ledger's writer), so for `/v1` the two hops run on
# the loop instead. A thread handoff costs a wake-up and a GIL exchange each, under load about a
# tenth of the loop's time.
_client_api_executor = _OnTheLoop()

logger = logging.getLogger("ragmux.asgi")
# How long the shutdown waits for the request log rows still queued (a batch takes milliseconds).
LEDGER_FLUSH_SECONDS = 10


async def lifespan(receive, send) -> None:
    """The server's start and stop (`ragmux serve` runs uvicorn with the lifespan on): at the stop,
    after the last response, the request log rows still queued are written and the async
    database pool is closed. Django itself answers only HTTP."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if not await asyncio.to_thread(ledger.flush, LEDGER_FLUSH_SECONDS):
                logger.error("%d request log rows not written at shutdown", ledger.pending_writes())
            await asyncdb.close()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    if scope["type"] == "http" and is_client_api_path(scope["path"]):
        async with ThreadSensitiveContext(executor=_client_api_executor):
            return await django_application(scope, receive, send)
    return await django_application(scope, receive, send)
