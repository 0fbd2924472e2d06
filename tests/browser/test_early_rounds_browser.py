"""A speculative early-rounds run's page in headless Chromium: the early-rounds chart (rounds
started early and discarded per step), the time they saved and the discarded tokens are drawn
with their titles, axis units and legends; a round-based run's page has none of them. With
SAVE_SCREENSHOTS=1 the chart's picture goes to docs/screenshots/early-rounds.png."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import Step

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOADED = "() => document.getElementById('chart-{0}') && " \
    "document.getElementById('chart-{0}').dataset.loaded === '1'"


def test_a_speculative_runs_page_draws_its_early_rounds(live_server: Any, page: Any,
                                                        screenshot: Callable[..., None]) -> None:
    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    prompts = make_prompt_set("rates-24", 24)
    run = record_run(make_run(owner, prompts, name="balance, speculative early rounds",
                              total_steps=4, batch_size=12, seed=3, scheduler="per-prompt",
                              early_rounds="speculative", max_new_tokens=512))
    round_run = record_run(make_run(owner, prompts, name="round", total_steps=2, batch_size=4))
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    for name in ("early_rounds", "early_rounds_saved", "discarded"):
        page.wait_for_function(LOADED.format(name))
    layout = page.evaluate("document.getElementById('chart-early_rounds').layout")
    assert layout["title"]["text"].startswith("Early rounds")
    assert "(rounds)" in layout["yaxis"]["title"]["text"] and layout["xaxis"]["title"]["text"]
    traces = page.evaluate("document.getElementById('chart-early_rounds').data"
                           ".map(t => [t.name, Array.from(t.y)])")
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert dict(traces) == {
        "started early": [s.metrics["early_rounds_started"] for s in steps],
        "discarded: the prompt exited": [s.metrics["early_rounds_discarded"] for s in steps]}
    assert sum(dict(traces)["started early"]) > 0
    # The legend is on the page, not only in the data.
    legend = page.locator("#chart-early_rounds .legendtext").all_text_contents()
    assert set(legend) == {"started early", "discarded: the prompt exited"}
    saved = page.evaluate("document.getElementById('chart-early_rounds_saved').layout")
    assert "(s" in saved["yaxis"]["title"]["text"]
    screenshot("early-rounds", element="#chart-early_rounds")

    page.goto(base + f"/runs/{round_run.pk}/")
    page.wait_for_function(LOADED.format("rewards"))
    assert page.locator("#chart-early_rounds").count() == 0
    assert page.locator("#chart-discarded").count() == 0
