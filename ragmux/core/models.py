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
