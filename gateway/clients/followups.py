"""Follow-up questions (pure): what a chat searches its store for when its last user message
leans on the turns before it ("and for part-timers?", "how is it cooled?").

`last_turns` — the rule, applied to the user messages' texts in order:

1. The last user message is the query, unless it *refers back*: it has at most
   ``SHORT_TURN_WORDS`` words, or holds a referring word (``REFERRING_WORDS``: a pronoun or
   demonstrative such as "it", "they", "those"), or opens with a continuation ("and", "or",
   "but", "also", "so", "then", "what about", "how about").
2. A message that refers back is searched with the earlier user messages in front of it, newest
   first, at most ``MAX_EARLIER_TURNS`` of them, stopping after the first that does not itself
   refer back (the turn that named the subject); empty ones are skipped.
3. The earlier turns take at most ``EARLIER_TURNS_CHARS`` characters together: the one that
   does not fit is cut at a word boundary, and none older is taken. The last message is kept
   whole, as `off` searches it. The parts are joined by line breaks, oldest first.

`llm` — :func:`condense_prompt` is the one prompt asking a chat model for a standalone question
(its conversation untrusted, neutralised as retrieval neutralises passages), and
:func:`standalone_question` reads the answer or says why it cannot be used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from retrieval.context import DATA_ONLY_INSTRUCTION, neutralise

SHORT_TURN_WORDS = 4
REFERRING_WORDS = frozenset(
    {
        "it", "its", "itself", "they", "them", "their", "theirs", "themselves",
        "this", "that", "these", "those", "he", "him", "his", "she", "her", "hers",
        "former", "latter", "same", "such",
    }
)  # fmt: skip
CONTINUATIONS = frozenset({"and", "or", "but", "also", "so", "then"})
CONTINUATION_PAIRS = frozenset({("what", "about"), ("how", "about")})
MAX_EARLIER_TURNS = 2
EARLIER_TURNS_CHARS = 600
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")

# The condensation: the conversation shown to the model (the newest turns first kept), each
# message cut to MESSAGE_CHARS, all of it to CONVERSATION_CHARS.
MESSAGE_CHARS = 1000
CONVERSATION_CHARS = 4000
# An answer longer than this, or than twice the last message, is no search query.
ANSWER_MAX_CHARS = 1000
CONDENSE_INSTRUCTION = (
    "You turn the last user message of a conversation into a standalone search query. "
    f"{DATA_ONLY_INSTRUCTION} "
    "Replace pronouns and references to earlier turns with what they refer to, keep the user's "
    "own words and language otherwise, add nothing the conversation does not say, and do not "
    "answer the question. Reply with the query alone, on one line, without quotes or comments."
)
CONDENSE_REQUEST = "Rewrite the last user message above as a standalone search query."
_ROLE_NAMES = {"user": "User", "assistant": "Assistant"}
_LABEL = re.compile(r"^(?:standalone\s+)?(?:search\s+)?(?:query|question)\s*:\s*", re.IGNORECASE)
_QUOTES = ('"', "'", "“", "”", "«", "»", "`")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def refers_back(text: str) -> bool:
    """Whether a user message leans on an earlier turn (the rule's step 1)."""
    found = words(text)
    if len(found) <= SHORT_TURN_WORDS or REFERRING_WORDS.intersection(found):
        return True
    return found[0] in CONTINUATIONS or tuple(found[:2]) in CONTINUATION_PAIRS


def _cut(text: str, limit: int) -> str:
    """``text``'s beginning, at most ``limit`` characters, ended at a word boundary."""
    if len(text) <= limit:
        return text
    head = text[: limit + 1]
    return (head.rsplit(None, 1)[0] if " " in head.strip() else head[:limit]).rstrip()


def last_turns_query(user_turns: Sequence[str]) -> str:
    """The `last_turns` retrieval query from the user messages' texts, in order (see the module)."""
    last = user_turns[-1].strip() if user_turns else ""
    if not last or not refers_back(last):
        return last
    earlier, budget = [], EARLIER_TURNS_CHARS
    for text in (turn.strip() for turn in reversed(user_turns[:-1])):
        if not text:
            continue
        taken = _cut(text, budget)
        if taken:
            earlier.append(taken)
        budget -= len(taken) + 1
        if len(earlier) == MAX_EARLIER_TURNS or taken != text or budget <= 0 or not refers_back(text):
            break
    return "\n".join([*reversed(earlier), last])


def _one_line(text: str) -> str:
    return " ".join(text.split())


def condense_prompt(turns: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The chat messages asking for a standalone question from ``turns`` ((role, text) of the user
    and assistant messages, in order; the last is the user's): the newest turns that fit in
    CONVERSATION_CHARS, each one line cut to MESSAGE_CHARS and neutralised."""
    lines: list[str] = []
    budget = CONVERSATION_CHARS
    for role, text in reversed(turns):
        line = f"{_ROLE_NAMES.get(role, 'User')}: {neutralise(_cut(_one_line(text), MESSAGE_CHARS))}"
        if lines and len(line) > budget:
            break
        lines.append(line)
        budget -= len(line) + 1
    transcript = "\n".join(reversed(lines))
    return [
        {"role": "system", "content": CONDENSE_INSTRUCTION},
        {"role": "user", "content": f"<context>\n{transcript}\n</context>\n\n{CONDENSE_REQUEST}"},
    ]


def standalone_question(answer: object, last: str) -> tuple[str, str]:
    """The search query in a model's answer to :func:`condense_prompt`, and "" ; or "" and why
    the answer cannot be one (no text, or longer than ANSWER_MAX_CHARS and twice ``last``)."""
    if not isinstance(answer, str):
        return "", "the chat model's answer had no text"
    query = _LABEL.sub("", _one_line(answer))
    while len(query) >= 2 and query[0] in _QUOTES and query[-1] in _QUOTES:
        query = query[1:-1].strip()
    if not query:
        return "", "the chat model's answer was empty"
    if len(query) > max(ANSWER_MAX_CHARS, 2 * len(last)):
        return "", f"the chat model's answer was too long for a search query ({len(query)} characters)"
    return query, ""
