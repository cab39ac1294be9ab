"""Large binary values (an upload's bytes) written to a row with as few copies as there can be."""

from __future__ import annotations

import psycopg
from django.db import connection
from django.db.models import Model
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format


class _BytesAsGiven(Dumper):
    """Hands libpq the caller's bytes: psycopg's own binary dumper for bytes (the C one) first
    copies them into a buffer of its own."""

    format = Format.BINARY
    oid = postgres.types["bytea"].oid

    def dump(self, obj: bytes) -> bytes:
        return obj


def write_bytes(instance: Model, field_name: str, data: bytes) -> None:
    """Writes ``data`` into the saved row's binary field as one binary parameter, bound by the
    server.

    The ORM binds on the client: it would splice the bytes into the SQL as a hex literal, about
    eight copies of their size on the way to libpq (escaped, quoted, spliced, buffered). Here
    the only copy besides ``data`` is libpq's send buffer. The field is then deferred on the
    instance, as if loaded without it, so the instance holds no copy either.
    """
    meta = instance._meta
    column = connection.ops.quote_name(meta.get_field(field_name).column)
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.adapters.register_dumper(bytes, _BytesAsGiven)
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(meta.db_table)} SET {column} = %b "
            f"WHERE {connection.ops.quote_name(meta.pk.column)} = %s",
            (data, instance.pk),
        )
    instance.__dict__.pop(field_name, None)
