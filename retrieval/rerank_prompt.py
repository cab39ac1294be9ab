"""The listwise prompt of the ``llm`` rerank backend.

A pure function: no database, no network. The passages are untrusted document text, shown to the
model as data under the same instruction as the context a chat is given, and neutralised the same
way (``retrieval.context``); each is put on one line, so a passage cannot start a line that reads
as another passage's ``[n]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrieval.context import DATA_ONLY_INSTRUCTION, neutralise

RERANK_INSTRUCTION = (
    "You rank passages by how well they answer a search query. "
    f"{DATA_ONLY_INSTRUCTION} "
    "Return only a JSON array of the passage numbers, most relevant first, each number once, "
    "for example [3, 1, 2], and nothing else."
)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def listwise_prompt(query: str, passages: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages asking for ``passages`` (already cut to length) ordered for ``query``;
    the passages are numbered from 1."""
    listed = "".join(f"[{number}] {neutralise(_one_line(p))}\n" for number, p in enumerate(passages, start=1))
    return [
        {"role": "system", "content": RERANK_INSTRUCTION},
        {
            "role": "user",
            "content": (
                f"Query: {neutralise(_one_line(query))}\n\n<context>\n{listed}</context>\n\n"
                "Return only a JSON array of the passage numbers, most relevant first."
            ),
        },
    ]
