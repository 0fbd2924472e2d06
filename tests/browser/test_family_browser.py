"""The adaptive-sampling family in headless Chromium (issue 31): each method's own run-page charts
drawn with data, for a recorded run of PODS, GVM-RAFT, VADE and DPPO, and the sweep's family
report drawing every method under every figure, one figure downloaded as PNG and SVG.

The runs are trained with the simulated backend and recorded through the platform's recorder
(``tests.platform.dashboard_fixtures``), evaluations included. With SAVE_SCREENSHOTS=1 they are
longer, with three seeds, and the family page's picture goes to
docs/screenshots/family-report.png."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dashboard import charts, reports
from django.contrib.auth.models import User
from experiments.models import Run
from experiments.services import launch_sweep

from tests.platform.dashboard_fixtures import make_prompt_set, record_run_with_evals
from trainer.types import Prompt as TrainerPrompt

from .conftest import CHART_LOADED, SAVE_SCREENSHOTS, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FAMILY = ["grpo", "pods", "gvm-raft", "vade", "dppo"]
STEPS, BATCH, SEEDS = (30, 8, [0, 1, 2]) if SAVE_SCREENSHOTS else (4, 4, [0])

# A chart has drawn data: some trace has a finite value (y, or a heatmap's z).
HAS_DATA = ("(id) => document.getElementById(id).data.filter(t => "
            "[...(t.y || []), ...(t.z || []).flat()].some(v => v !== null && "
            "Number.isFinite(Number(v)))).length")


def only_charts(run_id: int, names: list[str]) -> Callable[..., None]:
    """A Playwright route handler that lets the run's charts ``names`` through, no other."""
    wanted = tuple(f"/runs/{run_id}/charts/{name}.json" for name in names)

    def handle(route: Any, request: Any) -> None:
        if request.url.split("?")[0].endswith(wanted):
            route.continue_()
        else:
            route.abort()

    return handle


def test_each_methods_charts_and_the_family_report(live_server: Any, page: Any,
                                                   screenshot: Callable[..., None]) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    sweep = launch_sweep(owner, "family", {
        "backend": "simulated", "batch_size": BATCH, "total_steps": STEPS,
        "eval_every": STEPS // 2, "eval_k": 8, "save_every": 0,
    }, {"algorithm": FAMILY, "seed": SEEDS}, make_prompt_set(size=4 * BATCH))
    eval_prompts = [TrainerPrompt(id=f"e{i}", text=f"{i}+0=", answer=str(i)[::-1],
                                  metadata={"pass_rate": (i + 0.5) / 20}) for i in range(20)]
    for run in sweep.runs.all():
        record_run_with_evals(run, eval_prompts)
    Run.objects.filter(sweep=sweep).update(status=Run.Status.SUCCEEDED)
    base = live_server.url
    sign_in(page, base)

    # Each method's own charts (those its algorithm declares or registers) on its run page:
    # the four pages load side by side, in tabs of one browser. The page's other charts (drawn
    # for every run, tested elsewhere) are not fetched: the server draws only what is checked.
    tabs = []
    for algorithm in FAMILY[1:]:
        run = Run.objects.get(sweep=sweep, algorithm=algorithm, seed=SEEDS[0])
        own = [c.name for c in charts.RUN_CHARTS.values() if algorithm in c.algorithms]
        assert own, algorithm
        tab = page.context.new_page()
        tab.route(f"**/runs/{run.pk}/charts/**", only_charts(run.pk, own))
        tab.goto(f"{base}/runs/{run.pk}/", wait_until="commit")
        tabs.append((algorithm, tab, own))
    for algorithm, tab, own in tabs:
        for name in own:
            tab.wait_for_function(CHART_LOADED.format(name))
            assert tab.evaluate(HAS_DATA, f"chart-{name}") > 0, (algorithm, name)
        tab.close()

    # The family report: every method in every figure's legend.
    page.goto(f"{base}/sweeps/{sweep.pk}/family/")
    labels = [t.strip() for t in page.locator("#family-groups tbody td:first-child")
              .all_text_contents()]
    assert len(labels) == len(FAMILY)
    figures = [n for n in reports.FAMILY if reports.SECTIONS[n].kind == "figure"]
    for name in figures:
        page.wait_for_function(
            f"() => document.getElementById('fig-{name}').dataset.loaded === '1'")
        legend = page.evaluate(f"document.getElementById('fig-{name}').data"
                               ".filter(t => t.showlegend !== false).map(t => t.name)")
        assert set(labels) <= set(legend), (name, legend)
        assert page.evaluate(HAS_DATA, f"fig-{name}") >= len(FAMILY), name
    assert len(page.locator("#table-cost tbody tr").all()) == len(FAMILY)
    if SAVE_SCREENSHOTS:
        screenshot("family-report")
    for fmt, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<svg")):
        with page.expect_download() as info:
            page.click(f"[data-download-chart=fig-samples-difficulty][data-format={fmt}]")
        download = info.value
        assert download.suggested_filename == f"family-sweep-{sweep.pk}-samples-difficulty.{fmt}"
        assert Path(download.path()).read_bytes().startswith(magic)
