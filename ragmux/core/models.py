from __future__ import annotations

from django.conf import settings
from django.db import models


class AdminToken(models.Model):
    """A bearer credential for /admin/api issued by `POST /admin/api/login` with ``bearer: true``.

    Only the SHA-256 of the token is stored; the plaintext is shown once in the login response.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="admin_tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "admin_tokens"


class InstanceSetting(models.Model):
    """Small per-installation values, such as the encryption key check value."""

    key = models.CharField(max_length=64, primary_key=True)
    value = models.BinaryField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "instance_settings"


class AuditEntry(models.Model):
    """One change to the configuration, sign-in attempt or action on a document: who did it,
    from which address, when, to what, and the values before and after (secrets masked by
    `ragmux.core.audit` before they get here).

    The actor's name is copied so the trail still reads after the user is gone; a change made by
    the CLI or a start-up step has no actor and reads "system", and neither has one (nor an
    address).
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_username = models.CharField(max_length=150)
    # As `ragmux.core.signin.client_address` reads it (proxy headers only when trusted).
    client_address = models.CharField(max_length=64, blank=True, default="")
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.BigIntegerField(null=True, blank=True)
    object_repr = models.CharField(max_length=200, blank=True, default="")
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "audit_entries"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_entries_object")]
