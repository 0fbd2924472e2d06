"""The web process's Celery client. It only sends tasks, by name (``send_task``): importing
``workers/`` would pull the trainer (and torch) into the web process. Workers configure their
own app from the same Django settings (``workers/celery_app.py``)."""

from __future__ import annotations

from functools import lru_cache

from celery import Celery

EXECUTE_RUN_TASK = "workers.execute_run"


@lru_cache(maxsize=1)
def client() -> Celery:
    app = Celery("rada")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


def enqueue_run(run_id: int, queue: str) -> None:
    client().send_task(EXECUTE_RUN_TASK, args=[run_id], queue=queue)
