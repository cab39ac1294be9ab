"""A chat's retrieval query under its project's `query_rewrite` setting.

``off`` searches the last user message; ``last_turns`` that message with the earlier user turns
it refers back to (the rule in `gateway.clients.followups`); ``llm`` a standalone question the
project's chat model condenses the conversation into, asked through the one failover engine with
the plan the chat itself is answered by (its connection, or its route's targets in order; or
the project's ``query_rewrite_connection`` when it names one), at
temperature 0, its answer capped at QUERY_REWRITE_MAX_TOKENS and the whole within
QUERY_REWRITE_TIMEOUT. A conversation of one user message alone is standalone already: it is
not sent. Any failure (a timeout, an upstream error, a model that cannot chat, an empty or
absurdly long answer) falls back to the last user message, with the reason on the call's row
(``query_rewrite_reason``); the chat is answered all the same.

What the condensation spends is the call's: its tokens on the row (``query_rewrite_tokens``),
priced by the target that answered, reserved with the chat when the call is admitted
(:func:`with_condensation`) and settled with it. A condensation that timed out or whose client
left is charged its prompt's estimate.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import replace
from typing import Any

from django.conf import settings

from gateway.clients.followups import condense_prompt, last_turns_query, standalone_question
from gateway.clients.injection import conversation, message_texts, query_text
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Project, QueryRewrite
from gateway.connections import failover
from gateway.connections.failover import Attempts, Plan, Target
from gateway.connections.providers.chat_reply import count
from gateway.connections.providers.embeddings import estimate_tokens
from ragmux.core.errors import ServiceError

logger = logging.getLogger("ragmux.gateway.query_rewrite")


def _condenses(project: Project, messages: list[dict]) -> bool:
    """Whether the chat asks its model for a standalone question (when it searches a store):
    `llm`, and a turn before the last user message."""
    return project.query_rewrite == QueryRewrite.LLM and bool(query_text(messages)) and len(conversation(messages)) > 1


def with_condensation(
    size: dict[str, Any], project: Project, messages: list[dict], *, searches: bool
) -> dict[str, Any]:
    """A chat's reservation (`limiter.admit`'s arguments) with its condensation added when it
    will ask for one (``searches``: it searches a store, the project's or a `file_search`'s):
    its prompt's estimate and the answer it may write, at the price of the project's
    `query_rewrite_connection`, else at each chat target's (it is answered by the chat's plan)."""
    if not (searches and _condenses(project, messages)):
        return size
    prompt = estimate_tokens(message_texts(condense_prompt(conversation(messages))))
    answer = settings.QUERY_REWRITE_MAX_TOKENS
    grown = {**size, "tokens": size["tokens"] + prompt + answer}
    rewriter = project.query_rewrite_connection
    if rewriter is not None:
        condensation = Spend(rewriter.provider_type, rewriter.model_name, prompt, answer)
        return {**grown, "spends": [*size["spends"], condensation]}
    dearest_of = [
        replace(spend, prompt_tokens=spend.prompt_tokens + prompt, completion_tokens=spend.completion_tokens + answer)
        for spend in size["dearest_of"]
    ]
    return {**grown, "dearest_of": dearest_of}


async def retrieval_query(call: Call, plan: Plan, messages: list[dict]) -> str:
    """What the chat searches its store for (see the module); "" when its last user message has
    no text. ``plan`` is the chat's: it condenses unless the project names a connection for it."""
    last = query_text(messages)
    if not last:
        return ""
    if call.project.query_rewrite == QueryRewrite.LAST_TURNS:
        return last_turns_query([text for role, text in conversation(messages) if role == "user"])
    if not _condenses(call.project, messages):
        return last
    rewriter = call.project.query_rewrite_connection
    query, reason = await _condensed(call, plan if rewriter is None else Plan.of_connection(rewriter), messages, last)
    if reason:
        call.query_rewrite_reason = reason
        logger.warning("project %s searches the last user message: %s", call.project.pk, reason)
    return query or last


async def _condensed(call: Call, plan: Plan, messages: list[dict], last: str) -> tuple[str, str]:
    """The standalone question the chat's model answers, and ""; or "" and why there is none."""
    prompt = condense_prompt(conversation(messages))
    attempts = Attempts(plan.targets[0])
    timeout = settings.QUERY_REWRITE_TIMEOUT

    async def condensed(provider, once):
        body = {"messages": prompt, "temperature": 0, provider.token_limit_field: settings.QUERY_REWRITE_MAX_TOKENS}
        return await provider.complete(body, once=once)

    try:
        async with asyncio.timeout(timeout):
            reply = await failover.answer(plan, attempts, condensed)
    except (TimeoutError, asyncio.CancelledError) as exc:
        _charge(call, attempts.current, estimate_tokens(message_texts(prompt)), 0, reported=False)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return "", f"the chat model took longer than QUERY_REWRITE_TIMEOUT ({timeout:g}s)"
    except ServiceError as exc:
        return "", f"the chat model failed: {exc.message}"
    except Exception:
        logger.exception("query rewrite for project %s failed", call.project.pk)
        return "", "internal error in the query rewrite (see the server log)"
    text = _answer_text(reply)
    usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    prompt_tokens, answer_tokens = count(usage.get("prompt_tokens")), count(usage.get("completion_tokens"))
    reported = prompt_tokens + answer_tokens > 0
    if not reported:
        prompt_tokens = estimate_tokens(message_texts(prompt))
        answer_tokens = math.ceil(len(text if isinstance(text, str) else "") / 4)
    _charge(call, attempts.current, prompt_tokens, answer_tokens, reported=reported)
    return standalone_question(text, last)


def _answer_text(reply: dict) -> object:
    choices = reply.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    return message.get("content") if isinstance(message, dict) else None


def _charge(call: Call, target: Target, prompt_tokens: int, answer_tokens: int, *, reported: bool) -> None:
    """The condensation's tokens onto the call's row, priced by the target that answered (or was
    tried last)."""
    call.query_rewrite_tokens += prompt_tokens + answer_tokens
    call.tokens_estimated = call.tokens_estimated or not reported
    call.spends.append(Spend(target.connection.provider_type, target.model, prompt_tokens, answer_tokens))
