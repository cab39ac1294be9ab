import codecs

import pytest

from ingestion.parsing import Block, ParsedDocument, ParseError, parse_document
from tests.ingestion.files.make_hostile import random_bytes

UNRECOGNISED = r"^the text is not in a recognisable encoding \(save it as UTF-8\)$"


def parse_text_bytes(data: bytes) -> ParsedDocument:
    return parse_document(filename="notes.txt", data=data, pdf_timeout=30)


def texts(data: bytes) -> list[str]:
    return [block.text for block in parse_text_bytes(data).blocks]


def test_paragraphs_are_separated_by_blank_lines_and_keep_their_line_breaks():
    document = parse_text_bytes(b"  First line\r\nsecond line  \r\n\r\n\r\nNext paragraph\n \t \nLast\n")

    assert document.blocks == [
        Block("First line\nsecond line", ""),
        Block("Next paragraph", ""),
        Block("Last", ""),
    ]
    assert document.title == ""
    assert document.page_count is None


def test_a_utf8_byte_order_mark_is_dropped():
    assert texts(codecs.BOM_UTF8 + "Grüße".encode()) == ["Grüße"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read(encoding):
    data = "Ünïcödé\n\nzweiter Absatz".encode(encoding)
    if not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE)):
        data = codecs.BOM_UTF16_BE + data

    assert texts(data) == ["Ünïcödé", "zweiter Absatz"]


@pytest.mark.parametrize(
    "text",
    [
        "Le café crème coûte 3 € à Zürich, naïve façade.\n\nDeuxième paragraphe élégant.",
        "Straße über Bäume, schön grüß Gott. Ärger öfter.",
    ],
)
def test_western_european_text_in_windows_1252_is_read(text):
    assert "\n\n".join(texts(text.encode("cp1252"))) == text


def test_another_confidently_detected_code_page_is_read():
    text = (
        "Это обычный текст на русском языке, сохранённый в старой кодировке Windows. "
        "Он должен читаться без ошибок, потому что детектор уверен в результате."
    )
    assert texts(text.encode("cp1251")) == [text]


@pytest.mark.parametrize(
    "data",
    [
        random_bytes(),
        b"plain ascii\x00with a NUL byte",
        codecs.BOM_UTF16_LE + b"\x00\xd8",  # a lone surrogate after a UTF-16 mark
        codecs.BOM_UTF8 + b"\xff\xfe broken",
    ],
    ids=["random", "nul", "bad-utf16", "bad-utf8-after-bom"],
)
def test_binary_or_undecodable_input_is_refused(data):
    with pytest.raises(ParseError, match=UNRECOGNISED):
        parse_text_bytes(data)
