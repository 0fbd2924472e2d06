"""The run page's charts as one registry, built from the trainer's declarations: which charts a
run gets, what they say for algorithms without an exit rule, the metrics only some algorithms
record, and defaults read from the config rather than repeated."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from dashboard import charts, selectors
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Prompt, PromptSet, PromptStep, Run, Step

from trainer.algorithms import get_algorithm
from trainer.config import TrainConfig
from trainer.types import OPTIONAL_STEP_METRICS, STEP_METRICS

from .dashboard_fixtures import make_prompt_set, make_run, record_run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def _chart(c: Client, run: Run, name: str) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run.pk, name]))
    assert resp.status_code == 200, name
    return resp.json()


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t["name"] == name)


@pytest.fixture
def mixed_set() -> PromptSet:
    """Half the prompts never solved, the others half the time: DAPO draws further batches."""
    ps = make_prompt_set("reg-set", size=16)
    for p in Prompt.objects.filter(prompt_set=ps):
        p.metadata = {"pass_rate": 0.0 if p.index % 2 else 0.5}
        p.save()
    return ps


def test_every_declared_metric_is_readable_with_its_domain() -> None:
    """The charts' keys and domains are the trainer's declarations: DAPO's batches, Est's
    estimate and every common metric can be read, fractions are pinned to [0, 1]."""
    declared = {**STEP_METRICS, **OPTIONAL_STEP_METRICS,
                **get_algorithm("ada-est").step_metrics, **get_algorithm("dapo").step_metrics}
    assert set(declared) <= set(selectors.METRIC_KEYS)
    assert {"gen_batches", "signal_groups", "prompts_drawn"} <= set(selectors.METRIC_KEYS)
    assert charts.METRIC_DOMAINS["zero_adv_frac"] == (0.0, 1.0)
    assert charts.METRIC_DOMAINS["samples"] == (0.0, None)
    assert charts.METRIC_DOMAINS["p_hat_mean"] == (0.0, 1.0)  # an algorithm's own, declared
    assert charts.METRIC_DOMAINS["gen_batches"] == (0.0, None)
    assert "no_such_metric" not in selectors.METRIC_KEYS
    with pytest.raises(ValueError, match="unknown metrics"):
        selectors.step_series(1, ("no_such_metric",))


def test_every_chart_of_the_registry_draws_what_it_declares(owner: User, owner_client: Client,
                                                           mixed_set: PromptSet) -> None:
    """Each chart names the step metrics it plots; each of them is declared; every chart that
    applies to a run of each algorithm draws with a title, axis titles and named traces."""
    for chart in charts.RUN_CHARTS.values():
        assert set(chart.metrics) <= set(selectors.METRIC_KEYS), chart.name
    for algorithm in ("grpo", "dapo", "ada-balance", "ada-est", "gvm-raft"):
        run = record_run(make_run(owner, mixed_set, name=algorithm, algorithm=algorithm,
                                  total_steps=2, batch_size=4))
        page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
        for name in charts.charts_for(run):
            assert f'id="chart-{name}"' in page, (algorithm, name)
            fig = _chart(owner_client, run, name)
            assert fig["layout"]["title"]["text"], (algorithm, name)
            assert fig["layout"]["xaxis"]["title"]["text"], (algorithm, name)
            assert all(t.get("name") for t in fig["data"]), (algorithm, name)
            # A two-step run's step axis ticks at whole steps, not at "1.5".
            if fig["layout"]["xaxis"]["title"]["text"] == charts.STEP_TITLE and any(
                    t.get("x") for t in fig["data"]):
                assert fig["layout"]["xaxis"].get("dtick") == 1, (algorithm, name)
    # GVM-RAFT's last step: every prompt's second-stage samples on the rule's curve at its
    # first-stage pass rate, up to the rounding's one sample.
    dots, *curve = _chart(owner_client, run, "gvm_allocation_curve")["data"]
    assert len(dots["x"]) == 4 and len(curve) == 2
    for p, n in zip(dots["x"], dots["y"], strict=True):
        assert abs(n - np.interp(p, curve[0]["x"], curve[0]["y"])) < 1, (p, n)
    # A prompt's history names GVM-RAFT as what allocated, in the step's line and the trace.
    ps = PromptStep.objects.filter(run=run, allocated__isnull=False).first()
    html = owner_client.get(reverse("dashboard:prompt_history", args=[run.pk, ps.prompt_id])
                            ).content.decode()
    assert f"GVM-RAFT: {ps.allocated} allocated at p-hat {ps.p_hat:.3f}" in html
    assert "Est" not in html.replace("Estimated", "")
    fig = owner_client.get(reverse("dashboard:prompt_chart", args=[run.pk, ps.prompt_id])).json()
    assert "p-hat before sampling (GVM-RAFT)" in [t["name"] for t in fig["data"]]


def test_no_elimination_funnel_for_algorithms_without_an_exit_rule(
        owner: User, owner_client: Client, mixed_set: PromptSet) -> None:
    """GRPO and DAPO eliminate nothing: their funnel says "one round, no elimination" and splits
    every prompt's group by its rewards; nothing on the page says a prompt was resolved or
    eliminated in a round. Reinforce-Ada Seq keeps the funnel of rounds."""
    for algorithm in ("grpo", "dapo"):
        run = record_run(make_run(owner, mixed_set, name=f"{algorithm}-f", algorithm=algorithm,
                                  total_steps=3, batch_size=4))
        fig = _chart(owner_client, run, "funnel")
        assert fig["layout"]["title"]["text"].startswith("One round, no elimination")
        names = [t["name"] for t in fig["data"]]
        assert names == ["some right, some wrong (signal)", "all right (no signal)",
                         "all wrong (no signal)"]
        assert not any("round" in n for n in names)
        rows = PromptStep.objects.filter(run=run)
        for i, step in enumerate(Step.objects.filter(run=run).order_by("step")):
            in_step = rows.filter(step=step.step)
            assert sum(t["y"][i] for t in fig["data"]) == in_step.count()
            assert fig["data"][2]["y"][i] == in_step.filter(positives=0).count()
            assert fig["data"][1]["y"][i] == in_step.filter(negatives=0).count()
        # The all-equal groups are the ones the signal chart counts as first-round all wrong
        # or all correct (GRPO's first n samples are its whole group).
        if algorithm == "grpo":
            steps = list(Step.objects.filter(run=run).order_by("step"))
            assert fig["data"][2]["y"] == [round(s.metrics["first_round_all_wrong"] * 4)
                                           for s in steps]
        heat = _chart(owner_client, run, "heatmap")
        assert heat["eliminates"] is False
        ps = rows.first()
        history = owner_client.get(reverse("dashboard:prompt_history",
                                     args=[run.pk, ps.prompt_id])).content.decode()
        assert "one round, no exit rule" in history and "eliminated after" not in history
        hover = _chart_json(owner_client, "dashboard:prompt_chart", run.pk, ps.prompt_id)
        assert not any("exit after" in t for t in hover["data"][0]["text"])
    seq = record_run(make_run(owner, mixed_set, name="seq-f", algorithm="ada-balance",
                              total_steps=2, batch_size=4))
    fig = _chart(owner_client, seq, "funnel")
    assert fig["layout"]["title"]["text"].startswith("Elimination funnel")
    assert any(t["name"] == "resolved in round 1" for t in fig["data"])
    assert _chart(owner_client, seq, "heatmap")["eliminates"] is True


def _chart_json(c: Client, view: str, *args: int) -> dict:
    resp = c.get(reverse(view, args=list(args)))
    assert resp.status_code == 200
    return resp.json()


def test_dapo_gets_a_chart_of_its_batches_prompts_and_groups_with_signal(
        owner: User, owner_client: Client, mixed_set: PromptSet) -> None:
    dapo = record_run(make_run(owner, mixed_set, name="dapo-c", algorithm="dapo", total_steps=3,
                               batch_size=4))
    grpo = record_run(make_run(owner, mixed_set, name="grpo-c", algorithm="grpo", total_steps=1,
                               batch_size=4))
    assert "dapo_sampling" in charts.charts_for(dapo)
    assert "dapo_sampling" not in charts.charts_for(grpo)
    # Drawn by its own chart, DAPO's metrics leave nothing to the generic one.
    assert "algorithm_metrics" not in charts.charts_for(dapo)
    fig = _chart(owner_client, dapo, "dapo_sampling")
    steps = list(Step.objects.filter(run=dapo).order_by("step"))
    # Generation batches hold G = dapo_gen_batch_size prompts (0: B), not B (issue 34).
    assert _trace(fig, "batches of G = dapo_gen_batch_size prompts drawn")["y"] == [
        s.metrics["gen_batches"] for s in steps]
    assert _trace(fig, "prompts drawn")["y"] == [s.metrics["prompts_drawn"] for s in steps]
    assert _trace(fig, "groups with signal")["y"] == [s.metrics["signal_groups"] for s in steps]
    assert _trace(fig, "wanted: B = 4 groups with signal")["y"] == [4] * 3
    assert any(s.metrics["gen_batches"] > 1 for s in steps)
    assert fig["layout"]["yaxis"]["title"]["text"] == "batches drawn (batches)"


def test_entropy_chart_draws_the_token_mean_and_the_modes_aggregate_apart(
        owner: User, owner_client: Client, mixed_set: PromptSet) -> None:
    """Issue 34 item 7: two series named so no one confuses them; one axis where they share a
    unit (token-mean: the aggregate dashed over it), a panel each where they do not; a run
    older than the aggregate says so."""
    same = record_run(make_run(owner, mixed_set, name="ent-tm", algorithm="grpo",
                               total_steps=2))
    apart = record_run(make_run(owner, mixed_set, name="ent-sum", algorithm="grpo",
                                total_steps=2, loss_agg_mode="seq-mean-token-sum"))
    token_mean = "token-mean: every token weighs the same (nats per token)"
    fig = _chart(owner_client, same, "entropy")
    agg = _trace(fig, "by loss_agg_mode = token-mean, as the entropy bonus and verl's "
                      "actor/entropy (nats per token)")
    assert agg["line"]["dash"] == "dash" and _trace(fig, token_mean)
    assert "yaxis2" not in fig["layout"]
    steps = list(Step.objects.filter(run=same).order_by("step"))
    assert agg["y"] == [st.metrics["entropy_agg"] for st in steps]
    fig = _chart(owner_client, apart, "entropy")
    agg = _trace(fig, "by loss_agg_mode = seq-mean-token-sum, as the entropy bonus and verl's "
                      "actor/entropy (nats per response)")
    assert agg["yaxis"] == "y2" and _trace(fig, token_mean)["yaxis"] == "y"
    assert fig["layout"]["yaxis"]["title"]["text"] == "per token (nats)"
    assert fig["layout"]["yaxis2"]["title"]["text"] == "per response (nats)"
    for st in Step.objects.filter(run=same):  # recorded before the metric existed
        st.metrics.pop("entropy_agg")
        st.save()
    fig = charts.RUN_CHARTS["entropy"].build(same)
    assert [t["name"] for t in fig["data"]] == [token_mean]
    assert "not recorded" in fig["layout"]["annotations"][0]["text"]


def test_an_algorithms_declared_metrics_get_a_chart(owner: User, owner_client: Client,
                                                    mixed_set: PromptSet) -> None:
    """Extra step metrics an algorithm registered at run time declares, and no chart draws, are
    charted by the generic chart: one panel per unit, axes pinned to their domain, a plain
    description charted too. No edit to the dashboard."""
    import dataclasses

    import numpy as np

    from tests.trainer.test_algorithm_registry import TOY
    from trainer.advantages import signal_groups
    from trainer.algorithms import register_algorithm, unregister_algorithm
    from trainer.types import count, fraction

    def toy_metrics(config: TrainConfig, res: object, allocation: object) -> dict[str, float]:
        equal = float(np.sum(~signal_groups(res)))
        return {"toy_dropped": equal, "toy_share": 1 - equal / res.num_prompts,
                "toy_plain": 10.0}

    toy = dataclasses.replace(TOY, name="toy-units", label="Toy with units", step_metrics={
        "toy_dropped": count("groups the toy rule dropped", "groups"),
        "toy_share": fraction("share of the batch the toy rule kept"),
        "toy_plain": "declared as a plain description"}, extra_metrics=toy_metrics)
    register_algorithm(toy)
    try:
        run = record_run(make_run(owner, mixed_set, name="toy-units", algorithm=toy.name,
                                  total_steps=2, batch_size=4))
        assert {"toy_dropped", "toy_share"} <= set(selectors.METRIC_KEYS)
        assert "algorithm_metrics" in charts.charts_for(run)
        page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
        assert 'id="chart-algorithm_metrics"' in page
        fig = _chart(owner_client, run, "algorithm_metrics")
    finally:
        unregister_algorithm(toy.name)
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert _trace(fig, "toy dropped")["y"] == [s.metrics["toy_dropped"] for s in steps]
    assert _trace(fig, "toy share")["y"] == [s.metrics["toy_share"] for s in steps]
    assert _trace(fig, "toy plain")["y"] == [10.0, 10.0]
    assert fig["layout"]["title"]["text"].startswith("Toy with units")
    titles = [fig["layout"][k]["title"]["text"] for k in sorted(fig["layout"])
              if k.startswith("yaxis")]
    assert titles == ["toy dropped (groups)", "toy share (0-1)", "toy plain"]
    assert fig["layout"]["yaxis2"]["range"] == pytest.approx([-0.02, 1.02])
    assert fig["layout"]["yaxis"]["rangemode"] == "tozero"


def test_budget_chart_gives_samples_and_tokens_axes_of_their_own(
        owner: User, owner_client: Client, mixed_set: PromptSet) -> None:
    """Tokens that grow with samples drew one line over the other on a shared, overlaid axis:
    each quantity has its own panel now, none overlays another."""
    run = record_run(make_run(owner, mixed_set, name="budget", total_steps=2, batch_size=4))
    fig = _chart(owner_client, run, "budget")
    axes = {k: v for k, v in fig["layout"].items() if k.startswith("yaxis")}
    assert len(axes) == 4 and not any("overlaying" in a for a in axes.values())
    domains = sorted(tuple(a["domain"]) for a in axes.values())
    assert all(lo < hi for lo, hi in domains)
    assert all(a[1] <= b[0] for a, b in zip(domains, domains[1:], strict=False))
    by_axis = {t.get("yaxis", "y"): t["name"] for t in fig["data"]
               if t["name"] in ("tokens per step", "samples per step")}
    assert len(by_axis) == 2


def test_log_axis_ticks_read_as_numbers() -> None:
    """The Est allocation's log axis was labelled "5, 0.1, 2, 5, 1" (Plotly's minor labels):
    every tick now reads as its value, in order."""
    for lo in (1e-4, 0.003, 0.04, 0.5):
        ticks = charts.log_ticks(lo, 1.0)
        values = [float(t) for t in ticks["ticktext"]]
        assert values == pytest.approx(ticks["tickvals"])
        assert values == sorted(values) and values[-1] == 1.0 and values[0] >= lo


def test_est_charts_read_defaults_from_the_config(owner: User, owner_client: Client,
                                                  mixed_set: PromptSet) -> None:
    """A run stored before the Est fields existed draws its charts with the config's defaults,
    not with numbers the chart repeats."""
    run = record_run(make_run(owner, mixed_set, name="est-old", algorithm="ada-est",
                              total_steps=2, batch_size=4))
    run.config = {k: v for k, v in run.config.items()
                  if k not in ("est_min_samples", "est_max_samples", "budget_per_prompt")}
    run.save(update_fields=["config"])
    default = TrainConfig()
    fig = _chart(owner_client, run, "est_allocation")
    curve = next(t for t in fig["data"] if t["name"].startswith("N(p) = clip("))
    assert curve["name"].endswith(f", {default.est_min_samples}, {default.est_max_samples})")
    assert any(t["name"] == f"uniform: {default.budget_per_prompt} per prompt "
               f"(GRPO n={default.budget_per_prompt})" for t in fig["data"])


def _config_default_reads(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """``x.get("<config field>", default)`` calls whose default is not the config's own."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in names):
            continue
        default = node.args[1]
        if (isinstance(default, ast.Attribute) and default.attr == node.args[0].value
                and isinstance(default.value, ast.Name) and default.value.id == "TrainConfig"):
            continue  # the config's own default
        out.append((node.lineno, node.args[0].value))
    return out


