"""Writes of the API app: tokens are created (the plain token returned once) and revoked."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from experiments.services import LaunchError, check_fits_columns

from api.models import ApiToken

TOKEN_PREFIX = "rada_"


def hash_token(token: str) -> str:
    """SHA-256, unsalted: a token is 256 random bits, so a slow password hash would buy nothing
    against guessing and would cost every API request its time."""
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(user: AbstractBaseUser, name: str) -> tuple[ApiToken, str]:
    """A new token for ``user``: (the stored row, the plain token, to show once)."""
    name = (name or "").strip()
    if not name:
        raise LaunchError("name", "give the token a name (what will use it)")
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user=user, name=name, prefix=plain[:len(TOKEN_PREFIX) + 6],
                     key_hash=hash_token(plain))
    check_fits_columns(token)
    token.save()
    return token, plain


def revoke_token(token: ApiToken, user: AbstractBaseUser) -> None:
    if token.user_id != user.pk:
        raise PermissionDenied("only the token's owner may revoke it")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def user_for_token(plain: str) -> AbstractBaseUser | None:
    """The active user a live token belongs to (None: unknown, revoked, or user inactive)."""
    token = (ApiToken.objects.select_related("user")
             .filter(key_hash=hash_token(plain), revoked_at__isnull=True).first())
    if token is None or not token.user.is_active:
        return None
    # Coarse: one write per token per minute at most, not one per request.
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
