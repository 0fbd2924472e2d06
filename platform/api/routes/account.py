"""``/me``: who the token belongs to."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from api.common import user_of
from api.schemas import Me

router = Router(tags=["account"])


@router.get("/me", response=Me)
def me(request: HttpRequest) -> Any:
    """Who the token belongs to (the client's ``login`` checks a token with it)."""
    return user_of(request)

