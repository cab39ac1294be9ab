"""Who is calling `/v1`: the gateway key in ``Authorization: Bearer sk-proj-…``."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from gateway.clients import ledger, selectors
from gateway.clients.gateway_keys import KEY_PREFIX, hash_key
from gateway.clients.models import GatewayKey
from ragmux.core import asyncdb
from ragmux.core.errors import Forbidden, Unauthenticated
from retrieval.filters import Filter, all_of, parse_filter

# last_used_at is refreshed at most this often, so a busy key does not write on every call.
LAST_USED_RESOLUTION = timedelta(minutes=1)
_MARK_USED = f"UPDATE {GatewayKey._meta.db_table} SET last_used_at = %s WHERE id = %s"
SCOPE_ACTIONS = {
    "chat": "chat completions and embeddings",
    "retrieve": "retrieval",
    "rerank": "reranking",
    "models": "model listings",
    "files_read": "reading files and vector stores",
    "files_write": "writing files and vector stores",
}


def _refused(endpoint: str, message: str, *, type: str, code: str) -> Unauthenticated:
    # Calls without a valid key are counted but not logged: there is no project to log them to.
    ledger.count_refusal(endpoint)
    return Unauthenticated(message, code=code, openai_type=type)


async def authenticate(*, authorization: str, endpoint: str) -> GatewayKey:
    """The key named by the header, with its project, connections and store loaded: on the event
    loop, one prepared statement (and, at most once a minute per key, one update)."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _refused(
            endpoint,
            "missing Authorization: Bearer <project api key> header",
            type="invalid_request_error",
            code="missing_api_key",
        )
    api_key = await selectors.key_by_hash(key_hash=hash_key(token)) if token.startswith(KEY_PREFIX) else None
    if api_key is None:
        raise _refused(endpoint, "invalid project api key", type="invalid_api_key", code="invalid_api_key")
    now = timezone.now()
    if api_key.revoked_at is not None:
        raise _refused(endpoint, "this api key has been revoked", type="invalid_api_key", code="key_revoked")
    if api_key.expires_at is not None and api_key.expires_at <= now:
        raise _refused(endpoint, "this api key has expired", type="invalid_api_key", code="key_expired")
    if api_key.last_used_at is None or now - api_key.last_used_at >= LAST_USED_RESOLUTION:
        await asyncdb.execute(_MARK_USED, (now, api_key.pk))
    return api_key


def require_scope(api_key: GatewayKey, scope: str) -> None:
    if scope not in api_key.scopes:
        raise Forbidden(
            f"api key is not authorised for {SCOPE_ACTIONS[scope]}",
            code="insufficient_scope",
            openai_type="insufficient_scope",
        )


def scoped_filters(api_key: GatewayKey, requested: Filter | None) -> Filter | None:
    """What a call's search filters on: the key's document scope ANDed with the filter the call
    sent, so a call can narrow its key's scope and never widen it. The scope was checked when the
    key was saved; it is parsed again here, so a scope the code can no longer read fails the call
    (an InvalidFilter, a 500) rather than reading the whole store."""
    scope = None if api_key.filters is None else parse_filter(api_key.filters)
    return all_of(scope, requested)
