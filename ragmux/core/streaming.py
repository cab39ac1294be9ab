"""Streamed responses that stream under both servers.

Django reads a synchronous iterator whole before an ASGI server sends the first byte (and an
asynchronous one whole under WSGI), so a long export would sit in memory. Under ASGI each
piece is therefore made on Django's sync thread (where database access belongs) and sent as
it is made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from rest_framework.negotiation import BaseContentNegotiation


async def _off_thread(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    next_piece = sync_to_async(next, thread_sensitive=True)
    try:
        while (piece := await next_piece(pieces, None)) is not None:
            yield piece
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=True)()


def streaming_response(request: HttpRequest, pieces: Iterator[bytes], *, content_type: str) -> StreamingHttpResponse:
    # A DRF request wraps Django's.
    if isinstance(getattr(request, "_request", request), ASGIRequest):
        return StreamingHttpResponse(_off_thread(pieces), content_type=content_type)
    return StreamingHttpResponse(pieces, content_type=content_type)


class AnyAccept(BaseContentNegotiation):
    """For views whose answer is a stream of their own format: a client that accepts only that
    format (``text/csv``) is not refused, and refusals are still the JSON envelope."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
