"""/healthz reports the database, the broker and live workers per queue (workers are covered by
the worker tests); a broker that is down makes it answer 503."""

from __future__ import annotations

import socket
from typing import Any


def test_healthz_ok_without_workers(client: Any, db: None) -> None:
    response = client.get("/healthz")  # no sign-in needed
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"]["ok"] and body["broker"]["ok"]
    assert set(body["workers"]) >= {"cpu", "gpu"}


def test_healthz_reports_a_broker_that_is_down(client: Any, db: None, settings: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error" and not body["broker"]["ok"] and body["database"]["ok"]
    assert body["broker"]["error"]
