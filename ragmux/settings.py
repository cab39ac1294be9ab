"""Django settings, read from the environment.

`ragmux serve` (and every other `ragmux` command) fills in ``DATABASE_URL``, ``REDIS_URL`` and
the secrets for the embedded default before Django starts, so this module only ever sees a
fully described environment. A malformed value stops the process with ``config: <reason>``.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from ragmux.core import metrics_access
from ragmux.core.env import (
    ConfigError,
    env_address,
    env_bool,
    env_choice,
    env_duration,
    env_host_allowlist,
    env_identifier,
    env_int,
    env_list,
    env_networks,
    env_str,
)
from ragmux.core.paths import BASE_DIR, DEFAULT_DATA_DIR


def parse_database_url(url: str, *, connect_timeout: int) -> dict:
    """Django's database settings for ``url``; ``connect_timeout`` (seconds) bounds each new
    connection unless the URL's own query sets one."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql") or not parts.path.strip("/"):
        raise ConfigError(f"DATABASE_URL: {url!r} is not a postgres://user:password@host:port/name URL")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError("DATABASE_URL: the port is not a number") from None
    return {
        # Django's backend, whose pool gives up at once on a database out of reach.
        "ENGINE": "ragmux.core.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "OPTIONS": {"connect_timeout": str(connect_timeout), **dict(parse_qsl(parts.query))},
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
    }


def decode_encryption_key(value: str) -> bytes:
    padded = value + "=" * (-len(value) % 4)
    try:
        key = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ConfigError("RAGMUX_ENCRYPTION_KEY: not base64url (expected 32 random bytes)") from None
    if len(key) != 32:
        raise ConfigError(f"RAGMUX_ENCRYPTION_KEY: decodes to {len(key)} bytes, expected 32")
    return key


