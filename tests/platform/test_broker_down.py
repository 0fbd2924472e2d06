"""A launch while the broker is down: the user is told so, the run stays visibly queued, and it
starts once the broker is back and a worker sweeps queued runs onto the queue again."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from experiments.models import Run

from .test_dashboard_views import _launch_data
from .test_worker import wait_status


@contextmanager
def broker_unreachable(settings: Any, monkeypatch: Any) -> Iterator[int]:
    """The web app's broker points at a closed local port (yielded) until the block ends."""
    from webapp import celery as web_celery

    broker = settings.CELERY_BROKER_URL
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    # Celery reads the environment variable before the setting.
    monkeypatch.setenv("CELERY_BROKER_URL", f"redis://127.0.0.1:{port}/0")
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    web_celery.client.cache_clear()
    try:
        yield port
    finally:
        monkeypatch.setenv("CELERY_BROKER_URL", broker)
        settings.CELERY_BROKER_URL = broker
        web_celery.client.cache_clear()


def test_launch_with_the_broker_down_stays_queued_then_runs(
        start_worker: Any, user: Any, prompt_set_factory: Any, settings: Any,
        monkeypatch: Any) -> None:
    ps = prompt_set_factory(8)
    with broker_unreachable(settings, monkeypatch) as port:
        c = Client()
        c.force_login(user)
        t0 = time.monotonic()
        resp = c.post(reverse("dashboard:run_launch"),
                      _launch_data(ps, name="while down", batch_size=4, total_steps=2))
        seconds = time.monotonic() - t0
    run = Run.objects.get(name="while down")
    assert resp.status_code == 302
    assert resp["Location"] == reverse("dashboard:run_detail", args=[run.pk])
    (message,) = get_messages(resp.wsgi_request)
    assert message.level_tag == "error"
    assert "the broker (Redis) is unreachable" in str(message) and str(port) in str(message)
    assert "stays queued" in str(message)
    assert seconds < 60, seconds  # not a timing claim: a hung launch would be a bug
    page = c.get(resp["Location"]).content.decode()
    assert 'data-status="queued"' in page and "1st in the cpu queue" in page
    assert "not on the broker yet (it was down when the run was queued)" in page
    assert run.status == Run.Status.QUEUED
    # The broker is back: a worker enqueues the queued run again and executes it.
    start_worker("cpu")
    assert wait_status(run).status == Run.Status.SUCCEEDED, run.error
