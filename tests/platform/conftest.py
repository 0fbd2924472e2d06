"""Signed-in users for the dashboard and API tests: an owner and another user, each with a
logged-in Django test client. Modules whose tests act as the ``user`` fixture override
``owner_client`` locally."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def other() -> User:
    return User.objects.create_user("other", password="pw-other-123")


def _signed_in(user: User) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def owner_client(owner: User) -> Client:
    return _signed_in(owner)


@pytest.fixture
def other_client(other: User) -> Client:
    return _signed_in(other)