try:
    _database_url = env_str("DATABASE_URL")
    if _database_url is None:
        raise ConfigError(
            "DATABASE_URL: not set (start ragmux with `ragmux serve` for the embedded default, "
            "or set DATABASE_URL and REDIS_URL)"
        )
    # Seconds a new database connection may take (libpq counts whole seconds, at least 2): a
    # stopped (SIGSTOP) or unreachable server fails requests after this, not after a TCP timeout.
    DATABASE_CONNECT_TIMEOUT = env_int("DATABASE_CONNECT_TIMEOUT", 5, minimum=2, maximum=600)
    DATABASES = {"default": parse_database_url(_database_url, connect_timeout=DATABASE_CONNECT_TIMEOUT)}
    # PostgreSQL's statement_timeout on the web process's connections: the longest one statement
    # of a request may run (a search sets its own, SEARCH_TIMEOUT). A server that answers nothing
    # at all is told apart within a second (ragmux.core.postgresql).
    DATABASE_STATEMENT_TIMEOUT = env_duration("DATABASE_STATEMENT_TIMEOUT", 60, minimum=0.001)
    REDIS_URL = env_str("REDIS_URL")
    if REDIS_URL is None:
        raise ConfigError("REDIS_URL: not set")
    if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"REDIS_URL: {REDIS_URL!r} is not a redis:// URL")

    SECRET_KEY = env_str("DJANGO_SECRET_KEY")
    if SECRET_KEY is None:
        raise ConfigError("DJANGO_SECRET_KEY: required when DATABASE_URL is set")
    _encryption_key = env_str("RAGMUX_ENCRYPTION_KEY")
    if _encryption_key is None:
        raise ConfigError("RAGMUX_ENCRYPTION_KEY: required when DATABASE_URL is set")
    RAGMUX_ENCRYPTION_KEY = decode_encryption_key(_encryption_key)

    DEBUG = env_bool("DJANGO_DEBUG", False)
    ALLOWED_HOSTS = env_list("ALLOWED_HOSTS") or ["localhost", "127.0.0.1", "[::1]"]
    CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
    SECURE_COOKIES = env_bool("SECURE_COOKIES", False)
    # Only behind a reverse proxy that sets X-Forwarded-For / X-Forwarded-Proto itself: then the
    # client address and the https scheme are taken from those headers.
    TRUST_PROXY_HEADERS = env_bool("TRUST_PROXY_HEADERS", False)
    LOG_LEVEL = env_choice("LOG_LEVEL", "info", ("debug", "info", "warning", "error"))

    RAGMUX_DATA_DIR = Path(env_str("RAGMUX_DATA_DIR", str(DEFAULT_DATA_DIR)))
    HOST = env_str("HOST", "127.0.0.1")
    PORT = env_int("PORT", 8765, minimum=1, maximum=65535)
    WEB_WORKERS = env_int("WEB_WORKERS", 1, minimum=1, maximum=64)
    # The longest a request's body may take to arrive, whole (uploads included): a client that
    # declares a body and sends it slowly, or never, is answered 408 and let go.
    BODY_READ_TIMEOUT = env_duration("BODY_READ_TIMEOUT", 60, minimum=0.1)
    # Database connections each web worker keeps for its requests (a request waits for a free one).
    WEB_DB_POOL_SIZE = env_int("WEB_DB_POOL_SIZE", 10, minimum=2, maximum=1000)
    SESSION_TTL = env_duration("SESSION_TTL", 24 * 3600, minimum=60)
    # Sign-in throttling (ragmux.core.signin); 0 turns each off.
    LOGIN_USER_LIMIT_PER_MIN = env_int("LOGIN_USER_LIMIT_PER_MIN", 5, minimum=0)
    LOGIN_RATE_LIMIT_PER_MIN = env_int("LOGIN_RATE_LIMIT_PER_MIN", 50, minimum=0)
    LOGIN_LOCKOUT_FAILURES = env_int("LOGIN_LOCKOUT_FAILURES", 20, minimum=0)
    LOGIN_LOCKOUT_MINUTES = env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=0)

    # Ingestion
    INGEST_WORKERS = env_int("INGEST_WORKERS", 2, minimum=1, maximum=64)
    INGEST_LEASE = env_duration("INGEST_LEASE", 120, minimum=3)
    INGEST_MAX_ATTEMPTS = env_int("INGEST_MAX_ATTEMPTS", 5, minimum=1)
    INGEST_JOB_TIMEOUT = env_duration("INGEST_JOB_TIMEOUT", 15 * 60, minimum=1)
    MAX_PENDING_DOCUMENTS = env_int("MAX_PENDING_DOCUMENTS", 1024, minimum=1)
    MAX_CHUNKS_PER_DOCUMENT = env_int("MAX_CHUNKS_PER_DOCUMENT", 20000, minimum=1)
    MAX_DOCUMENTS_PER_STORE = env_int("MAX_DOCUMENTS_PER_STORE", 0, minimum=0)
    MAX_BYTES_PER_STORE_MB = env_int("MAX_BYTES_PER_STORE_MB", 0, minimum=0)
    MAX_UPLOAD_MB = env_int("MAX_UPLOAD_MB", 100, minimum=1)
    TEXT_INGEST_MAX_MB = env_int("TEXT_INGEST_MAX_MB", 10, minimum=1)
    PDF_PARSE_TIMEOUT = env_duration("PDF_PARSE_TIMEOUT", 60, minimum=0.1)
    # OCR (scanned PDF pages and images, in the PDF parser's child process): the pages read per
    # document, the time each may take (a page over it is skipped with a warning), and the
    # largest image in pixels (a larger one is refused before it is decoded: a decompression
    # bomb). 60 megapixels holds an A4 page scanned at 600 dpi. The child's own deadline grows
    # by OCR_PAGE_TIMEOUT for each page it may read.
    OCR_MAX_PAGES = env_int("OCR_MAX_PAGES", 100, minimum=1, maximum=2000)
    OCR_PAGE_TIMEOUT = env_duration("OCR_PAGE_TIMEOUT", 60, minimum=0.1)
    OCR_MAX_PIXELS = env_int("OCR_MAX_PIXELS", 60_000_000, minimum=1, maximum=1_000_000_000)
    # How often the scheduler returns expired claims to the queue (and wakes the workers).
    INGEST_REQUEUE_INTERVAL = env_duration("INGEST_REQUEUE_INTERVAL", 15, minimum=0.5)

    # Retrieval
    # The index language of new stores: a text search configuration of the database (start-up
    # refuses one it lacks). english ranks English text best (docs/benchmarks.md, issue 16); a
    # deployment whose documents are in another language names that one, or simple.
    DEFAULT_INDEX_CONFIG = env_identifier("DEFAULT_INDEX_CONFIG", "english")
    HNSW_EF_SEARCH_MIN = env_int("HNSW_EF_SEARCH_MIN", 40, minimum=1, maximum=1000)
    # PostgreSQL's statement_timeout for each statement of a search (any viewer can pick a slow
    # backend or query): the search API answers 503 `search_timeout` beyond it, and a chat is
    # answered without context.
    SEARCH_TIMEOUT = env_duration("SEARCH_TIMEOUT", 5, minimum=0.001)
    # One rerank call's timeout; unset, each backend has its own (10 s for `llm`, 5 s for the APIs:
    # gateway.connections.providers.rerank). A rerank that times out keeps the fused order.
    RERANK_TIMEOUT = env_duration("RERANK_TIMEOUT", None, minimum=0.001)
    # The cap on an `llm` rerank's answer (passage numbers), in tokens.
    RERANK_MAX_TOKENS = env_int("RERANK_MAX_TOKENS", 200, minimum=1, maximum=100000)
    # A project's `llm` query rewrite (gateway.clients.query_rewrite): the longest its chat model
    # may take to condense a conversation into a standalone question, and the cap on its answer,
    # in tokens. Past either, the chat searches its last user message, saying why on its row.
    QUERY_REWRITE_TIMEOUT = env_duration("QUERY_REWRITE_TIMEOUT", 3, minimum=0.001)
    QUERY_REWRITE_MAX_TOKENS = env_int("QUERY_REWRITE_MAX_TOKENS", 100, minimum=1, maximum=4000)
    # Stores with at most this many chunks are searched by exact scan instead of the HNSW graph.
    VECTOR_EXACT_SCAN_MAX_CHUNKS = env_int("VECTOR_EXACT_SCAN_MAX_CHUNKS", 20000, minimum=0)
    # Evaluation runs (retrieval.evaluation): each holds a lease on its row while it works, renewed
    # at every question; the scheduler puts a run whose lease ran out back in the queue, and fails
    # it after EVALUATION_MAX_ATTEMPTS claims. A run still going after EVALUATION_RUN_TIME_LIMIT is
    # stopped and failed.
    EVALUATION_RUN_LEASE = env_duration("EVALUATION_RUN_LEASE", 120, minimum=3)
    EVALUATION_MAX_ATTEMPTS = env_int("EVALUATION_MAX_ATTEMPTS", 3, minimum=1)
    EVALUATION_RUN_TIME_LIMIT = env_duration("EVALUATION_RUN_TIME_LIMIT", 3600, minimum=1)
    # ParadeDB's analyser for the pg_search backend: `default` or `<iso-639-1>_stem`.
    PG_SEARCH_TOKENIZER = env_choice(
        "PG_SEARCH_TOKENIZER",
        "default",
        (
            "default",
            *(f"{code}_stem" for code in "ar cs da de el en es fi fr hu it nl no pl pt ro ru sv ta tr".split()),
        ),
    )

    # Outbound calls to providers
    # A whole JSON (non-streamed) upstream call. A stream is bounded by it only until its first
    # byte; after that by STREAM_MAX_DURATION, UPSTREAM_IDLE_TIMEOUT and STREAM_MAX_BYTES_MB.
    UPSTREAM_TIMEOUT = env_duration("UPSTREAM_TIMEOUT", 300, minimum=1)
    UPSTREAM_CONNECT_TIMEOUT = env_duration("UPSTREAM_CONNECT_TIMEOUT", 15, minimum=0.1)
    # A chat upstream that has sent no byte of its answer by then is given up on (504). The budget
    # is the call's, retries and their waits included: a `Retry-After` that does not fit in it is
    # passed on to the client instead of waited.
    UPSTREAM_FIRST_BYTE_TIMEOUT = env_duration("UPSTREAM_FIRST_BYTE_TIMEOUT", 60, minimum=0.1)
    # A streamed answer (counted from the call's start) that runs longer than this is ended with a
    # 504 `timeout` error frame; one that has begun and then sends nothing for UPSTREAM_IDLE_TIMEOUT
    # is ended the same way, so a stalled upstream is not held for the whole STREAM_MAX_DURATION.
    STREAM_MAX_DURATION = env_duration("STREAM_MAX_DURATION", 30 * 60, minimum=1)
    UPSTREAM_IDLE_TIMEOUT = env_duration("UPSTREAM_IDLE_TIMEOUT", 120, minimum=0.1)
    # Bytes read from one upstream stream, in MiB; more ends it with a 502 error frame.
    STREAM_MAX_BYTES_MB = env_int("STREAM_MAX_BYTES_MB", 256, minimum=1)
    # A route's target that fails (a failure that moves the call to the next target) this many
    # times within ROUTE_COOLDOWN_WINDOW is skipped by every web process for ROUTE_COOLDOWN.
    ROUTE_COOLDOWN_FAILURES = env_int("ROUTE_COOLDOWN_FAILURES", 3, minimum=1, maximum=1000)
    ROUTE_COOLDOWN_WINDOW = env_duration("ROUTE_COOLDOWN_WINDOW", 60, minimum=1)
    ROUTE_COOLDOWN = env_duration("ROUTE_COOLDOWN", 30, minimum=1)
    UPSTREAM_MAX_RESPONSE_MB = env_int("UPSTREAM_MAX_RESPONSE_MB", 64, minimum=1)
    ALLOW_PRIVATE_UPSTREAMS = env_bool("ALLOW_PRIVATE_UPSTREAMS", False)
    # Loopback addresses only (a model server on this machine: Ollama at localhost:11434). The
    # embedded default, one machine, turns it on (ragmux.launch.embedded); the compose file not.
    ALLOW_LOOPBACK_UPSTREAMS = env_bool("ALLOW_LOOPBACK_UPSTREAMS", False)
    PRIVATE_UPSTREAM_ALLOWLIST = env_host_allowlist("PRIVATE_UPSTREAM_ALLOWLIST")

    # Remote images the gateway fetches for providers that take images inline only (Gemini,
    # Ollama: gateway.connections.images). The two settings above never apply to them.
    IMAGE_FETCH = env_bool("IMAGE_FETCH", True)
    IMAGE_FETCH_MAX_MB = env_int("IMAGE_FETCH_MAX_MB", 8, minimum=1)
    IMAGE_FETCH_TIMEOUT = env_duration("IMAGE_FETCH_TIMEOUT", 10, minimum=0.001)
    IMAGE_FETCH_MAX_PER_REQUEST = env_int("IMAGE_FETCH_MAX_PER_REQUEST", 8, minimum=1)
    # Fetches at once per process (so also connections per image host); while another project
    # waits for one, no project holds more than half.
    IMAGE_FETCH_MAX_CONCURRENT = env_int("IMAGE_FETCH_MAX_CONCURRENT", 16, minimum=1)
    # Fetched images kept in memory by URL (0 entries: none), in base64, which is 4/3 the size.
    IMAGE_CACHE_ENTRIES = env_int("IMAGE_CACHE_ENTRIES", 64, minimum=0)
    IMAGE_CACHE_TTL = env_duration("IMAGE_CACHE_TTL", 600, minimum=0.001)
    _largest_cached_image_mb = math.ceil(IMAGE_FETCH_MAX_MB * 4 / 3)
    IMAGE_CACHE_MAX_MB = env_int("IMAGE_CACHE_MAX_MB", min(256, max(64, 2 * _largest_cached_image_mb)), minimum=1)
    if env_str("IMAGE_CACHE_MAX_MB") is not None and IMAGE_CACHE_MAX_MB < _largest_cached_image_mb:
        raise ConfigError(
            f"IMAGE_CACHE_MAX_MB: {IMAGE_CACHE_MAX_MB} MiB cannot hold one image of IMAGE_FETCH_MAX_MB "
            f"({_largest_cached_image_mb} MiB in base64)"
        )

    # Client API (/v1)
    V1_MAX_BODY_MB = env_int("V1_MAX_BODY_MB", 4, minimum=1, maximum=1024)
    # Browser origins allowed to call /v1 (exact `scheme://host[:port]`, or `*`); none by default.
    V1_CORS_ORIGINS = env_list("V1_CORS_ORIGINS")
    # The completion a chat without `max_tokens` is assumed to write, reserved against the
    # tokens-per-minute limit and the budgets until the call ends and its true usage is known.
    LIMIT_DEFAULT_COMPLETION_TOKENS = env_int("LIMIT_DEFAULT_COMPLETION_TOKENS", 1000, minimum=0)
    # Request log rows older than this are purged (hourly); 0 keeps them all.
    LOG_RETENTION_DAYS = env_int("LOG_RETENTION_DAYS", 90, minimum=0, maximum=36500)

    # First admin of a fresh installation
    RAGMUX_ADMIN_USER = env_str("RAGMUX_ADMIN_USER", "admin")
    RAGMUX_ADMIN_PASSWORD = env_str("RAGMUX_ADMIN_PASSWORD")
    # Threads of the local embedding model; 0 shares the cores among INGEST_WORKERS jobs.
    LOCAL_EMBED_THREADS = env_int("LOCAL_EMBED_THREADS", 0, minimum=0, maximum=256)

    # Audit trail rows older than this many days are purged daily; 0 keeps them all.
    AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 365, minimum=0)

    # Logs and client addresses (docs/observability.md)
    # `json` writes one JSON object per line, each with the id of the request that caused it.
    LOG_FORMAT = env_choice("LOG_FORMAT", "text", ("text", "json"))
    # The proxies in front of ragmux (with TRUST_PROXY_HEADERS): their headers are believed only
    # from a peer inside these networks, and X-Forwarded-For is walked from the right past them.
    TRUSTED_PROXY_CIDRS = env_networks("TRUSTED_PROXY_CIDRS")
    if TRUSTED_PROXY_CIDRS and not TRUST_PROXY_HEADERS:
        raise ConfigError("TRUSTED_PROXY_CIDRS: set only with TRUST_PROXY_HEADERS=true")
    # Metrics (docs/observability.md): off unless METRICS_ENABLED; then on the public port behind
    # the bearer METRICS_TOKEN, or only on the METRICS_LISTEN listener (ragmux.core.metrics_access).
    METRICS_ENABLED = env_bool("METRICS_ENABLED", False)
    METRICS_TOKEN = env_str("METRICS_TOKEN")
    METRICS_LISTEN = env_address("METRICS_LISTEN")
    metrics_access.check(enabled=METRICS_ENABLED, token=METRICS_TOKEN, listen=METRICS_LISTEN, public_port=PORT)
