"""The run page's common charts, in page order: reward, the elimination funnel (or "one round,
no elimination"), the sampling budget, the charts of common step metrics, an algorithm's
declared metrics that no other chart draws, evaluation, the prompt x step heatmap; and the
prompt history's pass-rate chart."""

from __future__ import annotations

from typing import Any

from experiments.models import Run

from trainer import formatting as fmt
from trainer.config import TrainConfig

from .. import heatmap as heatmap_data
from .. import metrics, selectors
from ..downsample import bucket_mean
from .drawing import (
    MAX_POINTS,
    PALETTE,
    STEP_TITLE,
    Fig,
    base_layout,
    empty_note,
    line_trace,
    pin_axis,
    plotly_text,
    run_config,
    stack_panels,
    whole_steps,
)
from .metric_charts import MetricChart, panels_chart
from .registry import RUN_CHARTS, Chart, ChartRun, metric_chart_entry, no_points, register_chart


def rewards(run: Run, max_points: int = MAX_POINTS) -> Fig:
    s = selectors.step_series(run.pk)
    data = [
        line_trace("real reward (first n samples)", s["step"], s["real_reward"], PALETTE[0],
                   max_points),
        line_trace("kept-batch reward", s["step"], s["kept_reward"], PALETTE[1], max_points),
    ]
    layout = base_layout("Reward per step", STEP_TITLE, "mean reward (0-1)")
    pin_axis(layout["yaxis"], "real_reward", "kept_reward")
    return empty_note({"data": data, "layout": layout}, s["step"])


def funnel(run: Run, max_points: int = MAX_POINTS) -> Fig:
    """Where every prompt of the step went. An algorithm with an exit rule: prompts still active
    after each round (top, a ribbon per round) and where each ended (bottom): resolved in round
    r, or unresolved missing positives / negatives. One without (GRPO, DAPO, Est): one round,
    no elimination; each prompt's group split by its rewards (some right and some wrong, all
    right, all wrong), since only mixed groups carry a gradient."""
    if not metrics.algorithm_eliminates(run.algorithm):
        return _one_round(run, max_points)
    r = selectors.round_series(run.pk)
    s = selectors.step_series(run.pk, ("unresolved_missing_pos", "unresolved_missing_neg"))
    steps = r["steps"]
    data: list[dict[str, Any]] = []
    batch = run_config(run).batch_size
    # Drawn from the last round to the first so each round's band stacks on the smaller one
    # after it: the ribbon narrows as prompts leave.
    for rnd in range(r["max_round"], 0, -1):
        ys = [r["active"].get((st, rnd), 0) - r["finished"].get((st, rnd), 0)
              if (st, rnd) in r["active"] else 0 for st in steps]
        data.append(line_trace(f"active after round {rnd}", steps, ys,
                               PALETTE[(rnd - 1) % len(PALETTE)], max_points,
                               fill="tozeroy" if rnd == r["max_round"] else "tonexty", yaxis="y2",
                               legendgroup="active"))
    for rnd in range(1, r["max_round"] + 1):
        ys = [r["finished"].get((st, rnd), 0) for st in steps]
        x, y = bucket_mean(steps, ys, max_points)
        data.append({"type": "bar", "name": f"resolved in round {rnd}", "x": x, "y": y,
                     "marker": {"color": PALETTE[(rnd - 1) % len(PALETTE)]},
                     "legendgroup": "resolved"})
    for key, name, color in (
            ("unresolved_missing_pos", "unresolved: missing positives", "#999999"),
            ("unresolved_missing_neg", "unresolved: missing negatives", "#444444")):
        x, y = bucket_mean(s["step"], [v or 0 for v in s[key]], max_points)
        data.append({"type": "bar", "name": name, "x": x, "y": y, "marker": {"color": color},
                     "legendgroup": "unresolved"})
    layout = base_layout(f"Elimination funnel (batch B = {fmt.count(batch, 'prompt')})",
                         STEP_TITLE, "outcome (prompts)", barmode="stack", bargap=0)
    layout["yaxis"]["domain"] = [0, 0.45]
    pin_axis(layout["yaxis"], "outcome")
    layout["yaxis2"] = pin_axis({"title": {"text": "still active (prompts)"},
                                 "domain": [0.55, 1], "anchor": "x"}, "active")
    layout["height"] = 520
    return empty_note({"data": data, "layout": layout}, steps)


