"""The run page's less common states in headless Chromium, as a user sees them: a four-rank run's
"Across ranks" section (the placement table and each rank's time per step, the straggler named;
a rollout/train split's table saying which rank generates and which trains),
a run waiting for GPUs on a shared cluster, an interrupted run waiting to resume, a run that
skipped optimiser steps, a queued run's place on its queue, a two-rank run starting, and the
launch form's "GPUs and machines" fields. With
SAVE_SCREENSHOTS=1 their pictures go to docs/screenshots/."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from experiments.models import Run, Step

from tests.platform.dashboard_fixtures import (
    make_prompt_set,
    make_run,
    record,
    record_run,
    record_split,
    two_node_run,
)

from .conftest import CHART_LOADED, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



def test_a_four_rank_runs_page_shows_where_it_runs_and_the_straggler(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = two_node_run(owner)
    record(run)
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    table = page.locator("#run-placement")
    assert table.locator("caption").inner_text().startswith("4 ranks on 2 nodes")
    assert table.locator("tbody tr").count() == 4
    assert "10.0.0.2" in table.inner_text()
    for name in ("rank_times", "rank_split"):
        page.wait_for_function(CHART_LOADED.format(name))
        layout = page.evaluate(f"document.getElementById('chart-{name}').layout")
        assert layout["title"]["text"] and "(s" in layout["yaxis"]["title"]["text"]
        assert layout["xaxis"]["title"]["text"]
    legend = page.locator("#chart-rank_times .legendtext").all_text_contents()
    assert len(legend) == 4 and any("2" in t for t in legend)
    # The straggler (rank 2, 60% slower at generation from step 2 on) is named on the page.
    section = page.locator("section", has=page.locator("#run-placement"))
    assert "rank 2" in section.inner_text()
    screenshot("across-ranks", element="section:has(#run-placement)")

    # Resumed on a shared cluster that has too few GPUs free: the status card says what for.
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING, total_steps=20, started_at=timezone.now() - timedelta(hours=1),
        waiting_for="waiting for 4 GPUs on the Ray cluster (2 free, 6 in all)")
    page.goto(base + f"/runs/{run.pk}/")
    waiting = page.locator("#run-waiting")
    assert waiting.is_visible()
    assert waiting.inner_text() == "waiting for 4 GPUs on the Ray cluster (2 free, 6 in all)"
    # The wait is not training time: no ETA extrapolated from it.
    assert "ETA" not in page.locator("#run-status").inner_text()
    screenshot("run-waiting-for-gpus", element="#run-status")


def test_a_split_runs_page_says_which_rank_generates_and_which_trains(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = two_node_run(owner)
    record_split(run)
    sign_in(page, live_server.url)
    page.goto(live_server.url + f"/runs/{run.pk}/")
    table = page.locator("#run-placement")
    assert table.locator("caption").inner_text() == (
        "4 ranks on 2 nodes (the latest step's): 2 rollout ranks generating, 2 train ranks "
        "training")
    assert table.locator("td.rank-role").all_text_contents() == ["train", "train", "rollout",
                                                                 "rollout"]
    page.wait_for_function(CHART_LOADED.format("rank_split"))
    legend = page.locator("#chart-rank_times .legendtext").all_text_contents()
    assert "rank 2 rollout (slowest)" in legend and "rank 0 train" in legend
    screenshot("across-ranks-split", element="section:has(#run-placement)")


def test_an_interrupted_run_says_it_waits_to_resume_and_a_skipping_run_warns(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    prompts = make_prompt_set("states", size=8)
    interrupted = record_run(make_run(owner, prompts, name="interrupted", total_steps=6), steps=3)
    # Handed back: queued again, and on the broker again.
    Run.objects.filter(pk=interrupted.pk).update(
        status=Run.Status.QUEUED, current_step=3, enqueued_at=timezone.now() - timedelta(
            minutes=2))
    skipping = record_run(make_run(owner, prompts, name="skipping", algorithm="grpo",
                                   total_steps=3, max_skipped_updates=5))
    step = Step.objects.get(run=skipping, step=3)
    step.metrics = {**step.metrics, "skipped_updates": 2.0}
    step.save()
    Run.objects.filter(pk=skipping.pk).update(status=Run.Status.SUCCEEDED)
    sign_in(page, base)

    page.goto(base + f"/runs/{interrupted.pk}/")
    assert page.locator("#run-state").inner_text() == "interrupted"
    note = page.locator("#run-interrupted")
    assert note.inner_text() == ("interrupted, waiting to resume from its last checkpoint: 1st "
                                 "in the cpu queue; no run holds its workers, so one takes it "
                                 "shortly (if one is up)")
    assert "ETA" not in page.locator("#run-status").inner_text()
    screenshot("run-interrupted", element="#run-status")
    page.goto(base + "/")
    row = page.locator("tr", has_text="interrupted").first
    assert "resumes from its last checkpoint" in row.locator(".status").get_attribute("title")

    page.goto(base + f"/runs/{skipping.pk}/")
    warning = page.locator("#skipped-updates")
    assert warning.is_visible() and warning.get_attribute("role") == "alert"
    assert "2 optimiser steps skipped" in warning.inner_text()
    screenshot("skipped-updates", element="#run-status")

    # Queued behind the interrupted run (which went back to the queue first) while another
    # run holds the queue's worker: the card gives its place.
    busy = make_run(owner, prompts, name="busy")
    Run.objects.filter(pk=busy.pk).update(status=Run.Status.RUNNING, started_at=timezone.now(),
                                          heartbeat_at=timezone.now())
    queued = make_run(owner, prompts, name="queued")
    Run.objects.filter(pk=queued.pk).update(enqueued_at=timezone.now() - timedelta(minutes=1))
    page.goto(base + f"/runs/{queued.pk}/")
    assert page.locator("#run-queue-place").inner_text() == (
        f"2nd in the cpu queue, behind run #{interrupted.pk} (queued); its workers are busy "
        f"with run #{busy.pk} (running)")
    screenshot("run-queued", element="#run-status")

    # Starting across two ranks: the phase, not "ETA after the first step".
    Run.objects.filter(pk=queued.pk).update(
        status=Run.Status.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now(),
        waiting_for="starting 2 ranks (1 of 2 ready): rank 1 building the vLLM engine")
    page.goto(base + f"/runs/{queued.pk}/")
    phase = page.locator("#run-waiting")
    assert phase.inner_text() == "starting 2 ranks (1 of 2 ready): rank 1 building the vLLM engine"
    assert phase.get_attribute("class") == "phase"  # not the wait-for-GPUs warning
    assert "ETA" not in page.locator("#run-status").inner_text()
    screenshot("run-starting", element="#run-status")


def test_the_launch_forms_gpus_and_machines_fields(live_server: Any, page: Any,
                                                   screenshot: Callable[..., None]) -> None:
    base = live_server.url
    User.objects.create_user("alice", password="alice-password-1")
    make_prompt_set("states", size=8)
    sign_in(page, base)
    page.goto(base + "/runs/new/")
    group = page.locator("fieldset", has=page.locator("legend", has_text="GPUs and machines"))
    assert group.count() == 1 and group.is_visible()
    field = group.locator("#id_world_size")
    assert field.is_visible() and field.input_value() == "1"
    assert group.locator("label", has_text="world_size").count() == 1
    split = group.locator("#id_rollout_ranks")
    assert split.is_visible() and split.input_value() == "0"
    assert (split.get_attribute("min"), split.get_attribute("max")) == ("0", "1023")
    screenshot("launch-distributed", element="fieldset:has(#id_world_size)")


def test_a_sweeps_failed_run_is_retried_in_its_place(live_server: Any, page: Any,
                                                     screenshot: Callable[..., None]) -> None:
    """Issue 27: "Relaunch" of a sweep's failed run made a run outside the sweep, which stayed
    failed. "Retry in the sweep" takes its place: the list keeps the failed run, dimmed and
    marked, and the sweep's status counts the retry."""
    from experiments import services

    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    sweep = services.launch_sweep(
        owner, "budget", {"backend": "simulated", "batch_size": 4, "total_steps": 3},
        services.parse_sweep_spec("(algorithm, group_size)=(ada-balance, 4), (grpo, 16); "
                                  "seed=0,1"), make_prompt_set("retry-set", size=8))
    runs = list(Run.objects.filter(sweep=sweep).order_by("pk"))
    Run.objects.filter(sweep=sweep).update(status=Run.Status.SUCCEEDED, current_step=3)
    failed = runs[1]
    Run.objects.filter(pk=failed.pk).update(
        status=Run.Status.FAILED, current_step=1,
        error="ModuleNotFoundError: No module named 'vllm.model_executor.models.qwen2'")
    sign_in(page, base)
    page.goto(base + f"/runs/{failed.pk}/")
    page.click("#run-retry-button")
    page.wait_for_url(lambda url: f"/runs/{failed.pk}/" not in url)
    retry = Run.objects.get(replaces=failed.pk)
    assert page.url.endswith(f"/runs/{retry.pk}/")
    assert "Retried in sweep “budget”" in page.locator(".messages, body").first.inner_text()
    page.goto(base + f"/?sweep={sweep.pk}")
    head = page.locator(f"#sweep-{sweep.pk}")
    assert "1 queued, 3 succeeded" in head.inner_text()
    assert "over (algorithm, group_size) × seed: 4 runs" in head.inner_text()
    row = page.locator("tr.replaced")
    assert row.count() == 1 and f"replaced by run {retry.pk}" in row.inner_text()
    assert float(row.evaluate("r => getComputedStyle(r).opacity")) < 1
    screenshot("sweep-retried", element="table")