except ConfigError as error:
    sys.stderr.write(f"config: {error}\n")
    raise SystemExit(2) from None

# The test suite's stand-in name resolution for image hosts ({host name: loopback address}, which
# the image fetch then takes for public). Never read from the environment: only the suite sets it,
# and every process refuses to start with it set (ragmux.launch.checks).
IMAGE_FETCH_TEST_RESOLVER: dict[str, str] = {}

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "django_prometheus",
    "ragmux.core",
    "gateway.connections",
    "gateway.clients",
    "stores",
    "ingestion",
    "retrieval",
]

# Django's own middleware (and django_prometheus's) through ragmux.core.middleware, which runs
# their hooks on the event loop for `/v1` calls instead of in a thread each.
MIDDLEWARE = [
    "ragmux.core.middleware.request_context",
    "ragmux.core.middleware.untrusted_proxy_headers",
    "ragmux.core.middleware.PrometheusBefore",
    "ragmux.core.middleware.Security",
    "ragmux.core.middleware.secure_cookies_over_https",
    "ragmux.core.middleware.StaticFilesMiddleware",
    "ragmux.core.middleware.api_response_headers",
    "ragmux.core.middleware.audit_client_address",
    "ragmux.core.middleware.Session",
    "ragmux.core.middleware.Common",
    "ragmux.core.middleware.Csrf",
    "ragmux.core.middleware.Authentication",
    "ragmux.core.middleware.Messages",
    "ragmux.core.middleware.XFrameOptions",
    "ragmux.core.middleware.PrometheusAfter",
    "ragmux.core.middleware.DatabaseUnavailableAnswer",
]

