"""Shared fixtures live in tests/fixtures/: model.py (the warm-started tiny model, owned by the
trainer side) and services.py (PostgreSQL, Redis and Celery worker processes, owned by the
platform side)."""

pytest_plugins = ["tests.fixtures.model", "tests.fixtures.services", "tests.fixtures.vllm"]
