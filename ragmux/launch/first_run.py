"""What `ragmux serve` sets up once on a fresh installation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from ragmux.core.accounts import user_create
from ragmux.core.models import InstanceSetting

LOCAL_CONNECTION_SEEDED = "local_connection_seeded"
# The PostgreSQL advisory lock key the start-up steps are taken under (any constant no other
# lock of ragmux uses: "rmxstart" in ASCII).
START_UP_LOCK = 0x726D787374617274


@contextmanager
def one_start_at_a_time() -> Iterator[None]:
    """Holds the database's start-up lock: replicas started together on one database would all
    migrate at once and all create the first admin, and all but one would fail on the unique
    username. The others wait here, then find the work done."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [START_UP_LOCK])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [START_UP_LOCK])


def ensure_first_admin() -> str | None:
    """Creates the first admin if there is none; returns what to tell the operator."""
    if User.objects.filter(groups__name="admin").exists() or User.objects.filter(is_superuser=True).exists():
        return None
    username = settings.RAGMUX_ADMIN_USER
    user, generated = user_create(username=username, password=settings.RAGMUX_ADMIN_PASSWORD, role="admin")
    if generated:
        return f"Sign in as {user.username!r} with password {generated} (shown once; change it after signing in)."
    return f"Sign in as {user.username!r} with the password from RAGMUX_ADMIN_PASSWORD."


@transaction.atomic
def ensure_local_connection() -> None:
    """Creates the `local` embedding connection on the first run only, so deleting it sticks."""
    from gateway.connections.providers import local_model
    from gateway.connections.services import connection_create

    _, created = InstanceSetting.objects.get_or_create(key=LOCAL_CONNECTION_SEEDED, defaults={"value": b"1"})
    if created:
        connection_create(
            name="local",
            provider_type="local",
            base_url="",
            model_name=local_model.MODEL_NAME,
            dimensions=None,
            api_key="",
        )