ROOT_URLCONF = "ragmux.urls"
ASGI_APPLICATION = "ragmux.asgi.application"
WSGI_APPLICATION = "ragmux.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "ragmux.core.roles.role_context",
            ],
            # The dashboard's filters, on every page without a {% load %}.
            "builtins": ["ragmux.dashboard.filters"],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTHENTICATION_BACKENDS = ["ragmux.core.authentication.CaseInsensitiveModelBackend"]
# Every password set (dashboard, API, `ragmux reset-password`, RAGMUX_ADMIN_PASSWORD) passes
# through ragmux.core.accounts, which asks each of these.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/admin/login/"
LOGIN_REDIRECT_URL = "/admin/"
# The "per minute" of the LOGIN_*_PER_MIN limits, in seconds; a setting so tests can shorten it.
LOGIN_RATE_WINDOW = 60

SESSION_COOKIE_AGE = int(SESSION_TTL)
SESSION_COOKIE_NAME = "ragmux_session"
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
if TRUST_PROXY_HEADERS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
# "no-referrer" would make browsers send `Origin: null` on form posts, failing CSRF checks.
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

# JSON bodies: the text-ingest endpoint takes up to TEXT_INGEST_MAX_MB of content, /v1 up to
# V1_MAX_BODY_MB (each checks its own limit). Under the ASGI server every body but a multipart one
# is cut off at this size while it is read, chunked or not (ragmux.core.bodies).
DATA_UPLOAD_MAX_MEMORY_SIZE = (max(TEXT_INGEST_MAX_MB, V1_MAX_BODY_MB) + 1) * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024
# Each uploaded file is cut off at MAX_UPLOAD_MB while it streams in (ingestion.uploads).
FILE_UPLOAD_HANDLERS = [
    "ingestion.uploads.CappedUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "ragmux.core.authentication.BearerTokenAuthentication",
        "ragmux.core.authentication.CookieSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["ragmux.core.roles.IsViewer"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["ragmux.core.bodies.JsonParser"],
    "EXCEPTION_HANDLER": "ragmux.core.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A message is a wake-up sent after a user's write (ragmux.core.wakeups): with Redis refusing
# connections it fails at once, hung it fails within about a second, never holding the request.
# Without a socket timeout a publish to a hung Redis waits forever; one retry covers a pooled
# connection that went stale when Redis restarted.
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}
CELERY_TASK_TIME_LIMIT = int(INGEST_JOB_TIMEOUT) + 120
# Evaluation runs have a queue of their own, served by a worker node of their own (`ragmux worker`
# starts it beside the ingestion node), so a long run never holds up ingestion.
CELERY_TASK_DEFAULT_QUEUE = "celery"
EVALUATION_QUEUE = "evaluation"
CELERY_TASK_ROUTES = {"retrieval.evaluation_run": {"queue": EVALUATION_QUEUE}}
CELERY_BEAT_SCHEDULE = {
    "requeue-expired-leases": {"task": "ingestion.requeue_expired", "schedule": INGEST_REQUEUE_INTERVAL},
    "purge-request-logs": {"task": "gateway.purge_request_logs", "schedule": 3600},
    # Minute counters are kept 2 hours, so the sweep runs hourly.
    "purge-usage-counters": {"task": "gateway.purge_usage_counters", "schedule": 3600},
    # Lexical rebuilds a stopped worker left undone (stores.tasks); a running rebuild is not disturbed.
    # Evaluation runs whose worker stopped (their lease ran out) or whose message was lost.
    "requeue-expired-evaluation-runs": {
        "task": "retrieval.evaluation_requeue_expired",
        "schedule": INGEST_REQUEUE_INTERVAL,
    },
    "sweep-lexical-indexes": {"task": "stores.sweep_lexical_indexes", "schedule": 300},
    # Audit rows expire by the day, so a daily sweep keeps the table within a day of the retention.
    "purge-audit-entries": {"task": "ragmux.purge_audit", "schedule": 24 * 3600},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "ragmux.core.logs.JsonFormatter"},
    },
    "filters": {"request_id": {"()": "ragmux.core.logs.RequestIdFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL.upper()},
    "loggers": {
        # Celery's per-task lines would repeat every INGEST_REQUEUE_INTERVAL for the lease sweep;
        # ingestion logs its own "document ingested" line, and failures are still logged as errors.
        **{
            name: {"level": "WARNING"}
            for name in ("django.server", "httpx2", "celery.beat", "celery.app.trace", "celery.worker.strategy")
        },
        # uvicorn's own lines (start, stop, errors) through the same handler, so that in JSON every
        # line of the web process is JSON; its access log stays off (ragmux.access writes that), as
        # `ragmux serve` asks, which this configuration would otherwise undo.
        **(
            {
                "uvicorn": {"handlers": ["console"], "propagate": False},
                "uvicorn.access": {"handlers": [], "propagate": False},
            }
            if LOG_FORMAT == "json"
            else {}
        ),
    },
}
# The worker and the scheduler log through the handler above, not Celery's own: in text mode
# Celery's format stays as it was.
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"
