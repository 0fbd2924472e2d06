"""The admin lists and filters runs, prompt sets and prompts; the `platform` name stays the
standard library's inside Django."""

from __future__ import annotations

import platform
import sys
from typing import Any

import pytest
from experiments import services

SIM = {"backend": "simulated", "batch_size": 4, "total_steps": 3}


def test_platform_is_the_standard_module_inside_django(settings: Any) -> None:
    import django

    django.setup()
    assert platform.system() == __import__("os").uname().sysname
    assert platform.__file__.startswith(sys.base_prefix) or "site-packages" not in \
        platform.__file__
    assert not hasattr(platform, "__path__")  # a module, not our folder as a namespace package


@pytest.mark.parametrize("url", [
    "/admin/experiments/run/", "/admin/experiments/run/?status__exact=queued&algorithm=grpo",
    "/admin/experiments/run/?q=alpha", "/admin/experiments/promptset/",
    "/admin/experiments/promptset/?source__exact=upload", "/admin/experiments/prompt/",
    "/admin/experiments/prompt/?q=3%2B1",
])
def test_admin_changelists(admin_client: Any, prompt_set_factory: Any, url: str) -> None:
    admin_user = admin_client.session.get("_auth_user_id")
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(pk=admin_user)
    ps = prompt_set_factory(8, name="admin-set")
    services.launch_run(owner, "alpha", SIM | {"algorithm": "grpo"}, ps)
    services.launch_run(owner, "beta", SIM, ps)
    response = admin_client.get(url)
    assert response.status_code == 200
    body = response.content.decode()
    if "run/?status" in url:
        assert "alpha" in body and ">beta<" not in body
    if "promptset" in url and "source" not in url:
        assert "admin-set" in body


def test_admin_run_and_prompt_set_pages(admin_client: Any, prompt_set_factory: Any) -> None:
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(pk=admin_client.session["_auth_user_id"])
    ps = prompt_set_factory(4, name="detail-set")
    run = services.launch_run(owner, "detail", SIM, ps)
    assert admin_client.get(f"/admin/experiments/run/{run.pk}/change/").status_code == 200
    page = admin_client.get(f"/admin/experiments/promptset/{ps.pk}/change/")
    assert page.status_code == 200 and "2+1=" in page.content.decode()