# Colours of the reward split: mixed groups carry the signal, all-equal ones none.
SPLIT_COLORS = {"mixed": PALETTE[2], "all_right": PALETTE[5], "all_wrong": "#444444"}


def _one_round(run: Run, max_points: int) -> Fig:
    """The funnel of an algorithm without an exit rule: nothing is eliminated, every prompt is
    sampled once per step (DAPO: once per batch drawn). What tells it apart from an adaptive
    run is how many of those groups came back all right or all wrong."""
    s = selectors.reward_split_series(run.pk)
    config = run_config(run)
    data = []
    for key, name in (("mixed", "some right, some wrong (signal)"),
                      ("all_right", "all right (no signal)"),
                      ("all_wrong", "all wrong (no signal)")):
        x, y = bucket_mean(s["step"], s[key], max_points)
        data.append({"type": "bar", "name": name, "x": x, "y": y,
                     "marker": {"color": SPLIT_COLORS[key]}})
    title = (f"One round, no elimination (batch B = {fmt.count(config.batch_size, 'prompt')}): "
             f"each prompt's group by its rewards")
    layout = base_layout(title, STEP_TITLE, "prompts sampled (prompts)", barmode="stack",
                         bargap=0)
    pin_axis(layout["yaxis"], "prompts")
    layout["height"] = 520
    fig = empty_note({"data": data, "layout": layout}, s["step"])
    if s["step"]:
        fig["layout"]["annotations"] = [{
            "text": "this algorithm has no exit rule: no prompt is retired early",
            "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 1.02,
            "yanchor": "bottom"}]
    return fig


def budget(run: Run, max_points: int = MAX_POINTS) -> Fig:
    """Samples and tokens, per step and cumulative, each on an axis of its own (on a shared
    axis, tokens that grow in step with samples would draw one line over the other)."""
    s = selectors.step_series(run.pk)
    bxn = selectors.group_bxn(run)
    steps = s["step"]
    data = [
        line_trace("samples per step", steps, s["samples"], PALETTE[0], max_points),
        line_trace(f"GRPO budget B x n = {fmt.count(bxn, 'sample')}", steps, [bxn] * len(steps),
                   "#888888", max_points, line={"color": "#888888", "dash": "dash", "width": 1.5}),
        line_trace("tokens per step", steps, s["tokens"], PALETTE[1], max_points, yaxis="y2"),
        line_trace("cumulative samples", steps, s["cum_samples"], PALETTE[0], max_points,
                   yaxis="y3", line={"color": PALETTE[0], "width": 2.5}),
        line_trace("cumulative GRPO budget", steps, [bxn * st for st in steps], "#888888",
                   max_points, yaxis="y3", line={"color": "#888888", "dash": "dot", "width": 2}),
        line_trace("cumulative tokens", steps, s["cum_tokens"], PALETTE[1], max_points,
                   yaxis="y4", line={"color": PALETTE[1], "width": 2.5}),
    ]
    layout = base_layout("Sampling budget", STEP_TITLE, "samples per step")
    # Counts start at zero: a backend that reports no tokens draws a flat line at 0, not at an
    # arbitrary mid-axis.
    stack_panels(layout, [pin_axis({"title": {"text": title}, "tickformat": "~s"}, key)
                          for title, key in (("samples per step", "samples"),
                                             ("tokens per step", "tokens"),
                                             ("cumulative samples", "cum_samples"),
                                             ("cumulative tokens", "cum_tokens"))],
                 legend_items=len(data))
    return empty_note({"data": data, "layout": layout}, steps)


