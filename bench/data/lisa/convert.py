"""LISA (the Library and Information Science Abstracts test collection, Sheffield 1982, as
distributed by the Glasgow IR group) in BEIR layout.

    python bench/data/lisa/convert.py

Reads source/LISA0.001 … source/LISA5.850 (the abstracts, each starting with a
``Document <number>`` line, then its title, a blank line, its text, and a line of asterisks),
source/LISA.QUE (each question: its number on a line of its own, then its text up to a ``#``)
and source/LISARJ.NUM (whitespace-separated: a question's number, how many documents are
judged relevant to it, then their numbers), and writes corpus.jsonl, queries.jsonl and
qrels/test.tsv beside this script. Ids are the collection's own document and question numbers;
every judgement has gain 1.

The collection is stored in upper case (its punched-card origin). Text is lowercased here, so
that the embedding model reads ordinary text and an upper-case "OR" inside a question is not
taken for a search operator; line breaks become spaces. Nothing else is changed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository, for its BEIR writer

from retrieval.evaluation.beir import write_collection  # noqa: E402

SOURCE = HERE / "source"
_DOCUMENT = re.compile(r"^Document\s+(\d+)\s*$", re.MULTILINE)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SEPARATOR = re.compile(r"^\*{10,}\s*$", re.MULTILINE)
_QUESTION = re.compile(r"^\s*(\d+)\s*\n(.*?)#", re.MULTILINE | re.DOTALL)


def flattened(text: str) -> str:
    return " ".join(text.split()).lower()


def abstracts() -> list[tuple[str, str, str]]:
    """(number, title, text) of every abstract, in file order. This copy holds four abstracts
    (1998-2001) twice, identically, where 1993-1997 should be: a repeat is kept once."""
    found: dict[str, tuple[str, str, str]] = {}
    for path in sorted(SOURCE.glob("LISA[0-9].[0-9][0-9][0-9]")):
        for record in _SEPARATOR.split(path.read_text(encoding="ascii")):
            match = _DOCUMENT.search(record)
            if not match:
                continue
            # The title runs to the first blank line (it may hold spaces); the abstract follows.
            title, text = [*_BLANK_LINE.split(record[match.end() :].strip("\n"), maxsplit=1), ""][:2]
            abstract = (match.group(1), flattened(title), flattened(text))
            if found.setdefault(abstract[0], abstract) != abstract:
                raise SystemExit(f"document {abstract[0]} appears twice with different text")
    return list(found.values())


def questions() -> list[tuple[str, str]]:
    return [(m.group(1), flattened(m.group(2))) for m in _QUESTION.finditer((SOURCE / "LISA.QUE").read_text("ascii"))]


def judgements() -> list[tuple[str, str]]:
    """(question number, document number) pairs of LISARJ.NUM."""
    numbers = (SOURCE / "LISARJ.NUM").read_text(encoding="ascii").split()
    pairs, at = [], 0
    while at < len(numbers):
        question, count = numbers[at], int(numbers[at + 1])
        pairs.extend((question, document) for document in numbers[at + 2 : at + 2 + count])
        at += 2 + count
    return pairs


def main() -> None:
    documents = abstracts()
    asked = questions()
    known = {number for number, _, _ in documents}
    qrels = judgements()
    unknown = [pair for pair in qrels if pair[1] not in known]
    if unknown or len(known) != len(documents):
        raise SystemExit(f"judgements of unknown documents {unknown} or repeated document numbers")
    write_collection(
        HERE,
        corpus=[{"_id": number, "title": title, "text": text} for number, title, text in documents],
        queries=asked,
        judgements=[(question, document, 1) for question, document in qrels],
    )
    characters = sum(len(title) + len(text) for _, title, text in documents) / len(documents)
    words = sum(len(text.split()) for _, text in asked) / len(asked)
    print(
        f"{len(documents)} abstracts ({characters:.0f} characters of title and text on average), {len(asked)} "
        f"questions ({words:.1f} words on average), {len(qrels)} judgements of {len({q for q, _ in qrels})} questions"
    )


if __name__ == "__main__":
    main()
