"""Shared fixtures live in tests/fixtures/: model.py (the warm-started tiny model, owned by the
trainer side) and services.py (PostgreSQL, Redis and Celery worker processes, owned by the
platform side)."""

pytest_plugins = ["tests.fixtures.model", "tests.fixtures.services", "tests.fixtures.vllm"]


def pytest_configure(config: object) -> None:
    """Hash test users' passwords with a fast hasher: PBKDF2's 1M iterations cost about a
    second per ``create_user`` or sign-in on these shared 2-core machines, for no test's sake.
    Production settings keep Django's default. Without pytest-django (``-p no:django``: one
    trainer test file without the platform's settings) there is no Django to configure.

    An upload's request waits for its import (parsed by a child process) up to
    PROMPT_UPLOAD_WAIT_SECONDS, 2 s in production, then answers "importing": on these busy
    machines a small file's import can outlast 2 s, and tests that upload expect the outcome
    in the answer. Tests of the background import set the wait to 0 themselves
    (tests/platform/test_prompt_import.py)."""
    if not config.pluginmanager.hasplugin("django"):  # type: ignore[attr-defined]
        return
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The suite sends many wrong tokens and launches from one address within a minute; the
    # throttles are tested with their own rates (tests/platform/test_fairness.py).
    settings.API_AUTH_FAILURE_RATE = "100000/min"
    settings.LAUNCH_RATE = "100000/min"
    settings.PROMPT_UPLOAD_WAIT_SECONDS = 60
