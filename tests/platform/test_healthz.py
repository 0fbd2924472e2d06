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


def test_healthz_reports_a_broker_that_is_down(client: Any, db: None, settings: Any,
                                               django_user_model: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error" and not body["broker"]["ok"] and body["database"]["ok"]
    assert "error" not in body["broker"]  # the error text names hosts: staff only
    staff = django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    client.force_login(staff)
    body = client.get("/healthz").json()
    assert str(port) in body["broker"]["error"]


def test_worker_hostnames_are_for_staff_only(client: Any, db: None, settings: Any,
                                             django_user_model: Any) -> None:
    """A worker publishes itself in the broker's registry (workers/registry.py); everyone sees
    the count per queue, staff also the hostnames."""
    import json

    import redis
    from webapp.celery import WORKER_REGISTRY_PREFIX

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    key = f"{WORKER_REGISTRY_PREFIX}gpu-probe@secret-host"
    broker.set(key, json.dumps({"hostname": "gpu-probe@secret-host", "queues": ["gpu"]}), ex=60)
    try:
        anonymous = client.get("/healthz")
        assert anonymous.status_code == 200
        assert anonymous.json()["workers"]["gpu"] >= 1
        assert b"secret-host" not in anonymous.content
        plain = django_user_model.objects.create_user("plain", password="pw-plain-123")
        client.force_login(plain)
        assert b"secret-host" not in client.get("/healthz").content
        plain.is_staff = True
        plain.save()
        assert "gpu-probe@secret-host" in client.get("/healthz").json()["worker_names"]
    finally:
        broker.delete(key)
