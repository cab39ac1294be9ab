"""Trying a connection: one tiny call per thing it can do (chat, embeddings, rerank), for the
connection test (recorded and audited) and the test before saving (neither)."""

from __future__ import annotations

import time

from django.utils import timezone

from gateway.connections import selectors
from gateway.connections.credentials import open_api_key
from gateway.connections.models import (
    RERANK_API_PROVIDERS,
    Capability,
    ModelConnection,
    ProbeMode,
    ProviderType,
    capabilities_of,
    why_cannot,
)
from gateway.connections.providers.chat import NoChat, chat_provider
from gateway.connections.providers.embeddings import NoEmbeddings, embedding_provider
from gateway.connections.providers.rerank import NoRerank, backend_of, reranker
from gateway.connections.services import audit_connection, validate_settings
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import InvalidInput, UpstreamFailed

PROBE_TIMEOUT = 60.0


def embedding_width(connection: ModelConnection, *, timeout: float = PROBE_TIMEOUT) -> int:
    """The width of the vectors the connection's model returns (one tiny embedding call)."""
    return embedding_provider(connection, timeout=timeout).embed(["ping"]).dimensions


def _chat_reply(connection: ModelConnection) -> str:
    """The text of a one-token answer through the connection."""
    choices = chat_provider(connection).probe(timeout=PROBE_TIMEOUT)["choices"]
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _ranked_count(connection: ModelConnection) -> int:
    """How many passages a rerank API ranks of a two-passage probe."""
    probe = reranker(connection, backend=backend_of(connection), timeout=PROBE_TIMEOUT)
    return len(probe.rerank("ping", ["ping", "pong"], top_n=2).ranking)


# What each probe says of the model it reached, in the outcome's field of that name.
_PROBES = {
    ProbeMode.CHAT: ("reply", _chat_reply),
    ProbeMode.EMBEDDING: ("dimensions", embedding_width),
    ProbeMode.RERANK: ("ranked", _ranked_count),
}
_CAPABILITY_MODES = {"chat": ProbeMode.CHAT, "embeddings": ProbeMode.EMBEDDING, "rerank": ProbeMode.RERANK}
MODE_NOUNS = {ProbeMode.CHAT: "chat", ProbeMode.EMBEDDING: "embeddings", ProbeMode.RERANK: "rerank"}


def _probe(connection: ModelConnection, mode: str) -> dict:
    field, call = _PROBES[mode]
    result = {"mode": mode, "ok": True, "reply": None, "dimensions": None, "ranked": None, "error": ""}
    started = time.monotonic()
    try:
        result[field] = call(connection)
    except (UpstreamFailed, NoChat, NoEmbeddings, NoRerank) as exc:
        result.update(ok=False, error=str(exc)[:512])
    result["latency_ms"] = int((time.monotonic() - started) * 1000)
    return result


def _result_said(result: dict) -> str:
    noun = MODE_NOUNS[result["mode"]]
    if not result["ok"]:
        return f"{noun} failed after {result['latency_ms']} ms: {result['error']}"
    if result["mode"] == ProbeMode.CHAT:
        answered = f"answered “{result['reply']}”" if result["reply"] else "answered (an empty reply)"
    elif result["mode"] == ProbeMode.EMBEDDING:
        answered = f"answered with vectors of {result['dimensions']} dimensions"
    else:
        answered = f"ranked {result['ranked']} of 2 passages"
    return f"{noun} {answered} in {result['latency_ms']} ms"


def _sentence(text: str) -> str:
    text = text.rstrip(". ")
    return f"{text[:1].upper()}{text[1:]}."


def _test_plan(connection: ModelConnection, mode: str | None, uses: dict[str, list[str]]) -> tuple[list[str], str]:
    """The modes a test tries, and why those, in words: the one asked for, else what the
    connection is used for, else everything its type can do."""
    if mode:
        return [mode], f"Tried {MODE_NOUNS[mode]}, as asked"
    if uses:
        used = ", ".join(f"{MODE_NOUNS[m]} ({', '.join(users)})" for m, users in uses.items())
        return list(uses), f"Tried what it is used for: {used}"
    able = [m for capability, m in _CAPABILITY_MODES.items() if capabilities_of(connection.provider_type)[capability]]
    label = ProviderType(connection.provider_type).label
    return (
        able,
        f"Not used yet, so tried everything its type ({label}) can do: {', '.join(MODE_NOUNS[m] for m in able)}",
    )


