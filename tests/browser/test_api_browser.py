"""The API's pages in headless Chromium: a token created on the account page (and used), the
API docs page drawn from the platform's own Swagger UI files (offline), and the run page's
Export button downloading the Parquet bundle."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from api.models import ApiToken
from django.contrib.auth.models import User
from experiments.models import Run, Sample

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_token_page_docs_page_and_export_button(live_server: Any, page: Any,
                                                screenshot: Callable[..., None],
                                                tmp_path: Path) -> None:
    user = User.objects.create_user("alice", password="alice-password-1")
    run = record_run(make_run(user, make_prompt_set("arith", size=12), total_steps=3,
                              name="exported"))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    base = live_server.url
    sign_in(page, base)

    page.click("text=Account")
    page.fill("#token-name", "laptop")
    page.click("text=Create token")
    token = page.input_value("#new-token")
    assert token.startswith("rada_")
    assert ApiToken.objects.get(user=user, name="laptop").prefix == token[:11]
    screenshot("api-token", element="main")
    # The token works, from outside the browser.
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(base + "/api/v1/me",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req) as response:
        assert json.loads(response.read())["username"] == "alice"

    # Revoke: the list says so, and the token is refused.
    page.click("text=Revoke")
    assert "revoked" in page.locator("table.tokens").inner_text()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 401

    # The docs page: Swagger UI from the platform's static files lists the operations.
    page.goto(base + "/api/v1/docs")
    page.wait_for_selector("text=Reinforce-Ada platform API")
    assert page.locator(".opblock").count() >= 18

    page.goto(f"{base}/runs/{run.pk}/")
    with page.expect_download() as info:
        page.click("#run-export-button")
    download = info.value
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    assert path.name == f"run-{run.pk}-bundle.zip"
    with zipfile.ZipFile(path) as zf:
        zf.extractall(tmp_path / "bundle")
    assert pq.read_table(tmp_path / "bundle" / "samples.parquet").num_rows == \
        Sample.objects.filter(run=run).count()
