"""Per-user API tokens. Only a hash of each token is stored: the token itself is shown once, when
it is created, and cannot be read back from the database."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for (a machine, "
                            "a script).")
    # The first characters of the token, so a user can tell their tokens apart.
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
