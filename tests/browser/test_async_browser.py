"""An asynchronous run's page and a prompt's history in headless Chromium: the "Asynchronous and
off-policy training" section draws the lag of the trained samples against the bound (bars of
each lag's share), the samples dropped and the engine/trainer timeline, each with its sentence
under it; the history says which policy version drew each response. The run is DAPO with
max_policy_lag = 2 on the simulated backend, recorded in-process through the worker's recorder
(no worker). With SAVE_SCREENSHOTS=1 (a longer run) their pictures go to docs/screenshots/."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import Run, Sample, Step

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import CHART_LOADED, SAVE_SCREENSHOTS, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



def test_an_async_runs_page_draws_its_lag_and_drops_and_the_history_its_versions(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    steps = 30 if SAVE_SCREENSHOTS else 6
    run = record_run(make_run(owner, make_prompt_set("async-arith", size=24),
                              name="dapo, max_policy_lag 2", algorithm="dapo",
                              total_steps=steps, batch_size=8, max_policy_lag=2))
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    section = page.locator("section.async-charts")
    assert section.locator("h2").inner_text() == "Asynchronous and off-policy training"
    for name in ("policy_lag", "stale_dropped"):
        page.wait_for_function(CHART_LOADED.format(name))
        assert page.locator(f"#caption-{name}").inner_text().startswith(
            ("Look for", "Samples paid for"))
    # Drawn: a bar per step and lag present, and the bound's line in the legend.
    assert page.locator("#chart-policy_lag g.point").count() >= steps
    legend = page.locator("#chart-policy_lag .legendtext").all_text_contents()
    assert "bound: max_policy_lag = 2" in legend and "lag 2" in legend
    assert page.locator("#chart-ess").count() == 0  # the simulated backend has no ratios
    # The engine and the trainer over the last steps: two bars per step, the legend naming
    # what each did, the title how long both were busy.
    page.wait_for_function(CHART_LOADED.format("engine_timeline"))
    legend = page.locator("#chart-engine_timeline .legendtext").all_text_contents()
    assert {"generating (engine)", "training (trainer)", "idle", "weight transfer"} <= set(legend)
    assert page.locator("#chart-engine_timeline g.point").count() >= 2 * min(steps, 20)
    assert "both busy" in page.locator("#chart-engine_timeline .gtitle").text_content()
    screenshot("async-run-page", element="section.async-charts")

    latest = Sample.objects.filter(run=run, step=steps).first()
    page.goto(base + f"/runs/{run.pk}/prompts/{latest.prompt_id}/")
    block = page.locator(f"#step-{steps}")
    assert f"this step trains version {steps - 1}" in block.inner_text()
    cells = block.locator("td.policy-version").all_text_contents()
    assert cells and all(c.startswith("v") and c.endswith(")") for c in cells)
    screenshot("async-prompt-history", element=f"#step-{steps}")


def test_an_off_policy_runs_page_draws_its_ess_baseline_shift_and_lr_applied(
        live_server: Any, page: Any, screenshot: Callable[..., None],
        request: pytest.FixtureRequest) -> None:
    """The ESS, baseline shift and lr charts of a real off-policy run: the warm-started tiny
    model trained with GRPO, max_policy_lag = 2 and vcpo on the hf backend (in-process,
    recorded through the worker's recorder), at an lr high enough (1e-3) for the ratios to
    spread. The platform test (tests/platform/test_async_pages.py) checks these charts against
    recorded values on every run; this one takes the docs' picture only (about 20 s of training
    on 2 cores)."""
    if not SAVE_SCREENSHOTS:
        pytest.skip("takes docs/screenshots/async-vcpo.png only (SAVE_SCREENSHOTS=1)")
    from .test_entropy_browser import record_hf_run

    model_dir = request.getfixturevalue("tiny_model_dir")
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = make_run(owner, make_prompt_set("sums-32", 32), name="grpo, max_policy_lag 2, vcpo",
                   algorithm="grpo", total_steps=20, batch_size=8, lr=1e-3, max_new_tokens=6,
                   ppo_mini_batch_size=4, max_policy_lag=2, off_policy_correction="vcpo",
                   tis_cap=2.0)
    Run.objects.filter(pk=run.pk).update(config={**run.config, "backend": "hf",
                                                 "model": str(model_dir)})
    run.refresh_from_db()
    record_hf_run(run, model_dir)
    ess = [s.metrics["ess"] for s in Step.objects.filter(run=run).order_by("step")]
    assert len(ess) == 20 and min(ess) < 1.0

    sign_in(page, live_server.url)
    page.goto(live_server.url + f"/runs/{run.pk}/")
    for name in ("policy_lag", "stale_dropped", "ess", "baseline_shift", "lr_applied"):
        page.wait_for_function(CHART_LOADED.format(name))
    legend = page.locator("#chart-ess .legendtext").all_text_contents()
    assert any(t.startswith("reference 0.5") for t in legend)
    screenshot("async-vcpo", element="section.async-charts")


def test_pictures_of_the_async_preflight_and_of_a_twin_compare(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    """docs/screenshots/async-preflight.png (an async config's estimate: its lag beside the
    synchronous step) and async-compare.png (a synchronous run and its asynchronous twin:
    held-out accuracy against wall time and against samples). The platform tests check both
    against recorded values on every run (tests/platform/test_preflight.py,
    tests/platform/test_async_pages.py); this one takes the docs' pictures only."""
    if not SAVE_SCREENSHOTS:
        pytest.skip("takes docs/screenshots/async-preflight.png and async-compare.png only "
                    "(SAVE_SCREENSHOTS=1)")
    from experiments import preflight
    from experiments.models import Estimate

    from tests.platform.dashboard_fixtures import record_run_with_evals
    from trainer.types import Prompt as TrainerPrompt

    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    ps = make_prompt_set("arith-64", size=64)
    estimate = preflight.request_estimate(
        owner, {"backend": "simulated", "algorithm": "ada-balance", "batch_size": 32,
                "max_policy_lag": 2, "max_new_tokens": 1024}, ps, samples_per_prompt=16,
        num_prompts=64)
    assert preflight.acquire_estimate(estimate.pk, "w")
    prompts = list(ps.prompts.order_by("index"))
    results = [{"prompt_id": p.pk, "errors": 0,
                "rewards": [1.0] * (i % 17) + [0.0] * (16 - i % 17)}
               for i, p in enumerate(prompts)]
    assert preflight.finish_estimate(estimate.pk, "w", Estimate.Status.SUCCEEDED,
                                     results=results, time_generation=8.0, time_scoring=0.2,
                                     tokens=40_000)
    sign_in(page, base)
    page.goto(base + f"/estimates/{estimate.pk}/")
    assert page.locator("#estimate-async-table tbody tr").count() == 3
    screenshot("async-preflight", element="#estimate-async")

    evals = [TrainerPrompt(id=f"e{i}", text=f"{i}+0=", answer=str(i),
                           metadata={"pass_rate": i / 20}) for i in range(20)]
    twins = make_prompt_set("twins", size=24)
    runs = [record_run_with_evals(make_run(owner, twins,
                                           name=f"grpo, max_policy_lag {k}", algorithm="grpo",
                                           total_steps=20, batch_size=8, eval_every=4,
                                           eval_k=4, max_policy_lag=k), evals)
            for k in (0, 2)]
    page.goto(base + f"/compare/?runs={runs[0].pk}&runs={runs[1].pk}")
    assert page.locator("#x-by-lag").is_visible()
    for key in ("wall", "samples"):
        page.wait_for_function(
            f"() => document.getElementById('chart-held-out-{key}').dataset.loaded === '1'")
    screenshot("async-compare", element="#held-out")
