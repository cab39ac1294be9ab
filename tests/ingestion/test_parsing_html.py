import codecs
from pathlib import Path

import pytest

from ingestion.parsing import Block, ParsedDocument, ParseError, parse_document

FILES = Path(__file__).parent / "files"


def parse_html_bytes(data: bytes) -> ParsedDocument:
    return parse_document(filename="page.html", data=data, pdf_timeout=30)


def test_a_page_gives_its_visible_blocks_under_h1_to_h3_sections():
    document = parse_html_bytes((FILES / "field-station.html").read_bytes())

    assert document.title == "North Bay Field Station"
    assert document.page_count is None
    assert document.blocks == [
        Block("The station is open to researchers all year and to school groups in summer.", "Visiting the station"),
        Block("The ferry leaves the harbour twice a day.", "Visiting the station > Getting there"),
        Block("Bring a printed ticket: there is no signal on the pier.", "Visiting the station > Getting there"),
        Block("Cars stay on the mainland.", "Visiting the station > Getting there"),
        Block("Bicycles travel free on the morning ferry.", "Getting there > By bicycle"),
        Block("Lock them in the shed", "Getting there > By bicycle"),
        Block("The shed closes at dusk.", "Getting there > By bicycle"),
        Block("Day | Low water | High water", "Visiting the station > Tide table"),
        Block("Monday | 06:10 | 12:25", "Visiting the station > Tide table"),
        Block("Tuesday | 06:55 (spring tide) | 13:10", "Visiting the station > Tide table"),
        Block("Times are local and may shift by twenty minutes in strong wind.", "Tide table > Reading the table"),
        Block("  low  = safe crossing\n  high = stay ashore", "Tide table > Reading the table"),
        Block("Small print", "Tide table > Reading the table"),
        Block("Spring tide", "Tide table > Reading the table"),
        Block("The largest range, near new and full moon.", "Tide table > Reading the table"),
        Block("The pier at low water.", "Tide table > Reading the table"),
    ]


def test_without_a_title_element_the_first_heading_is_the_title():
    document = parse_html_bytes(b"<body><p>Lead</p><h2>Second level</h2><p>Body</p><h1>Later</h1></body>")

    assert document.title == "Second level"
    assert document.blocks == [Block("Lead", ""), Block("Body", "Second level")]


def test_a_deeper_heading_is_kept_under_the_shallower_one_it_follows():
    document = parse_html_bytes(b"<h1>A</h1><h3>A.1.1</h3><p>x</p><h2>B</h2><p>y</p><h1>C</h1><p>z</p>")

    assert document.blocks == [Block("x", "A > A.1.1"), Block("y", "A > B"), Block("z", "C")]


def test_inline_text_and_line_breaks_join_with_single_spaces():
    document = parse_html_bytes(b"<p>one\n\t <b>two</b><br>three&nbsp;&amp; four</p>")

    assert document.blocks == [Block("one two three & four", "")]


def test_windows_1252_is_read_when_declared_or_when_the_bytes_are_not_utf8():
    declared = '<meta charset="windows-1252"><p>Café – 5 €</p>'.encode("cp1252")
    undeclared = "<p>Crème brûlée</p>".encode("cp1252")

    assert parse_html_bytes(declared).blocks == [Block("Café – 5 €", "")]
    assert parse_html_bytes(undeclared).blocks == [Block("Crème brûlée", "")]


@pytest.mark.parametrize(
    "data",
    [
        codecs.BOM_UTF8 + "<p>Grüße</p>".encode(),
        "<p>Grüße</p>".encode("utf-16"),
        '<meta charset="utf-16"><p>Grüße</p>'.encode(),
        '<meta charset="no-such-charset"><p>Grüße</p>'.encode(),
    ],
    ids=["utf8-bom", "utf16-bom", "meta-claims-utf16", "meta-unknown"],
)
def test_byte_order_marks_win_and_impossible_declarations_are_ignored(data):
    assert parse_html_bytes(data).blocks == [Block("Grüße", "")]


def test_markup_nested_past_the_parser_depth_limit_is_refused_not_truncated():
    with pytest.raises(ParseError, match=r"^the HTML could not be read completely \(Excessive depth in document: 256"):
        parse_html_bytes(b"<div>" * 300 + b"deep text")


@pytest.mark.parametrize(
    "markup", [b"", b"  \n", b"<html><head><title>Only a title</title></head><body> </body></html>"]
)
def test_a_page_without_visible_text_has_no_text(markup):
    with pytest.raises(ParseError, match=r"^the document contains no text$"):
        parse_html_bytes(markup)


def test_markdown_headings_of_every_level_form_the_section_path():
    document = parse_document(filename="notes.MD", data=(FILES / "field-notes.md").read_bytes(), pdf_timeout=30)

    assert document.title == "Field notes"
    assert document.blocks == [
        Block("Notes kept during the spring survey of the north shore.", "Field notes"),
        Block("Waders and a **dry bag**", "Field notes > Equipment"),
        Block("A quadrat frame, one metre square", "Field notes > Equipment"),
        Block(
            "Zero the thermometer in fresh water before every survey.\nRecord the offset in the log.",
            "Equipment > Calibration",
        ),
        Block("# this line is code, not a heading\ncalibrate --zero", "Equipment > Calibration"),
        Block(
            "| Site | Species | Count |\n"
            "|------|---------|-------|\n"
            "| A    | Limpet  | 14    |\n"
            "| B    | Winkle  | 3     |",
            "Field notes > Observations",
        ),
        Block("Overcast with a light [westerly](https://example.org/wind) wind.", "Observations > Weather"),
    ]


def parse_markdown_text(text: str) -> ParsedDocument:
    return parse_document(filename="notes.markdown", data=text.encode(), pdf_timeout=30)


def test_setext_headings_closing_hashes_and_deep_levels():
    document = parse_markdown_text(
        "Guide\n=====\n\nIntro.\n\nUsage\n-----\n\n#### Flags ####\n\n- `--verbose`\n\n# C#\n\nTyped.\n"
    )

    assert document.title == "Guide"
    assert document.blocks == [
        Block("Intro.", "Guide"),
        Block("`--verbose`", "Usage > Flags"),
        Block("Typed.", "C#"),
    ]


def test_fences_keep_their_content_verbatim_and_an_unclosed_fence_runs_to_the_end():
    document = parse_markdown_text("~~~\n# not a heading\n```\n  indented\n~~~\nafter\n\n````\n## still code\n")

    assert document.blocks == [
        Block("# not a heading\n```\n  indented", ""),
        Block("after", ""),
        Block("## still code", ""),
    ]
    assert document.title == ""


def test_list_items_are_blocks_of_their_own_with_their_continuation_lines():
    document = parse_markdown_text("Shopping:\n- bread\n  wholemeal\n* milk\n1. eggs\n2) tea\n---\nDone.")

    texts = [block.text for block in document.blocks]
    assert texts == ["Shopping:", "bread\nwholemeal", "milk", "eggs", "tea", "Done."]


def test_front_matter_is_not_text():
    document = parse_markdown_text("---\ntitle: Install\nlayout: page\n---\n# Install\n\nRun it.\n")

    assert document.blocks == [Block("Run it.", "Install")]
