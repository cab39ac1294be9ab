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


def lexical_text(text: str) -> str:
    """``text`` with every run of punctuation turned into a space."""
    return _PUNCTUATION.sub(" ", text)


def lexical_query(query: str) -> str:
    """A websearch-syntax query split the way :func:`lexical_text` splits text, its operators
    kept: quotes still delimit phrases, ``or`` stays a word, and a leading ``-`` still excludes.
    An excluded word that splits into several ("-heat-transfer") excludes them as a phrase."""
    words = []
    for word in query.split():
        excluded = len(word) > 1 and word.startswith("-")
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
