import pytest

from ingestion.queue import PROGRESS_CHUNKED, PROGRESS_EMBEDDED, PROGRESS_PARSED
from ragmux.dashboard.filters import dollars, field_errors, ingestion_stage, number


@pytest.mark.parametrize(
    ("micros", "shown"),
    [
        (0, "$0.00"),
        (1, "$0.000001"),
        (450, "$0.00045"),
        (2_000, "$0.002"),  # a Cohere search, not "$0.00"
        (4_200, "$0.0042"),
        (4_249, "$0.00425"),
        (8_000, "$0.008"),
        (9_990, "$0.00999"),
        (10_000, "$0.01"),
        (15_000, "$0.015"),
        (52_500, "$0.0525"),  # not rounded to "$0.05"
        (500_000, "$0.50"),
        (999_999, "$1.00"),
        (1_234_567, "$1.23"),
        (1_500_000, "$1.50"),
        (2_500_000, "$2.50"),
        (1_234_500_000, "$1,234.50"),
    ],
)
def test_money_is_cents_from_a_dollar_and_three_significant_digits_below(micros, shown):
    assert dollars(micros) == shown


@pytest.mark.parametrize(
    ("progress", "stage"),
    [
        (0, "parsing"),
        # OCR has read 3 of 10 pages.
        (PROGRESS_PARSED * 3 // 10, "parsing 30 %"),
        (PROGRESS_PARSED, "chunking"),
        (PROGRESS_CHUNKED, "embedding 0 %"),
        # What the pipeline writes after 2 of 5 batches, rounded down.
        (PROGRESS_CHUNKED + int((PROGRESS_EMBEDDED - PROGRESS_CHUNKED) * 2 / 5), "embedding 40 %"),
        (PROGRESS_EMBEDDED - 1, "embedding 99 %"),
        (PROGRESS_EMBEDDED, "indexing"),
    ],
)
def test_a_processing_document_s_stage_is_named_with_embedding_s_progress(progress, stage):
    assert ingestion_stage(progress) == stage


def test_a_count_has_thousands_separators():
    assert [number(0), number(16849), number(20000), number(None)] == ["0", "16,849", "20,000", "—"]


def test_field_errors_say_the_api_name_of_a_field_as_its_label():
    messages = ["base_url host 'x' cannot be used", "not a base_url_path, <b>"]
    assert field_errors(messages, "base_url", "Base URL") == "Base URL host 'x' cannot be used not a base_url_path, <b>"
    # A one-word name is a word of the message too.
    assert field_errors(["This password is too common."], "password", "Password") == "This password is too common."
