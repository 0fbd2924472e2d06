"""The compare page of a sweep with a failed seed, in headless Chromium: both groups drawn from
the runs that recorded steps, the left-out run named with its reason, the scatter drawn from two
runs with data. The runs are recorded with the simulated backend through the worker's recorder
(the path under test is the page's); with SAVE_SCREENSHOTS=1 they are longer, for
docs/screenshots/compare-left-out.png."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dashboard.selectors import algorithm_label
from django.contrib.auth.models import User

from tests.platform.dashboard_fixtures import sweep_with_a_failed_seed

from .conftest import SAVE_SCREENSHOTS, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BALANCE = algorithm_label("ada-balance")


def test_compare_draws_every_group_and_names_the_failed_seed(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    sweep = sweep_with_a_failed_seed(owner, steps=40 if SAVE_SCREENSHOTS else 6)
    sign_in(page, live_server.url)
    page.goto(live_server.url + f"/compare/?sweep={sweep.pk}")
    for chart in ("chart-compare", "chart-compare-samples", "chart-scatter",
                  "chart-held-out-wall", "chart-held-out-samples"):
        page.wait_for_function(f"() => document.getElementById('{chart}').dataset.loaded === '1'")
    legend = page.evaluate("document.querySelector('#chart-compare .legend').textContent")
    assert "GRPO n=4: mean of 2 seeds (seeds 0, 1)" in legend
    assert f"{BALANCE}: seed 1 (1 of 2 seeds)" in legend
    note = page.locator("#compare-groups-left-out")
    assert note.is_visible()
    assert (f"{BALANCE}: 1 seed (seed 1); left out: seed 0, failed before its first step"
            in note.inner_text())
    # The scatter: points from the two runs with data, no "no prompt in common".
    scatter = page.evaluate("(() => { const d = document.getElementById('chart-scatter');"
                            " return [d.data[0].x.length, (d.layout.annotations || []).length];"
                            " })()")
    assert scatter[0] > 0 and scatter[1] == 0
    assert "[algorithm=ada-balance, seed=1]" in page.locator("#scatter-runs").inner_text()
    # No eval set: the held-out charts say so, no empty line.
    held_out = page.evaluate("document.getElementById('chart-held-out-wall').layout"
                             ".annotations[0].text")
    assert held_out.startswith("no held-out evaluation recorded")
    screenshot("compare-left-out")
