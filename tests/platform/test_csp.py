"""The Content-Security-Policy header (issue 19): on every response, pages and API alike, and
the templates keep to it (no inline script, no event-handler attribute). The browser test
(``tests/browser/test_csp_browser.py``) checks that the pages and their charts work under it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.fixtures.services import ROOT

from .dashboard_fixtures import make_prompt_set, make_run, record_run


def _policy(response: Any) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


@pytest.mark.django_db
def test_every_response_carries_the_policy(owner_client: Client, owner: Any) -> None:
    ps = make_prompt_set("csp", size=8)
    run = record_run(make_run(owner, ps, total_steps=2))
    for url in ("/", f"/runs/{run.pk}/", f"/runs/{run.pk}/charts/rewards.json", "/runs/new/",
                "/api/v1/runs", "/no/such/page/"):
        r = owner_client.get(url)
        assert r.status_code < 500, (url, r.status_code)
        policy = _policy(r)
        # Scripts only from this server's files: no inline script, no eval.
        assert policy["script-src"] == "'self'", url
        assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    # The compare page draws a WebGL scatter: plotly.js compiles shaders with Function, so that
    # page alone allows eval; inline script stays refused there too.
    other = record_run(make_run(owner, ps, total_steps=2, name="b", algorithm="grpo"))
    compare = _policy(owner_client.get(f"/compare/?runs={run.pk}&runs={other.pk}"))
    assert compare["script-src"] == "'self' 'unsafe-eval'"
    assert "unsafe-inline" not in compare["script-src"]
    # Signed out too (the sign-in page is what a stranger sees).
    assert _policy(Client().get("/login/"))["default-src"] == "'self'"
    assert _policy(Client().get("/healthz"))["script-src"] == "'self'"
    assert settings.CONTENT_SECURITY_POLICY["script-src"] == "'self'"


INLINE = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>"
                    r"|\son[a-z]+\s*=|javascript:", re.IGNORECASE)


def test_templates_have_no_inline_script() -> None:
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)!r}"
                 for p in sorted((ROOT / "templates").rglob("*.html"))
                 for m in INLINE.finditer(p.read_text())]
    assert offenders == []
    assert Path(ROOT / "static" / "dashboard" / "launch.js").is_file()
