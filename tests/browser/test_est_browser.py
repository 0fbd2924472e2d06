"""A Reinforce-Ada-Est run's page in headless Chromium: the three Est charts (allocation against
p-hat with its curve, calibration, budget against GRPO n=8) render, and a prompt's history plots
p-hat. The run is recorded from the simulated backend through the platform's recorder, so the page
is what a worker's run looks like without the minutes of training. With SAVE_SCREENSHOTS=1 the
pictures go to docs/screenshots/ (from a larger run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import PromptStep

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import SAVE_SCREENSHOTS, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PROMPTS, BATCH, STEPS = (128, 32, 60) if SAVE_SCREENSHOTS else (16, 8, 6)


def _loaded(page: Any, chart: str) -> None:
    page.wait_for_function(f"() => document.getElementById('{chart}').dataset.loaded === '1'")


def test_est_run_page_and_prompt_history(live_server: Any, page: Any,
                                         screenshot: Callable[..., None]) -> None:
    User.objects.create_user("alice", password="alice-password-1")
    owner = User.objects.get(username="alice")
    run = record_run(make_run(owner, make_prompt_set(name="est-arith", size=PROMPTS),
                              name="est-sim", algorithm="ada-est", total_steps=STEPS,
                              batch_size=BATCH))
    base = live_server.url
    sign_in(page, base)

    page.goto(base + f"/runs/{run.pk}/")
    for chart in ("chart-est_allocation", "chart-est_calibration", "chart-est_budget"):
        _loaded(page, chart)
        assert page.locator(f"#{chart} .main-svg").count() >= 1  # Plotly drew it
    points = page.evaluate("document.getElementById('chart-est_allocation').data[0].y.length")
    assert points == BATCH
    names = page.evaluate("document.getElementById('chart-est_budget').data.map(t => t.name)")
    assert f"GRPO n=8: B x 8 = {BATCH * 8} samples" in names
    screenshot("est-run-page", element=".est-charts")

    prompt = PromptStep.objects.filter(run=run).order_by("-step").first().prompt_id
    page.goto(base + f"/runs/{run.pk}/prompts/{prompt}/")
    _loaded(page, "chart-passrate")
    names = page.evaluate("document.getElementById('chart-passrate').data.map(t => t.name)")
    assert names == ["pass rate of its pool", "p-hat before sampling (Est)"]
    assert page.locator(".step-block .meta.est").count() >= 1
    screenshot("est-prompt-history", full_page=False)
