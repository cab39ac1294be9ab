"""Readers of the BEIR layout: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv``.

The parsers take text (an uploaded file's contents) and ``read_collection`` a folder (the benches).
Malformed input raises ``BeirFormatError`` naming the file and the line, so an admin importing a
set can fix the very line. No Django here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_FILE = "qrels/test.tsv"
QRELS_HEADER = ("query-id", "corpus-id", "score")
_WHOLE_NUMBER = re.compile(r"[+-]?\d+")


class BeirFormatError(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, line) of each non-blank line. Only "\\n" ends a line (with an optional
    "\\r" before it): JSON strings may hold other separators, such as U+2028, unescaped."""
    numbered = enumerate(text.removeprefix("\ufeff").split("\n"), 1)
    return [(number, line.rstrip("\r")) for number, line in numbered if line.strip()]


def _objects(text: str, file_name: str) -> list[tuple[int, dict, str]]:
    """(line number, object, its ``_id``) of each line of a JSON-lines file."""
    parsed = []
    first_line: dict[str, int] = {}
    for number, line in _lines(text):
        where = f"{file_name} line {number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BeirFormatError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise BeirFormatError(f"{where}: expected a JSON object")
        identifier = value.get("_id")
        if isinstance(identifier, int) and not isinstance(identifier, bool):
            identifier = str(identifier)
        if not isinstance(identifier, str) or not identifier.strip():
            raise BeirFormatError(f'{where}: no "_id" (a non-empty string)')
        if identifier in first_line:
            raise BeirFormatError(f"{where}: _id {identifier!r} already appears on line {first_line[identifier]}")
        first_line[identifier] = number
        parsed.append((number, value, identifier))
    return parsed


def parse_queries(text: str) -> dict[str, str]:
    """Query id → question, in file order, from ``queries.jsonl`` ({"_id": …, "text": …} a line)."""
    queries = {}
    for number, value, identifier in _objects(text, QUERIES_FILE):
        question = value.get("text")
        if not isinstance(question, str) or not question.strip():
            raise BeirFormatError(f'{QUERIES_FILE} line {number}: query {identifier!r} has no "text"')
        queries[identifier] = question
    if not queries:
        raise BeirFormatError(f"{QUERIES_FILE}: no queries")
    return queries


def parse_corpus(text: str) -> list[dict]:
    """The documents of ``corpus.jsonl`` in file order, each as its JSON object (``_id`` as a
    string; ``title`` and ``text``, when given, strings)."""
    corpus = []
    for number, value, identifier in _objects(text, CORPUS_FILE):
        for field in ("title", "text"):
            if not isinstance(value.get(field, ""), str):
                raise BeirFormatError(f'{CORPUS_FILE} line {number}: "{field}" is not a string')
        corpus.append({**value, "_id": identifier})
    if not corpus:
        raise BeirFormatError(f"{CORPUS_FILE}: no documents")
    return corpus


def parse_qrels(text: str) -> dict[str, dict[str, int]]:
    """Query id → {corpus id → grade} from ``qrels/test.tsv`` (query-id, corpus-id, score a line,
    tab-separated; the header line is optional), queries and documents in file order."""
    qrels: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for position, (number, line) in enumerate(_lines(text)):
        where = f"{QRELS_FILE} line {number}"
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [field.strip() for field in fields]
        if position == 0 and tuple(field.lower() for field in fields) == QRELS_HEADER:
            continue
        if len(fields) != 3:
            raise BeirFormatError(
                f"{where}: expected 3 tab-separated fields (query-id, corpus-id, score), found {len(fields)}"
            )
        query_id, corpus_id, score = fields
        if not query_id or not corpus_id:
            raise BeirFormatError(f"{where}: empty query-id or corpus-id")
        if not _WHOLE_NUMBER.fullmatch(score):
            raise BeirFormatError(f"{where}: score {score!r} is not a whole number")
        grade = int(score)
        if grade < 0:
            raise BeirFormatError(f"{where}: score {grade} is negative")
        earlier = first_line.get((query_id, corpus_id))
        if earlier:
            raise BeirFormatError(f"{where}: query {query_id!r} judges {corpus_id!r} again (first on line {earlier})")
        first_line[query_id, corpus_id] = number
        qrels.setdefault(query_id, {})[corpus_id] = grade
    if not qrels:
        raise BeirFormatError(f"{QRELS_FILE}: no judgements")
    return qrels


def read_collection(folder: Path) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """(corpus, queries, qrels) of a BEIR-layout folder."""
    texts = {}
    for file_name in (CORPUS_FILE, QUERIES_FILE, QRELS_FILE):
        path = Path(folder) / file_name
        if not path.is_file():
            raise BeirFormatError(f"{file_name}: not found in {folder}")
        texts[file_name] = path.read_text(encoding="utf-8")
    return parse_corpus(texts[CORPUS_FILE]), parse_queries(texts[QUERIES_FILE]), parse_qrels(texts[QRELS_FILE])


def write_collection(
    folder: Path, *, corpus: list[dict], queries: list[tuple[str, str]], judgements: list[tuple[str, str, int]]
) -> None:
    """Writes a BEIR-layout folder that :func:`read_collection` reads back: ``corpus`` as given
    (one JSON object a line), ``queries`` as (id, text) and ``judgements`` as (query id,
    document id, gain), in the order given (the benches' converters of classic collections)."""
    folder = Path(folder)
    (folder / QRELS_FILE).parent.mkdir(parents=True, exist_ok=True)
    (folder / CORPUS_FILE).write_text("".join(json.dumps(document) + "\n" for document in corpus))
    (folder / QUERIES_FILE).write_text(
        "".join(json.dumps({"_id": identifier, "text": text}) + "\n" for identifier, text in queries)
    )
    rows = ["\t".join(QRELS_HEADER), *(f"{query}\t{document}\t{gain}" for query, document, gain in judgements)]
    (folder / QRELS_FILE).write_text("\n".join(rows) + "\n")
