"""Azure OpenAI: OpenAI's wire format under Azure's paths, key header and error codes.

A connection's base URL is the resource's endpoint (``https://<resource>.openai.azure.com``) and
its model name is the deployment's. With an ``api_version`` the classic per-deployment paths are
called (``/openai/deployments/<deployment>/chat/completions?api-version=...``); without one, the
v1 API (``/openai/v1/chat/completions``, the deployment named as ``model`` in the body). The chat
and embedding adapters (chat_openai, embeddings) build on these.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from gateway.connections.providers.upstream_errors import type_for_status

# What a user may paste as the endpoint beyond the resource's root; the paths are ours to add.
_API_SUFFIXES = ("/openai/v1", "/openai")
# Azure's own codes for refusals that OpenAI names otherwise: an SDK that knows OpenAI's codes
# then knows these. A bare status number as the code says nothing the status does not.
_OPENAI_CODES = {
    "401": "invalid_api_key",
    "429": "rate_limit_exceeded",
    "DeploymentNotFound": "model_not_found",
}


def resource_url(base_url: str) -> str:
    """The resource's endpoint, whatever API path a user pasted after it."""
    url = base_url.rstrip("/")
    for suffix in _API_SUFFIXES:
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def operation_url(base_url: str, *, deployment: str, api_version: str, operation: str) -> str:
    """Where ``operation`` (``chat/completions``, ``embeddings``) of ``deployment`` is called."""
    if not api_version:
        return f"{base_url}/openai/v1/{operation}"
    query = urlencode({"api-version": api_version})
    return f"{base_url}/openai/deployments/{quote(deployment, safe='')}/{operation}?{query}"


def headers(api_key: str) -> dict[str, str]:
    """Azure takes its key in ``api-key``, not as a bearer token."""
    return {"api-key": api_key} if api_key else {}


def classify(status: int, error: dict | None) -> tuple[int, str, str | None]:
    """The status, OpenAI error type and code a client gets for an Azure error body
    (``{"error": {"code", "message", "type"?}}``): Azure's codes OpenAI has a name for are said
    in OpenAI's, its other codes (``content_filter``, ``OperationNotSupported``) as they are."""
    error = error or {}
    raw = error.get("code")
    raw = str(raw) if isinstance(raw, (str, int)) and not isinstance(raw, bool) else ""
    code = _OPENAI_CODES.get(raw) or (None if raw.isdigit() or not raw else raw)
    given_type = error.get("type")
    openai_type = given_type if status < 500 and isinstance(given_type, str) and given_type else None
    return status, openai_type or type_for_status(status), code
