"""How long a provider asks to be left alone, in either form `Retry-After` takes, and how long a
retry waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from gateway.connections.providers.upstream_errors import redact, retry_after_seconds, retry_wait
from ragmux.core.errors import UpstreamFailed


def _in(seconds: float) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)


@pytest.mark.parametrize(("header", "expected"), [("30", 30), (" 0 ", 0), ("Wed, 21 Oct 2015 07:28:00 -0000", 0)])
def test_retry_after_is_read_in_seconds_or_as_a_date(header, expected):
    assert retry_after_seconds({"retry-after": header}) == expected


def test_a_retry_after_date_counts_from_now_and_never_below_zero():
    assert 88 <= retry_after_seconds({"retry-after": _in(90)}) <= 90
    assert retry_after_seconds({"retry-after": _in(-90)}) == 0


@pytest.mark.parametrize("header", ["", "soon", "-5", "1.5"])
def test_a_retry_after_that_says_nothing_readable_is_none(header):
    assert retry_after_seconds({"retry-after": header}) is None
    assert retry_after_seconds({}) is None


def test_a_retry_waits_what_the_provider_asked_else_the_backoff():
    asked = UpstreamFailed.relayed(
        "busy", status=503, openai_type="upstream_error", code=None, retryable=True, retry_after=7
    )
    silent = UpstreamFailed.relayed("busy", status=503, openai_type="upstream_error", code=None, retryable=True)
    assert (retry_wait(asked, backoff=0.25), retry_wait(silent, backoff=0.25)) == (7.0, 0.25)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("auth Bearer abc.def-123 failed", "auth [redacted] failed"),
        ("auth Basic dXNlcjpwYXNz failed", "auth [redacted] failed"),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl expired", "token [redacted] expired"),
        ("key sk-proj-AbCdEf123456 is wrong", "key [redacted] is wrong"),
        ("key sk-ant-api03-AbCdEf123456 is wrong", "key [redacted] is wrong"),
        ("key AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv is wrong", "key [redacted] is wrong"),
        ("token ya29.a0AfH6SMBx-Yz_12.34 expired", "token [redacted] expired"),
        ("key gsk_AbCdEf0123456789XyZ is wrong", "key [redacted] is wrong"),
        ("token hf_AbCdEfGhIjKlMnOpQrSt is wrong", "token [redacted] is wrong"),
        ("key xai-AbCdEf0123456789XyZ is wrong", "key [redacted] is wrong"),
        ("cannot reach https://alice:s3cret@llm.example.com/v1", "cannot reach https://[redacted]@llm.example.com/v1"),
        ("cannot reach http://tok3n@10.0.0.5:8000/v1", "cannot reach http://[redacted]@10.0.0.5:8000/v1"),
        # What only looks like a prefix, and an address without credentials, stay as they are.
        (
            "see https://llm.example.com/v1 and mail ops@example.com",
            "see https://llm.example.com/v1 and mail ops@example.com",
        ),
        ("the ya29 and hf_ prefixes alone are no secret", "the ya29 and hf_ prefixes alone are no secret"),
    ],
)
def test_every_known_credential_shape_is_redacted(text, expected):
    assert redact(text, "") == expected


def test_the_connections_own_key_is_redacted_whatever_its_shape():
    assert redact("key plain-key-42 is wrong", "plain-key-42") == "key [redacted] is wrong"
