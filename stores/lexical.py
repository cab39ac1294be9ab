"""How text reaches PostgreSQL's text search: the one tokenisation rule shared by the index
writer (chunks) and retrieval (queries), so a query always splits the way the index did.

Punctuation is a word break. PostgreSQL's parser alone keeps a hyphenated compound as a lexeme
of its own *and* its parts ("heat-transfer" counts three times), keeps e-mail addresses, hosts,
file paths and dotted numbers whole, and reads "-6" as a signed number; each of those lengthens a
chunk for BM25 and can never match a question written another way. Splitting at punctuation first
leaves only words and numbers, which the store's text search configuration then lowercases,
stems and filters (measured on Cranfield in docs/benchmarks.md, "The lexical leg").

Pure functions: no database.
"""

from __future__ import annotations

import re

# Anything that is neither a word character (Unicode letters, digits, underscore) nor whitespace.
_PUNCTUATION = re.compile(r"[^\w\s]+")
# The same, sparing the double quote, which marks a phrase in websearch syntax.
_PUNCTUATION_BUT_QUOTES = re.compile(r'[^\w\s"]+')
_QUOTE = '"'
# The one operator word: upper-case OR between two words. A lower-case "or" is a word (stop word
# or not, as the text search configuration decides): in a pasted sentence it is English.
OR_OPERATOR = "OR"


def is_exclusion(word: str) -> bool:
    """Whether a whitespace-separated word of a query excludes: a hyphen that starts the word
    (so comes after whitespace or at the start) followed by a letter, digit or a quoted phrase.
    A hyphen inside or after a word ("well-known", "x-"), or before punctuation ("--", "- "), is
    text."""
    return len(word) > 1 and word[0] == "-" and (word[1] == _QUOTE or word[1].isalnum() or word[1] == "_")


def lexical_text(text: str) -> str:
    """``text`` with every run of punctuation turned into a space."""
    return _PUNCTUATION.sub(" ", text)


def lexical_query(query: str) -> str:
    """A websearch-syntax query split the way :func:`lexical_text` splits text, its operators
    kept: quotes still delimit phrases, upper-case ``OR`` stays the operator and a lower-case
    ``or`` is quoted (PostgreSQL's websearch syntax reads "or" in any case as the operator), and
    an :func:`is_exclusion` word still excludes. An excluded word that splits into several
    ("-heat-transfer") excludes them as a phrase."""
    words = []
    for word in query.split():
        if word == OR_OPERATOR:
            words.append(word)
            continue
        if word.lower() == "or":
            words.append(f"{_QUOTE}{word}{_QUOTE}")
            continue
        excluded = is_exclusion(word)
        body = _PUNCTUATION_BUT_QUOTES.sub(" ", word[1:] if excluded else word).split()
        if not body:
            continue
        if not excluded:
            words.extend(body)
        elif len(body) == 1:
            words.append("-" + body[0])
        else:
            inner = " ".join(part.strip(_QUOTE) for part in body)
            words.append(f"-{_QUOTE}{inner}{_QUOTE}")
    return " ".join(words)
