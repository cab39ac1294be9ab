"""Azure OpenAI routes of the fake upstream: OpenAI's chat and embeddings answers under Azure's
paths, refused the way Azure refuses them.

- ``azure.chat`` / ``azure.embeddings``: the classic paths,
  ``/openai/deployments/<deployment>/chat/completions`` and ``.../embeddings``, which need an
  ``api-version`` query (a dated one: :data:`API_VERSION` shape) and a deployment in
  :data:`DEPLOYMENTS`;
- ``azure.v1_chat`` / ``azure.v1_embeddings``: the v1 API, ``/openai/v1/chat/completions`` and
  ``/openai/v1/embeddings``, the deployment named as ``model`` in the body; a dated
  ``api-version`` is refused there (the v1 API takes none).

Every route wants the key in the ``api-key`` header (:data:`AZURE_KEY`) and refuses a bearer
token, as a resource with key authentication does. Failures are Azure's error bodies
(``{"error": {"code", "message"}}``), for the ``status`` knob too.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from tests.fakes.upstream import FakeUpstream, Knobs

AZURE_KEY = "azure-fake-key-0123456789abcdef"
DEPLOYMENTS = frozenset({"chat-prod", "embed-prod"})
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
# Azure's codes by status, for the `status` knob.
AZURE_CODES = {400: "content_filter", 401: "401", 404: "DeploymentNotFound", 429: "429"}


def azure_error(status: int, knobs: Knobs) -> object:
    from tests.fakes.upstream import failure_message

    return {
        "error": {"code": AZURE_CODES.get(status, "InternalServerError"), "message": failure_message(status, knobs)}
    }


def _refusal(status: int, code: str, message: str):
    from tests.fakes.upstream import json_reply

    return json_reply({"error": {"code": code, "message": message}}, status)


def _checked(up: FakeUpstream, deployment: str | None):
    """Azure's refusal of the request being answered, or None when it is one Azure would take."""
    request = up.current.request
    if "authorization" in request.headers or request.headers.get("api-key") != AZURE_KEY:
        return _refusal(
            401,
            "401",
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid "
            "key for an active subscription and use a correct regional API endpoint for your resource.",
        )
    versions = parse_qs(urlsplit(request.path).query).get("api-version", [])
    if deployment is None:
        if versions and versions != ["preview"]:
            return _refusal(400, "BadRequest", f"API version {versions[0]} is not supported by the v1 API")
        deployment = request.json().get("model")
    elif len(versions) != 1 or not API_VERSION.match(versions[0]):
        return _refusal(404, "404", "Resource not found")
    if deployment not in DEPLOYMENTS:
        return _refusal(
            404,
            "DeploymentNotFound",
            "The API deployment for this resource does not exist. If you created the deployment within the last "
            "5 minutes, please wait a moment and try again.",
        )
    return None


def register_azure_routes(upstream: FakeUpstream) -> None:
    from tests.fakes.upstream import openai_chat, openai_embeddings

    def checked(answer, *, classic: bool):
        def handler(up, payload, match, knobs):
            refused = _checked(up, match.group("deployment") if classic else None)
            return refused or answer(up, payload, match, knobs)

        return handler

    deployment = r"/openai/deployments/(?P<deployment>[^/]+)"
    routes = (
        ("azure.chat", rf"{deployment}/chat/completions", openai_chat, True),
        ("azure.embeddings", rf"{deployment}/embeddings", openai_embeddings, True),
        ("azure.v1_chat", r"/openai/v1/chat/completions", openai_chat, False),
        ("azure.v1_embeddings", r"/openai/v1/embeddings", openai_embeddings, False),
    )
    for name, pattern, answer, classic in routes:
        upstream.route(name, "POST", pattern, error_body=azure_error)(checked(answer, classic=classic))
