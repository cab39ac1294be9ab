"""BEIR layout readers: what they parse, and errors that name the file and the line."""

import json

import pytest

from retrieval.evaluation.beir import (
    BeirFormatError,
    parse_corpus,
    parse_qrels,
    parse_queries,
    read_collection,
    write_collection,
)


def jsonl(*objects) -> str:
    return "".join(json.dumps(value) + "\n" for value in objects)


def test_queries_map_ids_to_text_in_file_order_skipping_blank_lines_and_a_byte_order_mark():
    text = "\ufeff" + jsonl({"_id": "q2", "text": "why?"}) + "\r\n" + jsonl({"_id": 7, "text": "how\u2028so?"})

    assert list(parse_queries(text).items()) == [("q2", "why?"), ("7", "how\u2028so?")]


def test_qrels_with_and_without_the_header_give_the_same_judgements():
    body = "q1\td1\t2\nq1\td3\t0\r\nq2\td2\t1\n"

    assert parse_qrels(body) == {"q1": {"d1": 2, "d3": 0}, "q2": {"d2": 1}}
    assert parse_qrels("query-id\tcorpus-id\tscore\n" + body) == parse_qrels(body)
    assert parse_qrels("q1 d1 2\n") == {"q1": {"d1": 2}}  # space-separated, as some tools write it


def test_corpus_keeps_every_field_and_the_id_as_a_string():
    text = jsonl({"_id": 1, "title": "T", "text": "body", "metadata": {"year": 1963}}, {"_id": "b", "text": ""})

    assert parse_corpus(text) == [
        {"_id": "1", "title": "T", "text": "body", "metadata": {"year": 1963}},
        {"_id": "b", "text": ""},
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1\td1\t2\nq1\td2\t2\nq2\td1\tx\n", "qrels/test.tsv line 3: score 'x' is not a whole number"),
        ("query-id\tcorpus-id\tscore\n\nq1\td1\t1.5\n", "qrels/test.tsv line 3: score '1.5' is not a whole number"),
        ("q1\td1\n", "qrels/test.tsv line 1: expected 3 tab-separated fields (query-id, corpus-id, score), found 2"),
        ("q1\td1\t-1\n", "qrels/test.tsv line 1: score -1 is negative"),
        ("q1\t\t1\n", "qrels/test.tsv line 1: empty query-id or corpus-id"),
        ("q1\td1\t1\nq1\td1\t2\n", "qrels/test.tsv line 2: query 'q1' judges 'd1' again (first on line 1)"),
        ("query-id\tcorpus-id\tscore\n", "qrels/test.tsv: no judgements"),
        ("q1\tcorpus-id\tscore\n", "qrels/test.tsv line 1: score 'score' is not a whole number"),
    ],
)
def test_malformed_qrels_name_the_file_and_line(text, message):
    with pytest.raises(BeirFormatError) as raised:
        parse_qrels(text)
    assert raised.value.message == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (jsonl({"_id": "q1", "text": "a"}) + "{not json\n", "queries.jsonl line 2: not JSON (Expecting property name"),
        ("[1, 2]\n", "queries.jsonl line 1: expected a JSON object"),
        (jsonl({"text": "a"}), 'queries.jsonl line 1: no "_id" (a non-empty string)'),
        (jsonl({"_id": True, "text": "a"}), 'queries.jsonl line 1: no "_id" (a non-empty string)'),
        (jsonl({"_id": "q1", "text": "  "}), "queries.jsonl line 1: query 'q1' has no \"text\""),
        (
            jsonl({"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}),
            "queries.jsonl line 2: _id 'q1' already appears on line 1",
        ),
        ("\n\n", "queries.jsonl: no queries"),
    ],
)
def test_malformed_queries_name_the_file_and_line(text, message):
    with pytest.raises(BeirFormatError) as raised:
        parse_queries(text)
    assert raised.value.message.startswith(message)


def test_malformed_corpus_names_the_file_and_line():
    with pytest.raises(BeirFormatError, match=r'^corpus.jsonl line 2: "title" is not a string$'):
        parse_corpus(jsonl({"_id": "a"}, {"_id": "b", "title": ["x"]}))


def test_read_collection_reads_a_folder_and_names_a_missing_file(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(jsonl({"_id": "d1", "title": "", "text": "x"}), encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(jsonl({"_id": "q1", "text": "é?"}), encoding="utf-8")

    with pytest.raises(BeirFormatError, match=r"^qrels/test.tsv: not found in "):
        read_collection(tmp_path)

    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    assert read_collection(tmp_path) == ([{"_id": "d1", "title": "", "text": "x"}], {"q1": "é?"}, {"q1": {"d1": 1}})


def test_a_written_collection_reads_back_as_written(tmp_path):
    corpus = [
        {"_id": "2", "title": "a title", "text": "text \u2028 with a separator"},
        {"_id": "1", "title": "", "text": "x"},
    ]
    queries = [("q2", "second question"), ("q1", "first")]

    write_collection(tmp_path / "set", corpus=corpus, queries=queries, judgements=[("q2", "1", 1), ("q1", "2", 2)])

    assert read_collection(tmp_path / "set") == (corpus, dict(queries), {"q2": {"1": 1}, "q1": {"2": 2}})
