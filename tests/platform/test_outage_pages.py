"""While the database is unreachable, the API answers 503 in JSON and the pages a short 503 page
saying so, with Retry-After (issue 19: an HTML 500 with no reason). The outage here is real: the
connection is pointed at a closed port, so psycopg raises what a stopped server makes it raise."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from api.services import create_token
from django.db import connection
from django.test import Client


@contextlib.contextmanager
def database_down() -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(port))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@pytest.fixture
def token(transactional_db: None, user: Any) -> str:
    return create_token(user, "outage")[1]


def test_the_api_answers_503_in_json_while_the_database_is_down(token: str) -> None:
    client = Client(raise_request_exception=False)
    with database_down():
        responses = (client.get("/api/v1/runs", headers={"Authorization": f"Bearer {token}"}),
                     client.post("/api/v1/runs", data="{}", content_type="application/json",
                                 headers={"Authorization": f"Bearer {token}"}))
    for response in responses:
        assert response.status_code == 503, response.content[:300]
        assert response["Content-Type"] == "application/json"
        assert "database is unreachable" in response.json()["detail"]
        assert response["Retry-After"] == "10"


def test_a_page_says_the_database_is_unreachable(transactional_db: None, user: Any) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(user)  # the session is stored; reading it back needs the database
    with database_down():
        response = client.get("/")
    assert response.status_code == 503
    assert b"Service unavailable" in response.content
    assert b"database is unreachable" in response.content


def test_other_server_errors_stay_500() -> None:
    from django.test import RequestFactory
    from webapp.views import server_error

    for path in ("/runs/", "/api/v1/runs"):
        try:
            raise RuntimeError("a bug")
        except RuntimeError:
            response = server_error(RequestFactory().get(path))
        assert response.status_code == 500 and "Retry-After" not in response
