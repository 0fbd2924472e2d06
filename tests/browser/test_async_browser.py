"""An asynchronous run's page and a prompt's history in headless Chromium: the "Asynchronous and
off-policy training" section draws the lag of the trained samples against the bound (bars of
each lag's share), the samples dropped and the engine/trainer timeline, each with its sentence
under it; the history says which policy version drew each response. The run is DAPO with
max_policy_lag = 2 on the simulated backend, recorded in-process through the worker's recorder
(no worker). A second test takes the whole path on a real Celery worker: Seq-balance with
max_policy_lag = 1 and its synchronous twin launched from the form (the tiny model, three steps),
the async run's charts from what the worker recorded, the compare page on wall time. With
SAVE_SCREENSHOTS=1 (a longer run) their pictures go to docs/screenshots/."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import Run, Sample, Step

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import CHART_LOADED, SAVE_SCREENSHOTS, fill_and_launch, sign_in

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


def _launch_from_the_form(page: Any, base: str, name: str, prompt_set: Any,
                          **fields: str) -> Run:
    """The launch form filled as a researcher fills it: the tiny model on the hf backend
    (its runs have importance ratios, so ESS), three steps of four prompts."""

    page.goto(base + "/runs/new/")
    page.fill("#id_name", name)
    page.select_option("#id_prompt_set", str(prompt_set.pk))
    page.fill("#id_model", "builtin:tiny")
    page.select_option("#id_backend", "hf")
    page.select_option("#id_device", "cpu")
    values = {"algorithm": "ada-balance", "lr": "0.0002", "total_steps": "3",
              "batch_size": "4", "samples_per_round": "4", "max_rounds": "2",
              "max_new_tokens": "4", "save_every": "0", "eval_every": "0", **fields}
    return fill_and_launch(page, values)


def test_an_async_run_and_its_synchronous_twin_from_the_launch_form_on_a_worker(
        live_server: Any, page: Any, start_worker: Callable[..., Any],
        tiny_model_dir: Any) -> None:
    """The path a researcher takes: Seq-balance with max_policy_lag = 1 and its synchronous
    twin launched from the form, trained by a real Celery worker (the tiny model, hf backend),
    then the async run's lag, ESS and engine/trainer timeline drawn from what the worker
    recorded, and the compare page opening the two on wall time."""
    from experiments.services import create_builtin_prompt_set

    from tests.fixtures.services import wait_for
    from trainer.model import MODEL_DIR_ENV

    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    prompts = create_builtin_prompt_set(owner, "arith-16", n=16, max_digits=2)
    sign_in(page, base)
    runs = [_launch_from_the_form(page, base, "seq-balance, lag 1", prompts,
                                  max_policy_lag="1", off_policy_correction="tis",
                                  tis_cap="2"),
            _launch_from_the_form(page, base, "seq-balance, synchronous", prompts)]
    assert [(r.algorithm, r.config["max_policy_lag"]) for r in runs] == [
        ("ada-balance", 1), ("ada-balance", 0)]
    start_worker(queues="cpu", env={MODEL_DIR_ENV: str(tiny_model_dir)})
    wait_for(lambda: not Run.objects.filter(pk__in=[r.pk for r in runs]).exclude(
        status__in=("succeeded", "failed", "cancelled")).exists(), timeout=300,
        what="both runs to finish")
    assert [Run.objects.get(pk=r.pk).status for r in runs] == ["succeeded"] * 2, [
        Run.objects.get(pk=r.pk).error for r in runs]
    lagged = runs[0]
    assert Step.objects.filter(run=lagged).count() == 3

    page.goto(base + f"/runs/{lagged.pk}/")
    for name in ("policy_lag", "ess", "engine_timeline"):
        page.wait_for_function(CHART_LOADED.format(name))
    legend = page.locator("#chart-policy_lag .legendtext").all_text_contents()
    assert "bound: max_policy_lag = 1" in legend
    assert page.locator("#chart-policy_lag g.point").count() >= 3
    # ESS: a recorded value per step, as the worker wrote it (each in (0, 1]).
    ess = page.evaluate("document.getElementById('chart-ess').data"
                        ".find(t => t.name.startsWith('ESS')).y")
    recorded = [s.metrics["ess"] for s in Step.objects.filter(run=lagged).order_by("step")]
    assert ess == pytest.approx(recorded) and all(0 < v <= 1 for v in recorded)
    timeline = page.locator("#chart-engine_timeline .legendtext").all_text_contents()
    assert {"generating (engine)", "training (trainer)"} <= set(timeline)
    assert page.locator("#chart-engine_timeline g.point").count() >= 2 * 3

    # Their lags differ: the compare page opens on wall time, and says why.
    page.goto(base + f"/compare/?runs={runs[0].pk}&runs={runs[1].pk}")
    assert page.locator("#x-by-lag").is_visible()
    assert page.input_value("#compare-controls select[name=x]") == "wall"
    page.wait_for_function(
        "() => document.getElementById('chart-compare').dataset.loaded === '1'")
    assert page.locator("#chart-compare .g-xtitle").text_content() == "wall time (s)"
    names = page.evaluate("document.getElementById('chart-compare').data.map(t => t.name)")
    assert all(any(n.startswith(r.name) for n in names) for r in runs), names


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
