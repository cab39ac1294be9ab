"""The audit trail: one row for each change to the configuration (stores, connections, prices, routes,
projects, gateway keys, users), each sign-in attempt and sign-out, each document uploaded,
deleted or reprocessed, and each export of the trail itself, saying who did it, from which
address, when, to what, and the values before and after.

It lives in the kernel so every layer's services can write it. A service calls `audit_record`
inside the transaction of its change, so a change rolled back leaves no row; a failure to write
the row is logged and never fails the change itself. Secrets never reach a row: values under a
secret-sounding name are replaced by `MASKED`, and services pass masked hints (``sk-…1234``)
rather than keys.

The client address is not passed by each service: the request sets it for its whole handling
(`requested_from`, from the middleware `audit_client_address`), so every row a request causes
carries it, whichever service wrote the row. Rows written outside a request (the CLI, a worker)
have none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from ragmux.core.models import AuditEntry

logger = logging.getLogger("ragmux.audit")

# What the trail records changes to (each service passes its own).
OBJECT_TYPES = (
    "store",
    "connection",
    "price",
    "route",
    "project",
    "gateway_key",
    "user",
    "document",
    "audit",
    "evaluation_set",
    "evaluation_run",
)
SYSTEM = "system"
# The actor of a sign-in attempt that did not sign anyone in: the name typed is the row's object.
ANONYMOUS = "anonymous"
MASKED = "(hidden)"
# A value under a name containing one of these is never stored, whatever the caller passed.
SECRET_WORDS = ("password", "secret", "token", "sealed", "hash")
# ...but a count of tokens (`budget_daily_tokens`) is no secret.
TOKEN_COUNT = "tokens"


def _plain(value: Any) -> Any:
    """The value as JSON can hold it, readable in the trail."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Enum):
        return _plain(value.value)
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return str(value)


def _secret_name(name: str) -> bool:
    words = name.lower().replace(TOKEN_COUNT, "")
    return any(word in words for word in SECRET_WORDS)


def _masked(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: MASKED if value not in (None, "") and _secret_name(name) else _plain(value)
        for name, value in values.items()
    }


def snapshot(obj: Any, fields: Iterable[str]) -> dict[str, Any]:
    """The named attributes of ``obj``, as a row of the trail holds them."""
    return {name: _plain(getattr(obj, name)) for name in fields}


def actor_name(actor: Any) -> str:
    return actor.get_username() if actor is not None else SYSTEM


_client_address: ContextVar[str] = ContextVar("audit_client_address", default="")
# An IPv6 address with a zone is well under the column's length; anything longer came from a
# header and is cut rather than refused.
ADDRESS_LENGTH = AuditEntry._meta.get_field("client_address").max_length


@contextmanager
def requested_from(address: str) -> Iterator[None]:
    """Every row written inside the block records ``address`` as its client's."""
    token = _client_address.set(address[:ADDRESS_LENGTH])
    try:
        yield
    finally:
        _client_address.reset(token)


def audit_record(
    *,
    actor: Any,
    action: str,
    object_type: str,
    object_id: int | None,
    object_repr: str,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    actor_username: str | None = None,
) -> AuditEntry | None:
    """Writes one row. For an update (both sides given) only the fields that changed are kept,
    and an update that changed nothing writes nothing. ``actor_username`` names an actor who is
    no user (`ANONYMOUS`); without it a row without a user reads `SYSTEM`."""
    before, after = _masked(before or {}), _masked(after or {})
    if before and after:
        changed = [name for name in {**before, **after} if before.get(name) != after.get(name)]
        if not changed:
            return None
        before = {name: before[name] for name in changed if name in before}
        after = {name: after[name] for name in changed if name in after}
    try:
        with transaction.atomic():
            return AuditEntry.objects.create(
                actor=actor,
                actor_username=actor_username or actor_name(actor),
                client_address=_client_address.get(),
                action=action,
                object_type=object_type,
                object_id=object_id,
                object_repr=str(object_repr)[:200],
                before=before,
                after=after,
            )
    except DatabaseError:
        logger.exception("could not write the audit entry %s of %s %s", action, object_type, object_id)
        return None


def audit_change(
    target: Any,
    *,
    object_type: str,
    actor: Any,
    action: str,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    label: str | None = None,
) -> AuditEntry | None:
    """:func:`audit_record` for a model instance: its id, and ``label`` or its name as the row's
    description. Services bind ``object_type`` once (``partial``) and call it per change."""
    return audit_record(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=target.pk,
        object_repr=str(target) if label is None else label,
        before=before,
        after=after,
    )


def audit_list(
    *,
    actor: str | None = None,
    action: str | None = None,
    object_type: str | None = None,
    object_id: int | None = None,
    document: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEntry]:
    """Newest first. ``actor`` is a username (any case; "system" for changes without one);
    ``action`` a prefix of the action (``login.``, ``document``); ``document`` a document's id,
    for the rows about that document; ``since`` is inclusive, ``until`` exclusive."""
    entries = AuditEntry.objects.order_by("-created_at", "-id")
    if actor:
        entries = entries.filter(actor_username__iexact=actor)
    if action:
        entries = entries.filter(action__startswith=action)
    if document is not None:
        entries = entries.filter(object_type="document", object_id=document)
    if object_type:
        entries = entries.filter(object_type=object_type)
    if object_id is not None:
        entries = entries.filter(object_id=object_id)
    if since is not None:
        entries = entries.filter(created_at__gte=since)
    if until is not None:
        entries = entries.filter(created_at__lt=until)
    return entries


def audit_batches(entries: QuerySet[AuditEntry], *, size: int) -> Iterator[list[AuditEntry]]:
    """Every row of ``entries`` (an `audit_list`, newest first), one bounded query per batch.
    Each batch continues after the last row of the one before by (time, id), not by offset: a
    row written meanwhile neither shifts nor repeats what follows."""
    after: AuditEntry | None = None
    while True:
        batch = entries
        if after is not None:
            batch = entries.filter(Q(created_at__lt=after.created_at) | Q(created_at=after.created_at, id__lt=after.pk))
        rows = list(batch[:size])
        if rows:
            yield rows
        if len(rows) < size:
            return
        after = rows[-1]


def audit_exported(*, actor: Any, filters: Mapping[str, Any]) -> AuditEntry | None:
    """The row saying who exported the trail, and with which filters."""
    return audit_record(
        actor=actor,
        action="audit.exported",
        object_type="audit",
        object_id=None,
        object_repr="audit trail",
        after={"filters": filters},
    )


def audit_purge(*, days: int, now: datetime | None = None) -> int:
    """Deletes the rows older than ``days`` days (0 keeps every row); returns how many went."""
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted, _ = AuditEntry.objects.filter(created_at__lt=cutoff).delete()
    return deleted
