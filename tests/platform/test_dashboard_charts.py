"""Chart JSON endpoints for a recorded run, and the min/max down-sampling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dashboard import heatmap
from dashboard.downsample import minmax
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Prompt, PromptStep, RoundStat, Run, Sample, Step

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


def _step_axis_under_the_lowest_panel(fig: dict, name: str) -> None:
    """Panels stacked over one x axis: the axis (ticks and title) is drawn under the lowest,
    and no two panels overlap. Plotly anchors an x axis to "y" by default: in the budget chart
    that was the top panel, and "training step" sat over the tokens panel below it."""
    layout = fig["layout"]
    panels = {k: v["domain"] for k, v in layout.items()
              if k.startswith("yaxis") and "domain" in v}
    if len(panels) < 2:
        return
    lowest = min(panels, key=lambda k: panels[k][0])
    assert layout["xaxis"].get("anchor", "y") == "y" + lowest[len("yaxis"):], name
    spans = sorted(panels.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), (name, spans)


def test_every_chart_has_title_axis_titles_and_legend(client_and_run: tuple[Client, Run]) -> None:
    from dashboard.charts import RUN_CHARTS

    c, run = client_and_run
    for name in RUN_CHARTS:
        fig = _chart(c, run, name)
        _step_axis_under_the_lowest_panel(fig, name)
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


def test_heatmap_of_a_live_run_adds_new_steps_to_the_cached_cells(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    owner = User.objects.create_user("live", password="x-123456")
    run = make_run(owner, make_prompt_set(size=12), name="live", total_steps=8, batch_size=4)
    records = trained_steps(run, tmp_path)
    for record in records[:3]:
        write_step(run, record)
    first = heatmap.view(run, sort="index")
    assert first.last_step == 3 and len(first.x) == 3
    for record in records[3:]:
        write_step(run, record)
    later = heatmap.view(run, sort="index")
    assert later.last_step == 8
    for ps in PromptStep.objects.filter(run=run):
        row, col = later.prompt_ids.index(ps.prompt_id), ps.step - 1
        assert later.z[row][col] == ps.samples
        assert later.counts[row][col] == 1
        assert later.unresolved[row][col] == (ps.exit_round is None)
        assert later.exit_rounds[row][col] == (ps.exit_round or 0)
    assert sum(v is not None for r in later.z for v in r) == PromptStep.objects.filter(
        run=run).count()
    # What the merge cached is what a cold aggregation of all 8 steps gives.
    monkeypatch.setattr(heatmap, "CACHE_FINISHED", False)
    cold = heatmap.view(run, sort="index")
    assert (cold.z, cold.counts, cold.unresolved, cold.prompt_ids) == (
        later.z, later.counts, later.unresolved, later.prompt_ids)


def test_eval_chart_plots_recorded_evaluations(client_and_run: tuple[Client, Run]) -> None:
    from experiments.models import EvalResult

    c, run = client_and_run
    empty = _chart(c, run, "eval")
    assert empty["data"] == []
    assert "no evaluation yet" in empty["layout"]["annotations"][0]["text"]
    for step, acc in ((4, 0.25), (8, 0.5)):
        # As recorded (every value a float), with the curves for j < k (the report's pass@k
        # figure), which stay off this chart.
        EvalResult.objects.create(run=run, step=step, metrics={
            "prompts": 200.0, "k": 8.0, "greedy_accuracy": acc, "avg@8": acc / 2,
            "pass@8": acc * 1.5, "pass@1": acc / 2, "pass@4": acc, "all_correct@8": acc / 4})
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


def test_streaming_run_page_warns_and_charts_discarded_tokens(
        client_and_run: tuple[Client, Run]) -> None:
    """A streaming run's page says it is a different algorithm and charts the tokens it threw
    away and its kept responses' length; a round-based run's page does neither."""
    from dashboard.charts import charts_for

    c, round_run = client_and_run
    owner = User.objects.get(username="owner")
    run = record_run(make_run(owner, round_run.prompt_set, name="stream", total_steps=4,
                              batch_size=4, seed=3, scheduler="streaming", max_new_tokens=64))
    assert "discarded" in charts_for(run) and "discarded" not in charts_for(round_run)
    page = c.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert 'id="streaming-notice"' in page and "a different algorithm" in page
    assert "scheduler streaming" in " ".join(page.split())
    assert reverse("dashboard:run_chart", args=[run.pk, "discarded"]) in page
    other = c.get(reverse("dashboard:run_detail", args=[round_run.pk])).content.decode()
    assert 'id="streaming-notice"' not in other and "scheduler round" in " ".join(other.split())
    steps = list(Step.objects.filter(run=run).order_by("step"))
    fig = _chart(c, run, "discarded")
    assert _trace(fig, "tokens generated, then discarded")["y"] == pytest.approx(
        [s.metrics["tokens_discarded"] for s in steps])
    assert sum(s.metrics["tokens_discarded"] for s in steps) > 0
    kept = _trace(_chart(c, run, "length"), "responses kept for the update")["y"]
    assert kept == pytest.approx([s.metrics["kept_response_length"] for s in steps])


# --- heatmaps at any size, pinned axes, escaped names ------------------------------------------

@pytest.fixture
def large_run() -> tuple[Client, Run]:
    """600 prompts sampled once each (B = 100, 6 steps): more rows than the chart draws."""
    owner = User.objects.create_user("big", password="x-123456")
    run = record_run(make_run(owner, make_prompt_set("big-600", size=600), name="big",
                              total_steps=6, batch_size=100, seed=1))
    c = Client()
    c.force_login(owner)
    return c, run


def test_heatmap_bins_sorts_searches_and_zooms(large_run: tuple[Client, Run]) -> None:
    c, run = large_run
    fig = _chart(c, run, "heatmap")
    rows = PromptStep.objects.filter(run=run)
    assert fig["bin_size"] == 3 and len(fig["data"][0]["y"]) == 200  # 600 prompts / 256 rows
    assert fig["layout"]["title"]["subtitle"]["text"].startswith(
        "600 prompts in 200 bins of 3 · most samples first · 600 of 600 prompt-steps")
    # Every prompt-step is counted in some cell, round-1 exits included.
    assert sum(map(sum, fig["counts"])) == rows.count() == 600
    assert min(v for r in fig["data"][0]["z"] for v in r if v is not None) == 8.0
    # Sorted by samples: bin means never increase down the chart.
    means = [sum(s for s in r if s) / max(1, sum(bool(s) for s in r))
             for r in fig["data"][0]["z"]]
    assert means == sorted(means, reverse=True)
    # Every row is a click target of at least a few pixels.
    plot_height = fig["layout"]["height"] - fig["layout"]["margin"]["t"] - fig["layout"][
        "margin"]["b"]
    assert plot_height / len(fig["data"][0]["y"]) >= 3.5
    # A bin's rows, zoomed: full resolution, one prompt per row, in the same order.
    first, last = fig["row_ranges"][0]
    zoom = _chart(c, run, "heatmap", rows=f"{first}-{last}")
    assert zoom["bin_size"] == 1 and len(zoom["prompt_ids"]) == 3
    by_prompt = {ps.prompt_id: ps.samples for ps in rows}
    top = sorted(by_prompt.values(), reverse=True)[:3]
    assert [by_prompt[p] for p in zoom["prompt_ids"]] == top
    assert "rows 1–3 of 600 prompts, one row each" in zoom["layout"]["title"]["subtitle"]["text"]

    # Sort orders (checked at full resolution), then search by prompt text.
    by_prompt = {ps.prompt_id: ps for ps in rows}
    rate = _chart(c, run, "heatmap", sort="pass-rate", rows="1-600")
    assert rate["bin_size"] == 3
    ordered = _chart(c, run, "heatmap", sort="pass-rate", rows="1-250")
    rates = [by_prompt[p].positives / by_prompt[p].samples for p in ordered["prompt_ids"]]
    assert rates == sorted(rates) and len(rates) == 250
    first = _chart(c, run, "heatmap", sort="first-seen", rows="1-250")
    steps = [by_prompt[p].step for p in first["prompt_ids"]]
    assert steps == sorted(steps)
    unresolved = _chart(c, run, "heatmap", sort="unresolved", rows="1-250")
    flags = [by_prompt[p].exit_round is None for p in unresolved["prompt_ids"]]
    assert flags == sorted(flags, reverse=True) and any(flags)
    # Search by prompt text: only the matching prompts, each its own row.
    found = _chart(c, run, "heatmap", q="12+")
    texts = dict(Prompt.objects.filter(pk__in=found["prompt_ids"]).values_list("id", "text"))
    expected = Prompt.objects.filter(prompt_set=run.prompt_set, text__contains="12+").count()
    assert len(found["prompt_ids"]) == expected > 0
    assert all("12+" in t for t in texts.values())
    assert f"{expected} of 600 prompts matching “12+”" in found["layout"]["title"]["subtitle"][
        "text"]


def test_flat_series_are_drawn_on_their_domain(tmp_path: Path) -> None:
    """A run where nothing is ever solved: rewards all 0, every prompt spends M x N = 32."""
    from dashboard.charts import COMPARE_METRICS, METRIC_DOMAINS, RUN_CHARTS

    owner = User.objects.create_user("flat", password="x-123456")
    ps = make_prompt_set("never", size=8)
    Prompt.objects.filter(prompt_set=ps).update(metadata={"pass_rate": 0.0})
    run = record_run(make_run(owner, ps, name="flat", total_steps=3, batch_size=4))
    other = record_run(make_run(owner, ps, name="flat-2", total_steps=3, batch_size=4, seed=1))
    c = Client()
    c.force_login(owner)
    rewards = _chart(c, run, "rewards")
    assert set(_trace(rewards, "real reward (first n samples)")["y"]) == {0.0}
    assert rewards["layout"]["yaxis"]["range"] == pytest.approx([-0.02, 1.02])
    heat = _chart(c, run, "heatmap")
    assert {v for r in heat["data"][0]["z"] for v in r if v is not None} == {32.0}
    assert (heat["data"][0]["zmin"], heat["data"][0]["zmax"]) == (0, 32)
    # Every axis titled as a fraction (0-1), on every chart, is pinned to [0, 1].
    for name in RUN_CHARTS:
        layout = _chart(c, run, name)["layout"]
        for key, axis in layout.items():
            if key.startswith(("xaxis", "yaxis")) and "(0-1)" in axis["title"]["text"]:
                assert axis["range"] == pytest.approx([-0.02, 1.02]), (name, key)
    for metric in COMPARE_METRICS:
        assert metric in METRIC_DOMAINS
        fig = c.get(reverse("dashboard:compare_chart"),
                    {"runs": f"{run.pk},{other.pk}", "metric": metric}).json()
        if "(0-1)" in fig["layout"]["yaxis"]["title"]["text"]:
            assert fig["layout"]["yaxis"]["range"] == pytest.approx([-0.02, 1.02]), metric
        else:
            assert fig["layout"]["yaxis"]["rangemode"] == "tozero", metric


def test_user_strings_reach_plotly_escaped(tmp_path: Path) -> None:
    """Plotly renders a subset of HTML in names, titles and hover text: a run named <b>x</b>
    must be drawn as written, not bold, on every chart that shows a name or a prompt."""
    from dashboard.charts import RUN_CHARTS

    owner = User.objects.create_user("esc", password="x-123456")
    ps = make_prompt_set("escapes", size=8)
    for p in Prompt.objects.filter(prompt_set=ps):
        p.text = f"<i>{p.text}</i>"
        p.save()
    a = record_run(make_run(owner, ps, name="<b>bold</b> & co", total_steps=2, batch_size=4))
    b = record_run(make_run(owner, ps, name="<sup>up</sup>", algorithm="grpo", total_steps=2,
                            batch_size=4))
    c = Client()
    c.force_login(owner)
    figures = [_chart(c, a, name) for name in RUN_CHARTS]
    figures.append(_chart(c, a, "heatmap", rows="1-4"))  # single prompts: their texts
    q = {"runs": f"{a.pk},{b.pk}"}
    figures.append(c.get(reverse("dashboard:compare_chart"), q).json())
    figures.append(c.get(reverse("dashboard:compare_scatter"), q).json())

    def strings(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return []

    everything = [s for fig in figures for s in strings(fig)]
    for raw in ("<b>", "<sup>", "<i>"):
        assert not [s for s in everything if raw in s], raw
    assert any("&lt;b&gt;bold&lt;/b&gt; &amp; co" in s for s in everything)
    assert any("&lt;i&gt;" in s for s in strings(figures[-3]["texts"]))


def test_heatmap_says_when_nothing_matches(client_and_run: tuple[Client, Run]) -> None:
    c, run = client_and_run
    none = _chart(c, run, "heatmap", q="no such prompt")
    assert none["data"][0]["z"] == [] and none["layout"]["title"]["subtitle"]["text"] == (
        f"none of the {len(set(PromptStep.objects.filter(run=run).values_list('prompt_id')))}"
        " prompts matches “no such prompt”")
    past = _chart(c, run, "heatmap", rows="500-600")
    assert past["data"][0]["z"] == []
    assert past["layout"]["title"]["subtitle"]["text"].startswith("no rows from 500 on")


def test_every_plotted_metric_has_a_domain() -> None:
    """pin_axis looks every plotted quantity up in METRIC_DOMAINS: a metric chart or compare
    option added without a domain fails here, not as a 500 on the run page."""
    from dashboard.charts import COMPARE_METRICS, METRIC_DOMAINS, RUN_CHARTS, X_AXES

    plotted = {k for chart in RUN_CHARTS.values() for k in chart.metrics}
    plotted |= set(COMPARE_METRICS) | {key for key, _ in X_AXES.values()}
    assert plotted - set(METRIC_DOMAINS) == set()


# --- Reinforce-Ada-Est ----------------------------------------------------------------------------

@pytest.fixture
def est_run() -> Run:
    owner = User.objects.create_user("est-owner", password="x-123456")
    return record_run(make_run(owner, make_prompt_set(name="est-set", size=8), name="est",
                               algorithm="ada-est", total_steps=6, batch_size=4,
                               budget_per_prompt=6, est_min_samples=2, est_max_samples=16))


def test_est_charts_have_titles_axes_legends_and_recorded_values(
        est_run: Run, client_and_run: tuple[Client, Run]) -> None:
    from dashboard.charts import RUN_CHARTS

    EST_CHARTS = [c.name for c in RUN_CHARTS.values() if c.section == "est"]  # noqa: N806
    c, seq_run = client_and_run
    rows = list(PromptStep.objects.filter(run=est_run).values_list(
        "step", "p_hat", "allocated", "positives", "samples"))
    for name in EST_CHARTS:
        fig = _chart(c, est_run, name)
        layout = fig["layout"]
        assert layout["title"]["text"] and layout["showlegend"] is True, name
        assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"], name
        assert all(t.get("name") for t in fig["data"]), name
        assert "annotations" not in layout, name
        # A Seq run has no estimate: the chart says so instead of plotting nothing.
        other = _chart(c, seq_run, name)
        assert other["layout"]["annotations"][0]["text"] == "not a Reinforce-Ada Est run"

    alloc = _chart(c, est_run, "est_allocation")
    last = sorted((r for r in rows if r[0] == 6), key=lambda r: r[1])
    points = _trace(alloc, "prompts of the batch")
    assert points["x"] == pytest.approx([r[1] for r in last])
    assert points["y"] == [r[2] for r in last]
    assert "step 6" in alloc["layout"]["title"]["text"]
    curve = next(t for t in alloc["data"] if t["name"].startswith("N(p) = clip("))
    # Every prompt sits on the drawn curve up to rounding (less than one sample).
    for p_hat, n in zip(points["x"], points["y"], strict=True):
        assert abs(np.interp(np.log(p_hat), np.log(curve["x"]), curve["y"]) - n) < 1.0
    assert min(curve["y"]) >= 2 and max(curve["y"]) <= 16

    cal = _chart(c, est_run, "est_calibration")
    observed = _trace(cal, "observed pass rate per p-hat bin")
    bins: dict[int, list] = {}
    for _, p_hat, _, pos, n in rows:
        bins.setdefault(min(int(p_hat * 10), 9), []).append((p_hat, pos, n))
    expected = [sum(b[1] for b in v) / sum(b[2] for b in v) for _, v in sorted(bins.items())]
    assert observed["y"] == pytest.approx(expected)
    assert observed["x"] == pytest.approx([np.mean([b[0] for b in v])
                                           for _, v in sorted(bins.items())])

    budget = _chart(c, est_run, "est_budget")
    assert _trace(budget, "samples per step")["y"] == [24] * 6  # exactly B x budget
    assert _trace(budget, "GRPO n=6: B x 6 = 24 samples")["y"] == [24] * 6
    assert _trace(budget, "most samples to one prompt")["y"] == [
        max(r[2] for r in rows if r[0] == s) for s in range(1, 7)]


def test_est_run_page_shows_est_block_and_prompt_history_shows_p_hat(
        est_run: Run, client_and_run: tuple[Client, Run]) -> None:
    c, seq_run = client_and_run
    page = c.get(reverse("dashboard:run_detail", args=[est_run.pk])).content.decode()
    for name in ("est_allocation", "est_calibration", "est_budget"):
        assert f'id="chart-{name}"' in page
    assert "Reinforce-Ada Est: where the budget went" in page
    seq_page = c.get(reverse("dashboard:run_detail", args=[seq_run.pk])).content.decode()
    assert "chart-est_allocation" not in seq_page
    ps = PromptStep.objects.filter(run=est_run).order_by("step").first()
    fig = c.get(reverse("dashboard:prompt_chart", args=[est_run.pk, ps.prompt_id])).json()
    trace = _trace(fig, "p-hat before sampling (Est)")
    history = PromptStep.objects.filter(run=est_run, prompt_id=ps.prompt_id).order_by("step")
    assert trace["x"] == [h.step for h in history]
    assert trace["y"] == pytest.approx([h.p_hat for h in history])
    assert trace["y"][0] == pytest.approx(1 / 17)
    html = c.get(reverse("dashboard:prompt_history",
                         args=[est_run.pk, ps.prompt_id])).content.decode()
    assert f"p-hat before sampling {ps.p_hat:.3f}" in html
    assert f"Est: {ps.allocated} allocated at p-hat {ps.p_hat:.3f}" in html
    seq_ps = PromptStep.objects.filter(run=seq_run).first()
    seq_fig = c.get(reverse("dashboard:prompt_chart", args=[seq_run.pk, seq_ps.prompt_id])).json()
    assert [t["name"] for t in seq_fig["data"]] == ["pass rate of its pool"]


def test_a_dapo_run_goes_through_every_platform_path() -> None:
    """A DAPO run recorded as a worker records it: several batches per step land as rounds and
    prompt-steps, every run chart draws, the run page, compare (with a GRPO run) and the report
    name it DAPO, and its step metrics carry the batches drawn."""
    from dashboard import reports, selectors
    from dashboard.charts import RUN_CHARTS

    owner = User.objects.create_user("dapo", password="x-123456")
    ps = make_prompt_set("dapo-set", size=16)
    for p in Prompt.objects.filter(prompt_set=ps):  # half the prompts never solved
        p.metadata = {"pass_rate": 0.0 if p.index % 2 else 0.5}
        p.save()
    dapo = record_run(make_run(owner, ps, name="dapo", algorithm="dapo", total_steps=3,
                               batch_size=4))
    grpo = record_run(make_run(owner, ps, name="grpo", algorithm="grpo", total_steps=3,
                               batch_size=4))
    steps = list(Step.objects.filter(run=dapo).order_by("step"))
    assert len(steps) == 3
    for s in steps:
        batches = int(s.metrics["gen_batches"])
        assert RoundStat.objects.filter(run=dapo, step=s.step).count() == batches
        assert PromptStep.objects.filter(run=dapo, step=s.step).count() == 4 * batches
        assert s.metrics["samples"] == 16 * batches
    assert any(s.metrics["gen_batches"] > 1 for s in steps)
    c = Client()
    c.force_login(owner)
    for name in RUN_CHARTS:
        _step_axis_under_the_lowest_panel(_chart(c, dapo, name), name)
    page = c.get(reverse("dashboard:run_detail", args=[dapo.pk])).content.decode()
    assert selectors.algorithm_label("dapo") == "DAPO" and "DAPO" in page
    q = {"runs": f"{dapo.pk},{grpo.pk}", "x": "samples"}
    names = [t["name"] for t in c.get(reverse("dashboard:compare_chart"), q).json()["data"]]
    assert any("dapo" in n or "DAPO" in n for n in names), names
    report = reports.build_report([dapo, grpo])
    assert [g["label"] for g in report["groups"]] == ["GRPO n=4", "DAPO"]
    assert c.get(reverse("dashboard:report") + f"?runs={dapo.pk},{grpo.pk}").status_code == 200


def test_clip_chart_says_why_it_is_flat_with_one_optimiser_step(
        client_and_run: tuple[Client, Run]) -> None:
    """With one optimiser step per training step the PPO ratio is 1 and the clip fractions are 0
    by construction: the chart says so. With two mini-batches it shows the lines alone."""
    c, run = client_and_run
    assert run.config["ppo_mini_batch_size"] == 0 and run.config["ppo_epochs"] == 1
    note = _chart(c, run, "clip")["layout"]["annotations"][0]["text"]
    assert note.startswith("one optimiser step per training step")
    owner = User.objects.get(username="owner")
    two = record_run(make_run(owner, run.prompt_set, name="two", total_steps=2, batch_size=4,
                              ppo_mini_batch_size=2))
    fig = _chart(c, two, "clip")
    assert not fig["layout"].get("annotations")
    assert [t["name"] for t in fig["data"]][:2] == ["clipped at 1 - eps_low",
                                                    "clipped at 1 + eps_high"]


def test_pods_and_dppo_pages_chart_what_was_pruned_and_the_weights_applied() -> None:
    """The pruning chart both declare (trainer/algorithms/pruning.py) draws each step's kept
    and pruned completions and the kept ones' loss weights from the recorded metrics, with its
    caption; DPPO's prompt chart is on DPPO's page only; a prompt's history shows the loss
    weights where any differs from 1 (DPPO's), not for PODS."""
    owner = User.objects.create_user("pruner", password="x-123456")
    ps = make_prompt_set("prune-set", size=8)
    dppo = record_run(make_run(owner, ps, name="dppo", algorithm="dppo", total_steps=4,
                               group_size=6))
    pods = record_run(make_run(owner, ps, name="pods", algorithm="pods", total_steps=2))
    c = Client()
    c.force_login(owner)
    for run, own in ((dppo, True), (pods, False)):
        page = c.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
        assert 'id="chart-pruning"' in page and 'id="caption-pruning"' in page
        assert ('id="chart-dppo_prompts"' in page) == own
        steps = list(Step.objects.filter(run=run).order_by("step"))
        fig = _chart(c, run, "pruning")
        for trace, key in (("kept", "kept_samples"), ("pruned", "samples_pruned"),
                           ("max over kept", "loss_weight_max")):
            assert _trace(fig, trace)["y"] == pytest.approx([s.metrics[key] for s in steps])
        assert sum(s.metrics["samples_pruned"] for s in steps) > 0
        assert (max(s.metrics["loss_weight_max"] for s in steps) > 1) == own
        sample = Sample.objects.filter(run=run).order_by("-weight", "step").first()
        html = c.get(reverse("dashboard:prompt_history",
                             args=[run.pk, sample.prompt_id])).content.decode()
        assert ("<th>loss weight</th>" in html) == own
        assert ('id="weighted-history-note"' in html) == own
    prompts = _chart(c, dppo, "dppo_prompts")
    assert _trace(prompts, "pruned by their history")["y"] == pytest.approx(
        [s.metrics["prompts_pruned"] for s in Step.objects.filter(run=dppo).order_by("step")])
