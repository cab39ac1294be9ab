"""TIME (the SMART / Glasgow classic collection of Time magazine articles) in BEIR layout.

    python bench/data/time/convert.py

Reads source/TIME.ALL (the articles, each after a ``*TEXT <number> <date> PAGE <page>`` line),
source/TIME.QUE (the questions, each after ``*FIND <number>``) and source/TIME.REL (one line per
question: its number, then the numbers of the articles judged relevant), and writes
corpus.jsonl, queries.jsonl and qrels/test.tsv beside this script. Article ids are the article
positions in TIME.ALL, 1 to 423, the ids TIME.REL uses (not the numbers after ``*TEXT``, which
run to 563 with gaps); every judgement has gain 1.

The collection is stored in upper case (its punched-card origin). Text is lowercased here, so
that the embedding model reads ordinary text and an upper-case "OR" inside a question is not
taken for a search operator; its line breaks become spaces. Nothing else is changed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository, for its BEIR writer

from retrieval.evaluation.beir import write_collection  # noqa: E402

SOURCE = HERE / "source"
_RECORD = re.compile(r"^\*(TEXT|FIND)\s+(\d+)", re.MULTILINE)


def records(path: Path, marker: str) -> list[str]:
    """The text of each ``*<marker>`` record, in file order."""
    raw = path.read_text(encoding="ascii").split("*STOP")[0]
    starts = [match for match in _RECORD.finditer(raw) if match.group(1) == marker]
    found = []
    for match, following in zip(starts, [*starts[1:], None], strict=True):
        body = raw[match.end() : following.start() if following else len(raw)]
        # The rest of the header line (date and page of an article) is not text.
        body = body.split("\n", 1)[1] if "\n" in body else ""
        found.append(" ".join(body.split()).lower())
    return found


def judgements(path: Path) -> list[tuple[str, str]]:
    """(question number, article position) pairs of TIME.REL."""
    pairs = []
    for line in path.read_text(encoding="ascii").splitlines():
        numbers = line.split()
        pairs.extend((numbers[0], str(int(article))) for article in numbers[1:])
    return pairs


def main() -> None:
    articles = [(str(position), text) for position, text in enumerate(records(SOURCE / "TIME.ALL", "TEXT"), 1)]
    questions = [(str(number), text) for number, text in enumerate(records(SOURCE / "TIME.QUE", "FIND"), 1)]
    known = {number for number, _ in articles}
    # TIME.REL names two articles past the 423 of TIME.ALL (424 and 425); those judgements
    # cannot be met, and a question left with none is not evaluated.
    all_judgements = judgements(SOURCE / "TIME.REL")
    qrels = [(question, article) for question, article in all_judgements if article in known]
    dropped = sorted(set(all_judgements) - set(qrels))
    write_collection(
        HERE,
        corpus=[{"_id": number, "title": "", "text": text} for number, text in articles],
        queries=questions,
        judgements=[(question, article, 1) for question, article in qrels],
    )
    characters = sum(len(text) for _, text in articles) / len(articles)
    words = sum(len(text.split()) for _, text in questions) / len(questions)
    print(f"judgements of articles TIME.ALL lacks, left out: {dropped}")
    print(
        f"{len(articles)} articles ({characters:.0f} characters on average), {len(questions)} questions "
        f"({words:.1f} words on average), {len(qrels)} judgements of {len({q for q, _ in qrels})} questions"
    )


if __name__ == "__main__":
    main()
