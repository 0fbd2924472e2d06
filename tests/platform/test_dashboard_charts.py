"""Chart JSON endpoints for a recorded run, and the min/max down-sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard import selectors
from dashboard.downsample import minmax
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import PromptStep, RoundStat, Run, Step

from .dashboard_fixtures import (
    make_prompt_set,
    make_run,
    record_run,
    trained_steps,
    write_step,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_and_run() -> tuple[Client, Run]:
    owner = User.objects.create_user("owner", password="x-123456")
    run = record_run(make_run(owner, make_prompt_set(size=12), name="bal", total_steps=8,
                              batch_size=4, seed=3))
    c = Client()
    c.force_login(User.objects.create_user("reader", password="x-123456"))
    return c, run


def _chart(c: Client, run: Run, name: str, **params: object) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run.pk, name]), params)
    assert resp.status_code == 200, name
    assert len(resp.content) < 2_000_000
    return resp.json()


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t["name"] == name)


def test_every_chart_has_title_axis_titles_and_legend(client_and_run: tuple[Client, Run]) -> None:
    from dashboard.charts import RUN_CHARTS

    c, run = client_and_run
    for name in RUN_CHARTS:
        fig = _chart(c, run, name)
        layout = fig["layout"]
        assert layout["title"]["text"], name
        assert layout["xaxis"]["title"]["text"], name
        assert layout["yaxis"]["title"]["text"], name
        assert layout["showlegend"] is True, name
        assert all(t.get("name") for t in fig["data"]), name


def test_rewards_chart_matches_recorded_steps(client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    fig = _chart(c, run, "rewards")
    steps = list(Step.objects.filter(run=run).order_by("step"))
    real = _trace(fig, "real reward (first n samples)")
    kept = _trace(fig, "kept-batch reward")
    assert real["x"] == [s.step for s in steps] == list(range(1, 9))
    assert real["y"] == pytest.approx([s.real_reward for s in steps])
    assert kept["y"] == pytest.approx([s.kept_reward for s in steps])
    assert "reward" in fig["layout"]["yaxis"]["title"]["text"]


def test_funnel_chart_counts_active_resolved_and_unresolved(
        client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    fig = _chart(c, run, "funnel")
    stats = {(r.step, r.round): r for r in RoundStat.objects.filter(run=run)}
    after1 = _trace(fig, "active after round 1")
    assert after1["y"] == [stats[s, 1].active_prompts - stats[s, 1].finished
                           for s in range(1, 9)]
    resolved1 = _trace(fig, "resolved in round 1")
    assert resolved1["y"] == [stats[s, 1].finished for s in range(1, 9)]
    # Every prompt of the batch ends somewhere: resolved in a round or unresolved.
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    for i, step in enumerate(range(1, 9)):
        assert sum(t["y"][i] for t in bars) == pytest.approx(run.config["batch_size"]), step
    unresolved = PromptStep.objects.filter(run=run, exit_round__isnull=True)
    missing_pos = _trace(fig, "unresolved: missing positives")["y"]
    missing_neg = _trace(fig, "unresolved: missing negatives")["y"]
    assert sum(missing_pos) + sum(missing_neg) == unresolved.count()


def test_budget_chart_shows_grpo_reference_and_cumulative(
        client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    fig = _chart(c, run, "budget")
    bxn = run.config["batch_size"] * run.config["group_size"]
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert _trace(fig, "samples per step")["y"] == [s.samples for s in steps]
    assert _trace(fig, f"GRPO budget B x n = {bxn} samples")["y"] == [bxn] * 8
    cum = _trace(fig, "cumulative samples")["y"]
    assert cum[-1] == sum(s.samples for s in steps) == run.samples_spent
    assert _trace(fig, "cumulative tokens")["y"][-1] == sum(s.tokens for s in steps)


def test_metric_charts_read_step_metrics(client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    steps = list(Step.objects.filter(run=run).order_by("step"))
    fig = _chart(c, run, "signal")
    assert _trace(fig, "kept groups with zero advantage")["y"] == pytest.approx(
        [s.metrics["zero_adv_frac"] for s in steps])
    timing = _chart(c, run, "timing")
    assert {t["name"] for t in timing["data"]} == {"generation", "scoring", "update",
                                                   "weight sync"}
    assert all(t["stackgroup"] == "time" for t in timing["data"])
    assert "(s)" in timing["layout"]["yaxis"]["title"]["text"]


def test_heatmap_has_samples_per_prompt_and_step_with_exit_round(
        client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    fig = _chart(c, run, "heatmap")
    trace = fig["data"][0]
    assert trace["type"] == "heatmap"
    ids = fig["prompt_ids"]
    for ps in PromptStep.objects.filter(run=run):
        row = ids.index(ps.prompt_id)
        col = trace["x"].index(ps.step)
        assert trace["z"][row][col] == ps.samples
        assert fig["exit_rounds"][row][col] == (ps.exit_round or 0)  # 0: unresolved
    # Cells of steps where a prompt was not sampled stay empty.
    sampled = PromptStep.objects.filter(run=run).count()
    assert sum(v is not None for row in trace["z"] for v in row) == sampled


def test_prompt_pass_rate_chart(client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    ps = PromptStep.objects.filter(run=run).order_by("prompt_id", "step").first()
    fig = c.get(reverse("dashboard:prompt_chart", args=[run.pk, ps.prompt_id])).json()
    rows = PromptStep.objects.filter(run=run, prompt_id=ps.prompt_id).order_by("step")
    assert fig["data"][0]["x"] == [r.step for r in rows]
    assert fig["data"][0]["y"] == pytest.approx([r.positives / r.samples for r in rows])


def test_minmax_keeps_spikes() -> None:
    xs = list(range(10_000))
    ys = [0.5] * 10_000
    ys[1234], ys[8765] = 9.0, -3.0
    x, y = minmax(xs, ys, 100)
    assert len(x) <= 100
    assert 9.0 in y and -3.0 in y
    assert x[y.index(9.0)] == 1234 and x[y.index(-3.0)] == 8765
    assert x == sorted(x)
    assert minmax(xs[:50], ys[:50], 100) == (xs[:50], ys[:50])


def test_chart_endpoint_downsamples_and_keeps_spike(client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    steps = list(Step.objects.filter(run=run).order_by("step"))
    spike = max(s.real_reward for s in steps) + 5.0
    dip = min(s.real_reward for s in steps) - 5.0
    Step.objects.filter(run=run, step=3).update(real_reward=spike)
    Step.objects.filter(run=run, step=6).update(real_reward=dip)
    fig = _chart(c, run, "rewards", points=4)
    real = _trace(fig, "real reward (first n samples)")
    assert len(real["x"]) <= 4
    assert spike in real["y"] and dip in real["y"]
    assert real["x"][real["y"].index(spike)] == 3


def test_unknown_chart_is_404(client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    assert c.get(reverse("dashboard:run_chart", args=[run.pk, "nope"])).status_code == 404


def test_heatmap_of_a_live_run_adds_new_steps_to_the_cached_cells(tmp_path: Path) -> None:
    owner = User.objects.create_user("live", password="x-123456")
    run = make_run(owner, make_prompt_set(size=12), name="live", total_steps=8, batch_size=4)
    records = trained_steps(run, tmp_path)
    for record in records[:3]:
        write_step(run, record)
    first = selectors.heatmap(run)
    assert first["last_step"] == 3 and len(first["x"]) == 3
    for record in records[3:]:
        write_step(run, record)
    later = selectors.heatmap(run)
    assert later["last_step"] == 8
    for ps in PromptStep.objects.filter(run=run):
        row, col = later["prompt_ids"].index(ps.prompt_id), ps.step - 1
        assert later["z"][row][col] == ps.samples
        assert later["exit_rounds"][row][col] == (ps.exit_round or 0)
    assert sum(v is not None for r in later["z"] for v in r) == PromptStep.objects.filter(
        run=run).count()


def test_eval_chart_plots_recorded_evaluations(client_and_run: tuple[Client, Run]) -> None:
    from experiments.models import EvalResult

    c, run = client_and_run
    empty = _chart(c, run, "eval")
    assert empty["data"] == []
    assert "no evaluation yet" in empty["layout"]["annotations"][0]["text"]
    for step, acc in ((4, 0.25), (8, 0.5)):
        EvalResult.objects.create(run=run, step=step, metrics={
            "prompts": 200, "k": 8, "greedy_accuracy": acc, "avg@8": acc / 2, "pass@8": acc * 1.5})
    fig = _chart(c, run, "eval")
    acc = _trace(fig, "greedy accuracy")
    assert acc["x"] == [4, 8] and acc["y"] == [0.25, 0.5]
    assert _trace(fig, "pass@8")["y"] == [0.375, 0.75]
    assert {t["name"] for t in fig["data"]} == {"greedy accuracy", "avg@8", "pass@8"}


def test_rollout_gap_chart_for_vllm_runs(client_and_run: tuple[Client, Run],
                                          tmp_path: Path) -> None:
    """The rollout/policy log-prob gap (and the weight-sync time) are charted from what the
    trainer records for a vllm run; other runs do not list the chart, and where it is asked for
    anyway it says the backend does not record it."""
    from dashboard.charts import charts_for

    c, sim_run = client_and_run
    assert "rollout" not in charts_for(sim_run)
    assert "not recorded" in _chart(c, sim_run, "rollout")["layout"]["annotations"][0]["text"]
    owner = User.objects.get(username="owner")
    run = make_run(owner, sim_run.prompt_set, name="engine", total_steps=3, batch_size=4)
    records = trained_steps(run, tmp_path)
    run.config = {**run.config, "backend": "vllm"}
    run.save(update_fields=["config"])
    for i, rec in enumerate(records, 1):
        rec.metrics.update(rollout_logprob_diff_mean=1e-3 * i, rollout_logprob_diff_max=1e-2 * i,
                           time_sync=0.01 * i)
        write_step(run, rec)
    assert "rollout" in charts_for(run)
    page = c.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert reverse("dashboard:run_chart", args=[run.pk, "rollout"]) in page
    fig = _chart(c, run, "rollout")
    assert _trace(fig, "mean over kept tokens")["y"] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert _trace(fig, "max over kept tokens")["y"] == pytest.approx([1e-2, 2e-2, 3e-2])
    assert _trace(_chart(c, run, "timing"), "weight sync")["y"] == pytest.approx(
        [0.01, 0.02, 0.03])
