"""How retrieved context and the project's system prompt enter a chat request (pure).

Both are put in front of the first ``system`` (or ``developer``) message, or in a new
leading ``system`` message when there is none. The system prompt goes in first and the
context in front of it, so the upstream reads: context, project system prompt, client text.
"""

from __future__ import annotations

from typing import Any

SYSTEM_ROLES = ("system", "developer")


def _part_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        # A part without a type is text, as OpenAI-compatible servers read it.
        return [
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str)
        ]
    return []


def _text(message: dict) -> str:
    return "\n".join(text for text in _part_texts(message.get("content")) if text.strip()).strip()


def query_text(messages: list[dict]) -> str:
    """The text of the last ``user`` message (its text parts joined), the retrieval query."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message)
    return ""


def conversation(messages: list[dict]) -> list[tuple[str, str]]:
    """(role, text) of each ``user`` and ``assistant`` message with text, in order: the turns a
    follow-up question may lean on."""
    turns = [(message.get("role"), _text(message)) for message in messages]
    return [(role, text) for role, text in turns if role in ("user", "assistant") and text]


def message_texts(messages: list[dict]) -> list[str]:
    """Every text in the messages, for estimating tokens when the upstream reports none."""
    return [text for message in messages for text in _part_texts(message.get("content"))]


def _prepend(messages: list[dict], text: str, *, drop_cache_control: bool) -> list[dict]:
    for index, message in enumerate(messages):
        if message.get("role") not in SYSTEM_ROLES:
            continue
        content = message.get("content")
        if isinstance(content, list):
            parts = [dict(part) if isinstance(part, dict) else part for part in content]
            if drop_cache_control:
                for part in parts:
                    if isinstance(part, dict):
                        part.pop("cache_control", None)
            content = [{"type": "text", "text": text}, *parts]
        elif isinstance(content, str) and content:
            content = f"{text}\n\n{content}"
        else:
            content = text
        return [*messages[:index], {**message, "content": content}, *messages[index + 1 :]]
    return [{"role": "system", "content": text}, *messages]


def inject(messages: list[dict], *, context: str, system_prompt: str) -> list[dict]:
    """The messages the upstream receives; the client's list and messages are left untouched."""
    if system_prompt:
        messages = _prepend(messages, system_prompt, drop_cache_control=False)
    if context:
        # A prompt cache could never serve the per-query context put in front of the marker.
        messages = _prepend(messages, context, drop_cache_control=True)
    return messages