def test_no_module_repeats_a_config_default() -> None:
    """``cfg.get("est_min_samples", 2)`` repeats a default that lives in TrainConfig and drifts
    when it changes. Platform and worker code read stored configs through
    ``TrainConfig.from_stored`` (or name ``TrainConfig.<field>``), and templates never give a
    config field a ``|default``."""
    names = {f.name for f in fields(TrainConfig)}
    found = []
    for folder in ("platform", "workers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for line, name in _config_default_reads(ast.parse(path.read_text()), names):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    pattern = re.compile(r"config\.(\w+)\|default")
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for m in pattern.finditer(path.read_text()):
            if m.group(1) in names:
                found.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert found == []


def test_a_chart_registered_later_takes_its_place(owner: User, owner_client: Client,
                                                  mixed_set: PromptSet) -> None:
    """Another module adds a chart as one registry entry: it is listed where it asked to be,
    drawn by the endpoint, shown on the page of the runs it applies to only."""
    run = record_run(make_run(owner, mixed_set, name="later", total_steps=2, batch_size=4))
    entry = charts.metric_chart_entry("verifier_errors", charts.MetricChart(
        "Verifier errors", "responses scored 0 after a verifier error (responses)",
        (("verifier_errors", "verifier errors"),)),
        applies_to=lambda ctx: ctx.config.backend == "simulated")
    before = dict(charts.RUN_CHARTS)
    try:
        charts.register_chart(entry, after="funnel")
        names = list(charts.RUN_CHARTS)
        assert names[names.index("funnel") + 1] == "verifier_errors"
        assert charts.charts_for(run)[:3] == ["rewards", "funnel", "verifier_errors"]
        fig = _chart(owner_client, run, "verifier_errors")
        assert _trace(fig, "verifier errors")["y"] == [
            s.metrics["verifier_errors"] for s in Step.objects.filter(run=run).order_by("step")]
        with pytest.raises(ValueError, match="no chart"):
            charts.register_chart(entry, after="no-such-chart")
    finally:
        charts.RUN_CHARTS.clear()
        charts.RUN_CHARTS.update(before)


def test_step_ticks_are_whole_on_short_runs_and_automatic_on_long_ones() -> None:
    def fig(xs: list, title: str = charts.STEP_TITLE) -> dict:
        return {"data": [{"x": xs, "y": [0] * len(xs)}],
                "layout": {"xaxis": {"title": {"text": title}}}}

    assert charts.whole_steps(fig([1, 2, 3]))["layout"]["xaxis"]["dtick"] == 1
    assert charts.whole_steps(fig([4]))["layout"]["xaxis"]["dtick"] == 1
    # Ten steps or more: Plotly's own ticks fall on whole steps already.
    assert "dtick" not in charts.whole_steps(fig(list(range(1, 41))))["layout"]["xaxis"]
    # Bucket means of many steps, another axis, categories: left to Plotly.
    assert "dtick" not in charts.whole_steps(fig([1.5, 2.5]))["layout"]["xaxis"]
    assert "dtick" not in charts.whole_steps(fig([1, 2], "rank"))["layout"]["xaxis"]
    assert "dtick" not in charts.whole_steps(fig(["rank 0", "rank 1"]))["layout"]["xaxis"]


def test_kl_in_reward_charts_draw_the_kl_and_its_coefficient(owner: User,
                                                             owner_client: Client) -> None:
    """A run with the KL in the reward gets its two charts, drawn from its steps' reward_kl,
    kl and reward_kl_coef (issue 34 item 6); a run without it gets neither."""
    ps = make_prompt_set("kl-set", size=4)
    config = TrainConfig(backend="hf", algorithm="grpo", use_kl_in_reward=True,
                         kl_ctrl_type="adaptive", total_steps=2).validate()
    run = Run.objects.create(owner=owner, name="kl", algorithm="grpo", config=config.to_dict(),
                             prompt_set=ps, model=config.model, seed=0, total_steps=2)
    for step, (kl, coef) in enumerate([(0.0, 0.001), (0.25, 0.0012)], start=1):
        Step.objects.create(run=run, step=step, metrics={"reward_kl": kl, "reward_kl_coef": coef,
                                                         "kl": 0.0})
    assert {"kl_reward", "kl_reward_coef"} <= set(charts.charts_for(run))
    fig = _chart(owner_client, run, "kl_reward")
    assert _trace(fig, "mean over responses of their token-mean KL (kl_penalty)")["y"] == \
        [0.0, 0.25]
    fig = _chart(owner_client, run, "kl_reward_coef")
    assert _trace(fig, "the coefficient each step used")["y"] == [0.001, 0.0012]
    plain = make_run(owner, ps, name="plain", algorithm="grpo")
    assert not {"kl_reward", "kl_reward_coef"} & set(charts.charts_for(plain))


def test_vade_charts_its_selection_and_each_prompts_posterior(owner: User, owner_client: Client,
                                                              mixed_set: PromptSet) -> None:
    """VADE's run page draws its declared chart of the selected prompts' posteriors against the
    rest, with its caption; a prompt's history charts its posterior mean before each step's
    sampling (its records' p_hat, nothing allocated)."""
    run = record_run(make_run(owner, mixed_set, name="vade", algorithm="vade", total_steps=3,
                              batch_size=4))
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert 'id="chart-vade_selection"' in page and 'id="caption-vade_selection"' in page
    fig = _chart(owner_client, run, "vade_selection")
    steps = list(Step.objects.filter(run=run).order_by("step"))
    for key, name in (("vade_selected_mean", "selected: posterior mean"),
                      ("vade_selected_low", "selected: 5% quantile"),
                      ("vade_rest_mean", "not selected: posterior mean"),
                      ("vade_selected_score", "selected")):
        assert _trace(fig, name)["y"] == pytest.approx([s.metrics[key] for s in steps]), key
    assert fig["layout"]["yaxis"]["title"]["text"] == "posterior pass rate (0-1)"
    assert fig["layout"]["title"]["text"].startswith("VADE: posterior pass rate")
    ps = PromptStep.objects.filter(run=run, step=2).first()
    history = PromptStep.objects.filter(run=run, prompt_id=ps.prompt_id).order_by("step")
    assert all(h.p_hat is not None and h.allocated is None for h in history)
    pfig = owner_client.get(reverse("dashboard:prompt_chart", args=[run.pk, ps.prompt_id])).json()
    trace = _trace(pfig, "posterior mean before sampling (VADE)")
    assert trace["y"] == pytest.approx([h.p_hat for h in history])
    html = owner_client.get(reverse("dashboard:prompt_history",
                                    args=[run.pk, ps.prompt_id])).content.decode()
    assert f"VADE: posterior mean of the pass rate before sampling {ps.p_hat:.3f}" in html
    assert "allocated" not in html and "Est" not in html.replace("Estimated", "")
