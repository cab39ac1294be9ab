"""What a log line knows about the request that caused it, and the JSON form of a line.

The request id lives in a context variable, not a thread-local: under the ASGI server every
request is a task of its own on one thread, and a variable set by the middleware is seen by the
view, by the threads asgiref runs blocking steps in (they run in a copy of the context) and by
every line logged meanwhile. A Celery task sent during the request carries the id in its message
headers (ragmux.celery), and the worker sets it again around the task, so the worker's lines join
up with the request's.

``LOG_FORMAT=json`` writes one JSON object per line; the default text format is unchanged.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime

# The header a Celery message carries the id in (a name of ours: Celery keeps unknown headers).
TASK_HEADER = "ragmux_request_id"
# An incoming X-Request-Id is taken as the id when it is this plain: letters, digits and a few
# separators, at most 128 characters. Anything else (spaces, quotes, control characters that
# could forge a line of a text log) is ignored and an id is generated instead.
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@dataclass
class RequestContext:
    """The request a line belongs to; ``fields`` are noted by the code that learns them (the
    caller's project once its key is checked) and end up on the access line."""

    request_id: str
    fields: dict[str, object] = field(default_factory=dict)


_current: ContextVar[RequestContext | None] = ContextVar("ragmux_request", default=None)


def incoming_or_new_id(incoming: str | None) -> str:
    if incoming and _SANE_ID.match(incoming):
        return incoming
    return uuid.uuid4().hex


def begin(request_id: str) -> RequestContext:
    """Makes ``request_id`` the id of every line logged from here in this context."""
    context = RequestContext(request_id)
    _current.set(context)
    return context


def end() -> None:
    _current.set(None)


def current_request_id() -> str | None:
    context = _current.get()
    return context.request_id if context else None


def note(**fields: object) -> None:
    """Adds ``fields`` to the current request's access line (no effect outside a request)."""
    context = _current.get()
    if context is not None:
        context.fields.update(fields)


class RequestIdFilter(logging.Filter):
    """Puts the current request id (or None) on every record as ``request_id``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id()
        return True


# The attributes every LogRecord has; the others on a record came from a caller's ``extra=``
# (uvicorn's `color_message` is its message again, with terminal colours).
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "request_id", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, the caller's
    ``extra=`` fields, and the traceback as ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for name, value in record.__dict__.items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)
