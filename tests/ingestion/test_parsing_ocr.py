"""OCR of scanned PDF pages and of images, in the PDF parser's child, under its limits."""

import pytest

from ingestion.parsing import OcrOptions, ParseError, parse_document
from tests.ingestion.files.make_documents import bomb_png, image_of_text, scanned_pdf_of, tiff_pages

OCR = OcrOptions(language="eng", max_pages=10, page_timeout=60, max_pixels=60_000_000)
PAGES = [
    ["The harbour master opens the lock at dawn."],
    ["Fishing boats unload their catch on the north quay."],
    ["The lighthouse keeper logs every passing ship."],
]


def parse(filename: str, data: bytes, ocr: OcrOptions | None = OCR):
    return parse_document(filename=filename, data=data, pdf_timeout=30, ocr=ocr)


def words(text: str) -> list[str]:
    return text.lower().replace(".", "").split()


def test_a_scanned_pdf_is_read_by_ocr_page_by_page():
    document = parse("scan.pdf", scanned_pdf_of(PAGES))

    assert (document.page_count, document.ocr_pages, document.warnings) == (3, 3, ())
    assert [(words(block.text), block.page) for block in document.blocks] == [
        (words(page[0]), number) for number, page in enumerate(PAGES, start=1)
    ]


def test_the_pages_ocr_has_read_are_reported_as_it_goes():
    reported = []
    parse_document(
        filename="scan.pdf",
        data=scanned_pdf_of(PAGES),
        pdf_timeout=30,
        ocr=OCR,
        on_progress=lambda done, total: reported.append((done, total)),
    )

    # Passed on once a second at most, from the parent's own thread: some steps may be merged.
    assert reported
    assert reported == sorted(set(reported))
    assert set(reported) <= {(0, 3), (1, 3), (2, 3), (3, 3)}


def test_only_the_pages_of_a_mixed_pdf_without_text_are_read_by_ocr():
    document = parse("mixed.pdf", scanned_pdf_of(PAGES, keep_text=(1, 3)))

    assert document.ocr_pages == 1
    assert [block.page for block in document.blocks] == [1, 2, 3]
    assert words(document.blocks[1].text) == words(PAGES[1][0])


def test_with_ocr_off_the_scanned_pages_of_a_mixed_pdf_are_named_in_a_warning():
    document = parse("mixed.pdf", scanned_pdf_of(PAGES, keep_text=(1, 3)), ocr=None)

    assert [block.page for block in document.blocks] == [1, 3]
    assert document.warnings == ("pages without a text layer were not read (OCR is off for this store): 2",)


def test_a_page_over_the_time_limit_is_skipped_with_its_number_and_the_others_are_kept():
    slow = OcrOptions(language="eng", max_pages=10, page_timeout=0.001, max_pixels=60_000_000)
    document = parse("mixed.pdf", scanned_pdf_of(PAGES, keep_text=(1, 3)), ocr=slow)

    assert [block.page for block in document.blocks] == [1, 3]
    assert document.warnings == ("page 2 was skipped: OCR took longer than 0.001s (OCR_PAGE_TIMEOUT)",)


def test_pages_past_the_ocr_page_limit_are_named_in_a_warning():
    few = OcrOptions(language="eng", max_pages=2, page_timeout=60, max_pixels=60_000_000)
    document = parse("scan.pdf", scanned_pdf_of(PAGES), ocr=few)

    assert [block.page for block in document.blocks] == [1, 2]
    assert document.warnings == ("page 3 was not read: OCR reads at most 2 pages per document (OCR_MAX_PAGES)",)


@pytest.mark.parametrize(("filename", "image_format"), [("a.png", "PNG"), ("a.jpg", "JPEG"), ("a.webp", "WEBP")])
def test_images_are_read_by_ocr(filename, image_format):
    document = parse(filename, image_of_text("Keep the gate closed", image_format))

    assert [(words(block.text), block.page) for block in document.blocks] == [(["keep", "the", "gate", "closed"], 1)]
    assert document.ocr_pages == 1


def test_a_multi_page_tiff_is_read_as_pages():
    document = parse("fax.tiff", tiff_pages(["First page of the fax", "Second page of the fax"]))

    assert [(words(block.text), block.page) for block in document.blocks] == [
        (["first", "page", "of", "the", "fax"], 1),
        (["second", "page", "of", "the", "fax"], 2),
    ]


def test_an_image_past_the_pixel_limit_is_refused_before_it_is_decoded():
    with pytest.raises(ParseError, match=r"^the image has more than 60000000 pixels, the limit \(OCR_MAX_PIXELS\)"):
        parse("bomb.png", bomb_png())


def test_an_image_with_ocr_off_is_not_read():
    with pytest.raises(ParseError, match=r"^images are read only by OCR, which is off for this store$"):
        parse("a.png", image_of_text("words", "PNG"), ocr=None)


def test_an_unknown_ocr_language_is_named():
    klingon = OcrOptions(language="tlh", max_pages=10, page_timeout=60, max_pixels=60_000_000)
    with pytest.raises(ParseError, match=r'^the OCR language "tlh" is not installed on this server$'):
        parse("a.png", image_of_text("words", "PNG"), ocr=klingon)


def test_a_broken_image_is_not_a_readable_image():
    with pytest.raises(ParseError, match=r"^the file is not a readable image \("):
        parse("a.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)


def test_pdf_parse_timeout_still_bounds_the_text_layer_when_ocr_may_extend_the_childs_deadline():
    from tests.ingestion.files.make_hostile import many_pages_pdf

    with pytest.raises(ParseError, match=r"^PDF parsing took longer than 1s \(PDF_PARSE_TIMEOUT\)$"):
        parse_document(filename="slow.pdf", data=many_pages_pdf(1500), pdf_timeout=1, ocr=OCR)