def _tested(connection: ModelConnection, mode: str | None, uses: dict[str, list[str]]) -> dict:
    """The outcome of probing ``connection``: each mode's result, and whether it passed. A
    connection in use passes when every use answered; an unused one when anything did (an
    embedding model that cannot chat is still a good embedding connection)."""
    refusal = _why_cannot_probe(connection, mode) if mode else None
    if refusal is not None:
        raise InvalidInput(refusal, field="mode")
    modes, why = _test_plan(connection, mode, uses)
    results = [_probe(connection, m) for m in modes]
    answered = [r["ok"] for r in results]
    ok = any(answered) if not mode and not uses else all(answered)
    failed = [r for r in results if not r["ok"]]
    first = {
        field: next((r[field] for r in results if r[field] is not None), None) for field in ("reply", "dimensions")
    }
    return {
        "ok": ok,
        "mode": modes[0],
        "modes": modes,
        "why": why,
        "summary": f"{why}. {_sentence('; '.join(_result_said(r) for r in results))}",
        "results": results,
        **first,
        "latency_ms": sum(r["latency_ms"] for r in results),
        # Each failure, named by its mode when several were tried.
        "error": "; ".join(
            f"{MODE_NOUNS[r['mode']]}: {r['error']}" if len(results) > 1 else r["error"] for r in failed
        )[:512],
    }


def _why_cannot_probe(connection: ModelConnection, mode: str) -> str | None:
    """Why ``connection`` cannot be probed in ``mode``; None when it can. Only a rerank API is
    probed by a ranking: a chat model reranks by chat, which is its chat probe."""
    if mode != ProbeMode.RERANK:
        return why_cannot(connection, Capability.EMBED if mode == ProbeMode.EMBEDDING else Capability.CHAT)
    if connection.provider_type in RERANK_API_PROVIDERS.values():
        return None
    return (
        f'the {connection.provider_type} connection "{connection.name}" has no rerank API: '
        "a store reranks with it by chat, so test its chat"
    )


def connection_test(*, connection: ModelConnection, mode: str | None = None, actor=None) -> dict:
    """Probes the connection and records the outcome. Without a mode it tries what the
    connection is used for (a project's chat, a store's embeddings, a store's reranking), and an
    unused connection everything its type can do (see :func:`_tested`)."""
    outcome = _tested(connection, mode, selectors.connection_uses(connection))
    ModelConnection.objects.filter(pk=connection.pk).update(
        last_test_at=timezone.now(),
        last_test_ok=outcome["ok"],
        last_test_latency_ms=outcome["latency_ms"],
        last_test_dimensions=outcome["dimensions"],
        last_test_error=outcome["error"],
        last_test_modes=outcome["modes"],
    )
    audited = {name: outcome[name] for name in ("ok", "modes", "why", "dimensions", "reply", "latency_ms", "error")}
    audit_connection(connection, actor=actor, action="connection.test", after=audited)
    return outcome


def connection_trial(
    *,
    provider_type: str,
    base_url: str,
    model_name: str,
    dimensions: int | None,
    api_version: str,
    api_key: str,
    mode: str | None = None,
    connection_id: int | None = None,
) -> dict:
    """Tests a connection before it is saved ("Test before saving"), checked as a save would be;
    nothing is stored or audited and the key lives only in this call. With ``connection_id`` (the
    connection being edited) an empty key is that connection's stored one, and its uses decide
    what is tried."""
    model_name, base_url, dimensions, api_version = validate_settings(
        provider_type, base_url, model_name, dimensions, api_version
    )
    saved = selectors.connection_named_by(connection_id, field="connection_id")
    trial = ModelConnection(
        name=saved.name if saved else "unsaved",
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
    )
    try:
        trial.trial_api_key = api_key.strip() or (open_api_key(saved) if saved else "")
    except DecryptionFailed as exc:
        raise InvalidInput(exc.message, field="api_key") from None
    return _tested(trial, mode, selectors.connection_uses(saved) if saved else {})
