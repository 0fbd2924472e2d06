"""The web process's Celery client. It only sends tasks, by name (``send_task``): importing
``workers/`` would pull the trainer (and torch) into the web process. Workers configure their
own app from the same Django settings (``workers/celery_app.py``)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import redis
from celery import Celery
from django.conf import settings
from kombu.exceptions import OperationalError

EXECUTE_RUN_TASK = "workers.execute_run"
ESTIMATE_TASK = "workers.estimate_pass_rates"
# Redis keys under which live workers publish themselves (workers/registry.py writes them).
WORKER_REGISTRY_PREFIX = "rada:workers:"


@lru_cache(maxsize=1)
def client() -> Celery:
    app = Celery("rada")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


class BrokerUnavailable(Exception):
    """The broker did not take the task (down, unreachable, refusing writes)."""


def _send(task: str, object_id: int, queue: str) -> None:
    """Send ``task(object_id)`` to ``queue``; ``BrokerUnavailable`` when the broker does not
    take it (after Celery's own publish retries)."""
    try:
        client().send_task(task, args=[object_id], queue=queue)
    except (OperationalError, redis.RedisError, OSError) as exc:
        raise BrokerUnavailable(f"{type(exc).__name__}: {exc}") from exc


def enqueue_run(run_id: int, queue: str) -> None:
    _send(EXECUTE_RUN_TASK, run_id, queue)


def enqueue_estimate(estimate_id: int, queue: str) -> None:
    """The launch preflight's sample (``workers.estimate_pass_rates``)."""
    _send(ESTIMATE_TASK, estimate_id, queue)


def live_workers(timeout: float = 2.0) -> list[dict[str, Any]]:
    """The workers that published themselves within their expiry: hostname, queues, pid."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=timeout,
                                  socket_connect_timeout=timeout)
    out = []
    for key in client.scan_iter(f"{WORKER_REGISTRY_PREFIX}*"):
        raw = client.get(key)
        if raw:
            out.append(json.loads(raw))
    return out