def _clip_note(fig: Fig, s: dict[str, list[Any]], config: TrainConfig) -> None:
    if s["step"] and config.optimizer_steps == 1:
        # One optimiser step per training step: the ratio is exactly 1, so nothing can clip.
        # Zero lines are then the configuration, not a measurement worth reading.
        fig["layout"]["annotations"] = [{
            "text": "one optimiser step per training step: the ratio is 1, nothing clips<br>"
                    "(more mini-batches or epochs engage clipping; docs/paper-fidelity.md)",
            "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.6}]


def _revisits_note(fig: Fig, s: dict[str, list[Any]], config: TrainConfig) -> None:
    if s["step"] and all(v is None for v in s["prompts_revisited"]):
        fig["layout"]["annotations"] = [{
            "text": "not recorded: the run is older than this metric", "showarrow": False,
            "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]



def _panels_by_unit(keys: list[str]) -> list[tuple[str, list[str]]]:
    units: dict[str, list[str]] = {}
    for key in keys:
        units.setdefault(metrics.metric(key).unit, []).append(key)
    return list(units.items())



def _axis_title(unit: str, keys: list[str]) -> str:
    words = metrics.label(keys[0]) if len(keys) == 1 else "value"
    return f"{words} ({unit})" if unit else words


def _drawn_elsewhere(ctx: ChartRun) -> set[str]:
    return {k for c in RUN_CHARTS.values() if c.name != "algorithm_metrics" and ctx.shows(c)
            for k in c.metrics}


def _own_metrics(ctx: ChartRun) -> list[str]:
    """The algorithm's declared extra metrics that no other chart of its page draws."""
    elsewhere = _drawn_elsewhere(ctx)
    return [k for k in ctx.algorithm_metrics if k not in elsewhere]


def algorithm_metrics_chart(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """Every extra step metric the run's algorithm declares that no other chart draws, one panel
    per unit: an algorithm added to the registry gets its own metrics charted with no edit
    here."""
    keys = _own_metrics(ChartRun.of(run))
    s = selectors.step_series(run.pk, tuple(keys))
    panels = [(_axis_title(unit, ks), [(k, metrics.label(k)) for k in ks])
              for unit, ks in _panels_by_unit(keys)]
    label = selectors.algorithm_label(run.algorithm)
    return panels_chart(f"{plotly_text(label)}: the step metrics it records", panels, s,
                        max_points)



def evaluation(run: Run) -> Fig:
    e = selectors.eval_series(run.pk)
    names = {"greedy_accuracy": "greedy accuracy"}
    data = [{"type": "scatter", "mode": "lines+markers", "name": plotly_text(names.get(k, k)),
             "x": e["step"], "y": e[k], "line": {"color": PALETTE[i % len(PALETTE)]}}
            for i, k in enumerate(k for k in e if k != "step")]
    layout = base_layout("Held-out evaluation", STEP_TITLE, "fraction of eval prompts (0-1)")
    pin_axis(layout["yaxis"], "eval")
    fig = empty_note({"data": data, "layout": layout}, e["step"])
    if not e["step"]:
        fig["layout"]["annotations"][0]["text"] = (
            "no evaluation yet (needs an eval set and eval_every > 0)")
    return fig


def heatmap(run: Run, *, sort: str = "samples", query: str = "",
            rows: tuple[int, int] | None = None) -> Fig:
    """Samples per prompt and step for every prompt the run sampled: rows are prompts (sorted by
    ``sort``, filtered by ``query``, positions ``rows`` of that list) or, when they outnumber
    the pixels, bins of consecutive rows (mean samples per appearance). The subtitle says which.

    Per cell the hover needs the appearances, the unresolved ones and the latest exit round;
    they travel as compact integer matrices that charts.js turns into hover text (as strings
    they would triple the payload). ``row_ranges`` lets a click on a bin zoom into its rows."""
    v = heatmap_data.view(run, sort=sort, query=query, rows=rows)
    width = v.width
    xtitle = STEP_TITLE + (f" ({width} steps per column)" if width > 1 else "")
    step_hover = "step %{x}" if width == 1 else f"steps around %{{x}} ({width} per column)"
    who = "prompt %{y}" if v.bin_size == 1 else f"prompts at rows %{{y}} ({v.bin_size} per bin)"
    most = run_config(run).max_samples_per_prompt
    data = [{
        "type": "heatmap", "name": "samples spent", "x": v.x, "y": v.labels, "z": v.z,
        "hovertemplate": f"{who}, {step_hover}<br>%{{text}}<extra></extra>",
        "colorscale": "Viridis", "hoverongaps": False, "xgap": 0, "ygap": 0,
        # The colour scale spans what a prompt can spend in a step, so a run where every
        # prompt spends the maximum reads "32 of 32", not an autoscaled 31.6-32.4.
        "zmin": 0, "zmax": max(most, 1),
        "colorbar": {"title": {"text": "samples per step" + (" (bin mean)"
                                                             if v.bin_size > 1 else "")}},
    }]
    title = "Samples spent per prompt and step"
    title += " (click a bin: zoom into its rows)" if v.bin_size > 1 else (
        " (click a cell: prompt history)")
    ylabel = ("prompt (index in set)" if v.bin_size == 1
              else f"rows of prompts ({heatmap_data.SORTS.get(v.sort, v.sort)})")
    layout = base_layout(title, xtitle, ylabel, hovermode="closest")
    layout["title"]["subtitle"] = {"text": plotly_text(heatmap_data.describe(v))}
    # Room for the subtitle above and for row labels such as "1,993–2,000" on the left.
    layout["margin"].update(t=80, l=110)
    layout["yaxis"].update(type="category", autorange="reversed", fixedrange=True)
    nrows = len(v.labels)
    per_row = max(heatmap_data.MIN_ROW_PX, min(14, 900 // max(nrows, 1)))
    layout["height"] = max(320, per_row * nrows + 170)
    # Heatmaps have no legend entries; the colour bar is their legend.
    return {"data": data, "layout": layout, "prompt_ids": v.prompt_ids,
            "texts": [plotly_text(t[:80]) for t in v.texts], "counts": v.counts,
            "unresolved": v.unresolved, "exit_rounds": v.exit_rounds,
            "row_ranges": v.row_ranges, "bin_size": v.bin_size,
            # Without an exit rule a prompt's one round says nothing of an exit.
            "eliminates": metrics.algorithm_eliminates(run.algorithm)}


def prompt_pass_rate(run: Run, prompt_id: int) -> Fig:
    p = selectors.prompt_pass_rates(run.pk, prompt_id)
    eliminates = metrics.algorithm_eliminates(run.algorithm)
    hover = [fmt.count(n, "sample") + (
        " (allocated)" if a is not None else
        "" if not eliminates else
        f", exit after round {e}" if e is not None else ", unresolved")
        for n, e, a in zip(p["samples"], p["exit_round"], p["allocated"], strict=True)]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "pass rate of its pool",
             "x": p["step"], "y": p["pass_rate"], "text": hover,
             "hovertemplate": "step %{x}: %{y:.2f}<br>%{text}<extra></extra>",
             "line": {"color": PALETTE[0]}}]
    if any(v is not None for v in p["p_hat"]):
        data.append(est_p_hat_trace(p["step"], p["p_hat"],
                                    any(a is not None for a in p["allocated"]),
                                    metrics.algorithm_short_label(run.algorithm)))
    layout = base_layout("Estimated pass rate of this prompt", STEP_TITLE,
                         "positives / samples (0-1)", hovermode="closest")
    pin_axis(layout["yaxis"], "pass_rate")
    return whole_steps(empty_note({"data": data, "layout": layout}, p["step"]))



def est_p_hat_trace(steps: list[int], p_hat: list[float | None], allocated: bool = True,
                    label: str = "Est") -> dict[str, Any]:
    """p-hat per step on the prompt-history chart, next to the pass rate observed that step:
    the estimate an allocation came from (``allocated``: Est's, GVM-RAFT's first stage) or a
    posterior mean that chose the prompt (VADE's); ``label`` names the algorithm."""
    name = (f"p-hat before sampling ({label})" if allocated
            else f"posterior mean before sampling ({label})")
    return {"type": "scatter", "mode": "lines+markers", "name": name,
            "x": steps, "y": p_hat, "hovertemplate": "step %{x}: p-hat %{y:.3f}<extra></extra>",
            "line": {"color": PALETTE[1], "dash": "dot"}, "marker": {"symbol": "diamond"}}



# --- the entries, in page order (an algorithm's declared charts go after the one they name) ----

def _backend_is_vllm(ctx: ChartRun) -> bool:
    # The rollout/policy gap exists where a separate engine samples; elsewhere the rollout is
    # the policy itself.
    return ctx.config.backend == "vllm"


def _streaming(ctx: ChartRun) -> bool:
    # Only the streaming scheduler aborts requests as a matter of course.
    return ctx.config.scheduler == "streaming"


def _discards(ctx: ChartRun) -> bool:
    # Streaming aborts requests, speculative early rounds abort the rounds of prompts that
    # exited; the other schedulers pool every response they draw.
    return _streaming(ctx) or (ctx.eliminates and ctx.config.early_rounds_mode == "speculative")


# The unit of the entropy aggregated by each loss_agg_mode (trainer.loss.agg_loss): a mean over
# tokens, a mean over responses of their token sums, or that over max_new_tokens.
ENTROPY_AGG_UNITS = {"token-mean": "nats per token", "seq-mean-token-mean": "nats per token",
                     "seq-mean-token-sum": "nats per response",
                     "seq-mean-token-sum-norm": "nats per response / max_new_tokens"}
ENTROPY_METRICS = ("entropy", "entropy_agg")


def entropy(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """The policy's entropy over the kept responses, two ways: the token-mean (every token
    weighs the same whatever the run's loss_agg_mode) and the mode's own aggregate (what the
    entropy bonus uses, and what verl logs as actor/entropy). Where the two share a unit they
    share an axis (the aggregate dashed: under token-mean the lines coincide); else each gets
    a panel with its unit. A run older than the aggregate shows the token-mean alone, saying
    so."""
    mode = run_config(run).loss_agg_mode
    s = selectors.step_series(run.pk, ENTROPY_METRICS)
    unit = ENTROPY_AGG_UNITS.get(mode, "nats")
    token_mean = ("entropy", "token-mean: every token weighs the same (nats per token)")
    agg = ("entropy_agg", f"by loss_agg_mode = {mode}, as the entropy bonus and verl's "
                          f"actor/entropy ({unit})")
    recorded = any(v is not None for v in s["entropy_agg"])
    if not recorded:
        panels = [("entropy (nats per token)", [token_mean])]
    elif unit == "nats per token":
        panels = [("entropy (nats per token)", [token_mean, agg])]
    else:
        # A panel's title fits its height (PANEL_PX): the legend says which figure is which.
        panels = [("per token (nats)", [token_mean]),
                  (f"{unit.removeprefix('nats ')} (nats)", [agg])]
    fig = panels_chart("Policy entropy: token-mean and by loss_agg_mode", panels, s,
                       max_points)
    for trace in fig["data"]:
        if trace["name"] == agg[1] and len(panels) == 1:
            trace["line"] = {**trace["line"], "dash": "dash", "width": 2.5}
    if s["step"] and not recorded:
        fig["layout"]["annotations"] = [{
            "text": "by loss_agg_mode: not recorded (the run is older than that metric)",
            "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.95}]
    return fig


def _kl_in_reward(ctx: ChartRun) -> bool:
    # reward_kl and reward_kl_coef exist on the steps of runs with the KL in the reward only.
    return bool(ctx.config.use_kl_in_reward)


def _early_rounds(ctx: ChartRun) -> bool:
    # A prompt's next round can only go in early where there is a next round.
    return ctx.eliminates and ctx.config.early_rounds_mode != "off"


for _chart in (
    Chart("rewards", lambda run, max_points=MAX_POINTS, **_: rewards(run, max_points),
          metrics=("real_reward", "kept_reward")),
    Chart("funnel", lambda run, max_points=MAX_POINTS, **_: funnel(run, max_points),
          metrics=("unresolved_missing_pos", "unresolved_missing_neg"), tall=True),
    Chart("budget", lambda run, max_points=MAX_POINTS, **_: budget(run, max_points),
          metrics=("samples", "tokens"), tall=True),
    metric_chart_entry("signal", MetricChart("Signal collapse", "fraction of prompts (0-1)", (
        ("zero_adv_frac", "kept groups with zero advantage"),
        ("first_round_all_correct", "first round all correct"),
        ("first_round_all_wrong", "first round all wrong")))),
    # Within an epoch only DAPO's further batches revisit a prompt; a revisit is a prompt the
    # policy was already trained on, so reward per sample is no longer on unseen prompts.
    metric_chart_entry("revisits", MetricChart(
        "Prompts revisited (drawn by an earlier step too)", "prompts per step (prompts)",
        (("prompts_revisited", "prompts an earlier step drew"),), note=_revisits_note)),
    Chart("entropy", entropy, metrics=ENTROPY_METRICS),
    metric_chart_entry("clip", MetricChart("PPO clip fractions", "fraction of tokens (0-1)", (
        ("clip_frac_low", "clipped at 1 - eps_low"),
        ("clip_frac_high", "clipped at 1 + eps_high"),
        ("dual_clip_frac", "capped at -A x c (dual-clip)")), note=_clip_note)),
    metric_chart_entry("kl_reward", MetricChart(
        "KL to the reference in the reward (use_kl_in_reward)", "per token (nats)",
        (("reward_kl", "mean over responses of their token-mean KL (kl_penalty)"),
         ("kl", "KL in the loss (kl_loss_type; 0 without kl_coef)"))),
        applies_to=_kl_in_reward),
    metric_chart_entry("kl_reward_coef", MetricChart(
        "Coefficient of the KL in the reward (kl_ctrl_type)", "coefficient",
        (("reward_kl_coef", "the coefficient each step used"),), exponent_axis=True),
        applies_to=_kl_in_reward),
    metric_chart_entry("length", MetricChart("Response length", "mean response length (tokens)",
                                             (("response_length", "every response drawn"),
                                              ("kept_response_length",
                                               "responses kept for the update")))),
    metric_chart_entry("discarded", MetricChart(
        "Discarded tokens (aborted, or finished after their prompt stopped)",
        "response tokens per step (tokens)",
        (("tokens_discarded", "tokens generated, then discarded"),)), applies_to=_discards),
    metric_chart_entry("early_rounds", MetricChart(
        "Early rounds (a prompt's next round drawn before its round was decided)",
        "rounds per step (rounds)",
        (("early_rounds_started", "started early"),
         ("early_rounds_discarded", "discarded: the prompt exited"))),
        applies_to=_early_rounds),
    metric_chart_entry("early_rounds_saved", MetricChart(
        "Time saved by early rounds (the most helped prompt's head start)",
        "seconds per step (s; simulated on the simulated backend)",
        (("early_rounds_saved_s", "head start of the most helped prompt"),)),
        applies_to=_early_rounds),
    metric_chart_entry("timing", MetricChart("Step time", "seconds per step (s)", (
        ("time_generation", "generation"), ("time_scoring", "scoring"),
        ("time_update", "update"), ("time_sync", "weight sync")), stacked=True)),
    metric_chart_entry("rollout", MetricChart(
        "Rollout vs policy log-probs (vllm engine vs trained policy)",
        "|log-prob difference| per token (nats)", (
            ("rollout_logprob_diff_mean", "mean over kept tokens"),
            ("rollout_logprob_diff_max", "max over kept tokens")), exponent_axis=True),
        applies_to=_backend_is_vllm),
    Chart("algorithm_metrics", algorithm_metrics_chart,
          applies_to=lambda ctx: bool(_own_metrics(ctx)), tall=True),
    Chart("eval", no_points(evaluation), full_resolution=True),
    Chart("heatmap", lambda run, max_points=MAX_POINTS, **options: heatmap(run, **options),
          section="heatmap", full_resolution=True),
):
    register_chart(_chart)
del _chart
