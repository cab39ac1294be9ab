"""How a provider's failure becomes an :class:`~ragmux.core.errors.UpstreamFailed`: its error
answer relayed with its status, OpenAI error type, code and ``Retry-After``; a reply we cannot
read; and no credential in any message."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from ragmux.core.errors import UpstreamAuthFailed, UpstreamFailed, UpstreamTimeout

MAX_ERROR_MESSAGE = 512
# The credential shapes providers are known to echo: HTTP auth schemes, JWTs, OpenAI and Anthropic
# (`sk-`), Google API keys (`AIza`) and OAuth tokens (`ya29.`), Groq (`gsk_`), Hugging Face
# (`hf_`) and xAI (`xai-`) keys.
_SECRET_PATTERNS = re.compile(
    r"Bearer\s+\S+|Basic\s+\S+|eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_-]+)*"
    r"|sk-[A-Za-z0-9_-]{8,}|AIza[A-Za-z0-9_-]{20,}|ya29\.[A-Za-z0-9._-]{8,}"
    r"|gsk_[A-Za-z0-9]{8,}|hf_[A-Za-z0-9]{8,}|xai-[A-Za-z0-9]{8,}"
)
# A URL's userinfo (`https://user:password@host`): the credentials go, the scheme and host stay.
_URL_USERINFO = re.compile(r"(?<=://)[^\s/?#@]+@")

# The statuses with which a provider refuses the connection's own credentials.
CREDENTIALS_REFUSED = frozenset((401, 403))
# How an adapter reads a provider's error answer: (status, error object) -> the status, OpenAI
# error type and code the client gets.
Classify = Callable[[int, dict | None], tuple[int, str, str | None]]


def redact(text: str, secret: str) -> str:
    """Upstream messages can echo credentials back; none of them may reach a client or a log."""
    if secret:
        text = text.replace(secret, "[redacted]")
    text = _URL_USERINFO.sub("[redacted]@", text)
    return _SECRET_PATTERNS.sub("[redacted]", text)


def type_for_status(status: int) -> str:
    """The OpenAI error type a client's SDK expects with an upstream's status."""
    if status >= 500:
        return "upstream_error"
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error")


def failure_kind(exc: UpstreamFailed) -> str:
    """What kind of failure a provider call ended in, as the request log's attempts and the
    route metrics name it: ``timeout``, ``connect`` (no usable HTTP answer: refused, reset, not
    resolved), ``http_5xx`` for any server error, ``http_<status>`` for a refusal, else the
    failure's own code (``upstream_malformed``, ``private_upstream``, ...)."""
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if exc.upstream_status is not None:
        return "http_5xx" if exc.upstream_status >= 500 else f"http_{exc.upstream_status}"
    if exc.code == "upstream_unreachable" and exc.retryable:
        return "connect"
    return exc.code or "upstream_error"


def by_status(status: int, error: dict | None) -> tuple[int, str, str | None]:
    """The classification of a provider whose error bodies say nothing a client needs."""
    return status, type_for_status(status), None


def malformed(label: str, what: str = "body") -> UpstreamFailed:
    return UpstreamFailed(f"{label} returned a malformed {what}", code="upstream_malformed")


def ended_early(label: str) -> UpstreamFailed:
    return UpstreamFailed(f"{label} ended the stream before the answer was complete", code="upstream_truncated")


def retry_after_seconds(headers: Mapping[str, str]) -> int | None:
    """The seconds a provider's ``Retry-After`` asks for, in either of its forms (delta-seconds
    or an HTTP-date, counted on our clock); None when it sent none we can read."""
    value = (headers.get("retry-after") or "").strip()
    if value.isdigit():
        return int(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        when = when.replace(tzinfo=UTC)
    return max(0, math.ceil((when - datetime.now(UTC)).total_seconds()))


def retry_wait(exc: UpstreamFailed, *, backoff: float) -> float:
    """How long to wait before trying a failed call again: what the provider asked for, else the
    caller's own backoff."""
    return float(exc.retry_after) if exc.retry_after is not None else backoff


def refusal(
    *,
    label: str,
    secret: str,
    status: int,
    content: bytes,
    headers: Mapping[str, str],
    classify: Classify,
    retryable_statuses: Collection[int],
) -> UpstreamFailed:
    """A provider's error answer (status >= 400), relayed as the provider said it."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = ""
    if isinstance(error, dict):
        message = str(error.get("message") or "")
    elif isinstance(error, str):
        message = error
    elif isinstance(body, dict) and isinstance(body.get("message"), str):
        # Azure's gateway (a bad token) and Cohere answer `{"message": ...}` with no error object.
        message = body["message"]
    if not message:
        message = content.decode("utf-8", errors="replace").strip() or "no details"
    relayed_status, openai_type, code = classify(status, error if isinstance(error, dict) else None)
    if CREDENTIALS_REFUSED.intersection((status, relayed_status)):
        # The operator's credentials, not the client's: a 401 would make every SDK blame the caller's key.
        message = redact(
            f"{label} refused the credentials of this gateway's connection (HTTP {status}): {message}; "
            "an admin must check the connection's API key",
            secret,
        )[:MAX_ERROR_MESSAGE]
        return UpstreamAuthFailed.relayed(
            message,
            status=status,
            openai_type=UpstreamAuthFailed.openai_type,
            code=UpstreamAuthFailed.code,
            retryable=False,
        )
    message = redact(f"{label} answered HTTP {status}: {message}", secret)[:MAX_ERROR_MESSAGE]
    return UpstreamFailed.relayed(
        message,
        status=relayed_status,
        openai_type=openai_type,
        code=code,
        retryable=relayed_status in retryable_statuses,
        retry_after=retry_after_seconds(headers),
    )


def json_answer(
    *,
    label: str,
    secret: str,
    status: int,
    content: bytes,
    headers: Mapping[str, str],
    retryable_statuses: Collection[int],
    classify: Classify = by_status,
) -> object:
    """The JSON body of a provider's answer: its refusal relayed when the status is an error (read
    by ``classify``; by default the status alone says it), a malformed-body failure when it is
    not JSON."""
    if status >= 400:
        raise refusal(
            label=label,
            secret=secret,
            status=status,
            content=content,
            headers=headers,
            classify=classify,
            retryable_statuses=retryable_statuses,
        )
    try:
        return json.loads(content)
    except ValueError:
        raise malformed(label, "body (not JSON)") from None
