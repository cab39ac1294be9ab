"""Request bodies: the one JSON parse of every API, and the size cap applied while a body is read.

A JSON body is read by :func:`parse_json` and nothing else: DRF's parser (:class:`JsonParser`, the
admin API's default) and the `/v1` views call it. What it refuses is refused before any view,
serializer, provider or database sees the value, each time as a 400 ``invalid_json``:

- nesting deeper than :data:`MAX_JSON_DEPTH` (deeper still, the parser itself would recurse
  out of stack; and every recursive walk after it, validation and the outbound encoder included,
  would have to be safe as well);
- ``NaN``, ``Infinity`` and numbers too large for a float: JSON has no such values, and the
  outbound encoder, PostgreSQL's ``jsonb`` and every client refuse them;
- lone surrogates (``"\\ud800"``): they cannot be encoded as UTF-8, so neither sent on to a
  provider nor stored in PostgreSQL.

Under the ASGI server the body is capped while it is read (:class:`BodyCappedASGIHandler`):
Django's own check reads a body whole, to a temporary file, before it looks at its size, and
sees no size at all in a chunked body (no ``Content-Length``). The body must also arrive whole
within ``BODY_READ_TIMEOUT``: a client that declares one and sends it slowly, or never, would
otherwise hold its connection and a read for as long as it likes.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import re
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from rest_framework.parsers import JSONParser, get_encoding

from ragmux.core.errors import (
    InvalidInput,
    RequestTimeout,
    ServiceError,
    body_too_large,
    error_response,
    is_client_api_path,
    openai_error_response,
)
from ragmux.core.units import MIB

MAX_JSON_DEPTH = 64
"""How deep arrays and objects may nest in a request body. Generous for any real body (an
OpenAI tool's JSON schema rarely passes ten), and far from the interpreter's recursion limit."""

_TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _malformed(reason: str) -> InvalidInput:
    return InvalidInput(f"malformed JSON body: {reason}", code="invalid_json")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a number")
    return value


def _check_nesting_and_text(value: Any, *, strings: bool) -> None:
    """Walks the parsed value a level at a time (no recursion), refusing a container past the
    depth limit and, when ``strings``, a key or string holding a lone surrogate."""
    level, depth = [value], 0
    while level:
        if strings and any(isinstance(item, str) and _LONE_SURROGATE.search(item) for item in level):
            raise _malformed("a string holds a lone surrogate (\\ud800-\\udfff)")
        containers = [item for item in level if isinstance(item, (dict, list))]
        if containers and depth == MAX_JSON_DEPTH:
            raise _malformed(_TOO_DEEP)
        level, depth = [], depth + 1
        for container in containers:
            if isinstance(container, dict):
                level.extend(container.values())
                if strings:
                    level.extend(container)
            else:
                level.extend(container)


def parse_json(raw: bytes, *, encoding: str = "utf-8") -> Any:
    """The value of a JSON body, or a 400 ``invalid_json`` saying what is wrong with it."""
    try:
        text = raw.decode(encoding)
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise _malformed(_TOO_DEEP) from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
        raise _malformed(str(exc)) from None
    # UTF-8 decoding refuses surrogates, so in a UTF-8 body one can only come from a \\u escape.
    _check_nesting_and_text(value, strings="\\u" in text or codecs.lookup(encoding).name != "utf-8")
    return value


class JsonParser(JSONParser):
    """DRF's JSON parser reading through :func:`parse_json`. A subclass of DRF's own, for DRF
    hands its subclasses the body read through Django's size check."""

    def parse(self, stream, media_type=None, parser_context=None):
        return parse_json(stream.read(), encoding=get_encoding(parser_context or {}))


# Where a `/v1` client uploads a file (multipart): its body may hold a file of MAX_UPLOAD_MB, and
# the form around it.
CLIENT_UPLOAD_PATH = "/v1/files"
MULTIPART_FRAMING = 64 * 1024


def body_limit(path: str) -> int:
    """The largest body a path takes, in bytes: a `/v1` upload's MAX_UPLOAD_MB (and its form),
    `/v1`'s own ``V1_MAX_BODY_MB``, checked by its views once the key is known, else
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""
    if path == CLIENT_UPLOAD_PATH:
        return settings.MAX_UPLOAD_MB * MIB + MULTIPART_FRAMING
    if is_client_api_path(path):
        return settings.V1_MAX_BODY_MB * MIB
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class _BodyTooLarge(Exception):
    pass


class _BodyTooSlow(Exception):
    pass


def _header(scope: dict, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key.lower() == name), None)


def _declared_length(scope: dict) -> int | None:
    declared = _header(scope, b"content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


def _capped(scope: dict, receive, limit: int):
    """``receive`` refusing a body past ``limit`` bytes: at once when its ``Content-Length`` says
    so, else as soon as the bytes read pass it."""
    declared = _declared_length(scope)
    received = 0

    async def capped_receive():
        nonlocal received
        if declared is not None and declared > limit:
            raise _BodyTooLarge
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise _BodyTooLarge
        return message

    return capped_receive


def _deadlined(receive, seconds: float):
    """``receive`` giving up on a body not arrived whole ``seconds`` after its reading began;
    once it has, what follows (a disconnect) is waited for as long as the request runs."""
    deadline: float | None = None
    complete = False

    async def deadlined_receive():
        nonlocal deadline, complete
        if complete:
            return await receive()
        loop = asyncio.get_running_loop()
        deadline = deadline or loop.time() + seconds
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            raise _BodyTooSlow from None
        complete = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return deadlined_receive


def _unread(receive):
    """``receive`` for a body refused unread: Django is given none (the view refuses the request
    by its ``Content-Length``), and the client's bytes are dropped as they come while the
    disconnect Django listens for is still passed on."""
    given = False

    async def unread_receive():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": b"", "more_body": False}
        while (message := await receive())["type"] == "http.request":
            pass
        return message

    return unread_receive


class BodyCappedASGIHandler(ASGIHandler):
    """Django's ASGI handler, with a body cap applied while the body is read, and a chunked body
    given its length once read (DRF takes a body without ``Content-Length`` for an empty one).

    The cap is ``DATA_UPLOAD_MAX_MEMORY_SIZE``, the limit Django applies to every body it reads
    whole; multipart bodies are left to Django's streaming parser, which caps each file
    (``ingestion.uploads``) and the fields; a `/v1` upload's body is capped at its ``body_limit``
    too, while it is read. A body over the cap is answered 413
    ``body_too_large`` in the envelope of its API, naming the path's own limit, before the request
    reaches Django. A `/v1` body whose ``Content-Length`` is over ``V1_MAX_BODY_MB`` (and within
    that cap) is not read at all: its view, once the key is known, refuses it by that length (and
    logs the refusal). A
    body not arrived whole within ``BODY_READ_TIMEOUT`` is answered 408 ``body_timeout``.
    """

    async def handle(self, scope, receive, send):
        content_type = _header(scope, b"content-type") or b""
        path = scope["path"]
        declared = _declared_length(scope)
        server_cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        multipart = content_type.lower().startswith(b"multipart/")
        if multipart and path == CLIENT_UPLOAD_PATH:
            # Refused as it streams in, before a byte past the limit is spooled to disk.
            receive = _capped(scope, _deadlined(receive, settings.BODY_READ_TIMEOUT), body_limit(path))
        elif path.startswith("/v1/") and declared is not None and body_limit(path) < declared <= server_cap:
            receive = _unread(receive)
        else:
            receive = _deadlined(receive, settings.BODY_READ_TIMEOUT)
            if not multipart:
                receive = _capped(scope, receive, server_cap)
        try:
            await super().handle(scope, receive, send)
        except (_BodyTooLarge, _BodyTooSlow) as exc:
            await self.send_response(self._refusal(path, exc), send)

    @staticmethod
    def _refusal(path: str, exc: Exception):
        refusal: ServiceError = body_too_large(body_limit(path))
        if isinstance(exc, _BodyTooSlow):
            refusal = RequestTimeout(
                f"the request body did not arrive within {settings.BODY_READ_TIMEOUT:g}s (BODY_READ_TIMEOUT)",
                code="body_timeout",
            )
        render = openai_error_response if is_client_api_path(path) else error_response
        response = render(refusal)
        response["Content-Length"] = str(len(response.content))
        response["Connection"] = "close"  # what is left of the body is never read
        return response

    def create_request(self, scope, body_file):
        if _header(scope, b"content-length") is None:
            length = body_file.seek(0, os.SEEK_END)
            body_file.seek(0)
            if length:
                scope = {**scope, "headers": [*scope["headers"], (b"content-length", str(length).encode())]}
        return super().create_request(scope, body_file)
