"""Plotly figures (plain dicts) for the chart JSON endpoints.

Figures are built as dicts rather than with ``plotly.graph_objects``: the endpoints are polled
while a run trains, and validating every trace object costs more than the query. Every figure has a
title, axis titles with units and a legend, which the endpoint tests check.
"""

from __future__ import annotations

import dataclasses
import html
import math
import statistics
from collections import defaultdict
from typing import Any

import numpy as np
from experiments.models import Run

from trainer.algorithms import get_algorithm, is_algorithm
from trainer.allocation import ALLOCATION_WEIGHTS
from trainer.config import TrainConfig

from . import heatmap as heatmap_data
from . import selectors
from .downsample import bucket_mean, minmax

# The most points a line keeps (min/max down-sampling). A request's ``points`` is rounded down to a
# power of two within POINT_LEVELS: the chart cache holds one entry per value, so the values a
# client can ask for must be few.
POINT_LEVELS = tuple(2**k for k in range(2, 13))  # 4 ... 4096
MAX_POINTS = 1024
Fig = dict[str, Any]


def points_level(requested: int | None) -> int:
    """``requested`` rounded down to the nearest of POINT_LEVELS (MAX_POINTS when None)."""
    if requested is None:
        return MAX_POINTS
    return max([lvl for lvl in POINT_LEVELS if lvl <= requested] or [POINT_LEVELS[0]])

# Colour-blind-safe palette (Okabe-Ito), stable per trace name so charts agree with each other.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
           "#000000"]

# The domain of every quantity a chart plots: (lowest, highest), None where unbounded. An axis
# that plots only bounded quantities is pinned to their domain, so a flat series (every reward
# 0) sits at 0 on a 0-1 axis instead of mid-way on an autoscaled -1..1; counts start at 0.
FRACTION = (0.0, 1.0)
COUNT = (0.0, None)
METRIC_DOMAINS: dict[str, tuple[float | None, float | None]] = {
    **dict.fromkeys(("real_reward", "kept_reward", "reward_all", "zero_adv_frac",
                     "first_round_all_correct", "first_round_all_wrong", "clip_frac_low",
                     "clip_frac_high", "dual_clip_frac", "pass_rate", "eval"), FRACTION),
    **dict.fromkeys(("samples", "tokens", "cum_samples", "cum_tokens", "entropy",
                     "response_length", "kept_response_length", "tokens_discarded",
                     "time_generation", "time_scoring", "time_update",
                     "time_step", "time_sync", "rollout_logprob_diff_mean",
                     "rollout_logprob_diff_max", "unresolved", "unresolved_missing_pos",
                     "unresolved_missing_neg", "grad_norm", "active", "outcome", "step",
                     "wall_seconds", "samples_per_step", "prompts"), COUNT),
    "policy_loss": (None, None),
}


def pin_axis(axis: dict[str, Any], *metrics: str) -> dict[str, Any]:
    """Fix ``axis`` to the domain its metrics share: a bounded one is the range (with 2% room so
    a line at either end stays visible), one bounded below starts the axis there."""
    domains = {METRIC_DOMAINS[m] for m in metrics}
    lo, hi = domains.pop() if len(domains) == 1 else (None, None)
    if lo is not None and hi is not None:
        pad = 0.02 * (hi - lo)
        axis.update(range=[lo - pad, hi + pad], autorange=False)
    elif lo == 0:
        axis["rangemode"] = "tozero"
    return axis


def plotly_text(value: object) -> str:
    """A user's string (run name, prompt text) as Plotly text: Plotly renders a subset of HTML
    in names, titles and hover text, so ``<b>`` in a run name would be drawn bold. Entities are
    shown as the characters they stand for."""
    return html.escape(str(value), quote=False)


def _layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title},
        "xaxis": {"title": {"text": xtitle}},
        "yaxis": {"title": {"text": ytitle}},
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25},
        "margin": {"l": 60, "r": 60, "t": 50, "b": 90},
        "hovermode": "x unified",
    }
    layout.update(extra)
    return layout


def _line(name: str, xs: list[Any], ys: list[Any], color: str, max_points: int,
          **extra: Any) -> dict[str, Any]:
    x, y = minmax(xs, ys, max_points)
    trace = {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y,
             "line": {"color": color, "width": 1.5}}
    trace.update(extra)
    return trace


def _empty_note(fig: Fig, steps: list[Any]) -> Fig:
    if not steps:
        # Keep the axis titles (the chart says what it will show) but no meaningless ticks.
        for key, axis in fig["layout"].items():
            if key.startswith(("xaxis", "yaxis")):
                axis.update(showticklabels=False, showgrid=False, zeroline=False)
        fig["layout"]["annotations"] = [{"text": "no steps recorded yet", "showarrow": False,
                                         "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return fig


# --- run page ----------------------------------------------------------------------------------

def rewards(run: Run, max_points: int = MAX_POINTS) -> Fig:
    s = selectors.step_series(run.pk)
    data = [
        _line("real reward (first n samples)", s["step"], s["real_reward"], PALETTE[0],
              max_points),
        _line("kept-batch reward", s["step"], s["kept_reward"], PALETTE[1], max_points),
    ]
    layout = _layout("Reward per step", "training step", "mean reward (0-1)")
    pin_axis(layout["yaxis"], "real_reward", "kept_reward")
    return _empty_note({"data": data, "layout": layout}, s["step"])


def funnel(run: Run, max_points: int = MAX_POINTS) -> Fig:
    """Top: prompts still active after each round (a ribbon per round). Bottom: where every prompt
    of the batch ended: resolved in round r, or unresolved missing positives / negatives."""
    r = selectors.round_series(run.pk)
    s = selectors.step_series(run.pk, ("unresolved_missing_pos", "unresolved_missing_neg"))
    steps = r["steps"]
    data: list[dict[str, Any]] = []
    batch = int((run.config or {}).get("batch_size", 0))
    # Drawn from the last round to the first so each round's band stacks on the smaller one
    # after it: the ribbon narrows as prompts leave.
    for rnd in range(r["max_round"], 0, -1):
        ys = [r["active"].get((st, rnd), 0) - r["finished"].get((st, rnd), 0)
              if (st, rnd) in r["active"] else 0 for st in steps]
        data.append(_line(f"active after round {rnd}", steps, ys,
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
    layout = _layout(f"Elimination funnel (batch B = {batch} prompts)", "training step",
                     "outcome (prompts)", barmode="stack", bargap=0)
    layout["yaxis"]["domain"] = [0, 0.45]
    pin_axis(layout["yaxis"], "outcome")
    layout["yaxis2"] = pin_axis({"title": {"text": "still active (prompts)"},
                                 "domain": [0.55, 1], "anchor": "x"}, "active")
    layout["height"] = 520
    return _empty_note({"data": data, "layout": layout}, steps)


def budget(run: Run, max_points: int = MAX_POINTS) -> Fig:
    s = selectors.step_series(run.pk)
    bxn = selectors.group_bxn(run)
    steps = s["step"]
    data = [
        _line("samples per step", steps, s["samples"], PALETTE[0], max_points),
        _line(f"GRPO budget B x n = {bxn} samples", steps, [bxn] * len(steps), "#888888",
              max_points, line={"color": "#888888", "dash": "dash", "width": 1.5}),
        _line("tokens per step", steps, s["tokens"], PALETTE[1], max_points, yaxis="y3"),
        _line("cumulative samples", steps, s["cum_samples"], PALETTE[0], max_points,
              yaxis="y2", line={"color": PALETTE[0], "width": 2.5}),
        _line("cumulative GRPO budget", steps, [bxn * st for st in steps], "#888888",
              max_points, yaxis="y2", line={"color": "#888888", "dash": "dot", "width": 2}),
        _line("cumulative tokens", steps, s["cum_tokens"], PALETTE[1], max_points,
              yaxis="y4", line={"color": PALETTE[1], "width": 2.5}),
    ]
    layout = _layout("Sampling budget", "training step", "samples per step")
    # Counts start at zero: a backend that reports no tokens draws a flat line at 0, not at an
    # arbitrary mid-axis.
    pin_axis(layout["yaxis"], "samples").update(domain=[0, 0.45])
    layout["yaxis2"] = pin_axis({"title": {"text": "cumulative samples"}, "domain": [0.55, 1],
                                 "anchor": "x"}, "cum_samples")
    layout["yaxis3"] = pin_axis({"title": {"text": "tokens per step"}, "overlaying": "y",
                                 "side": "right", "anchor": "x", "showgrid": False}, "tokens")
    layout["yaxis4"] = pin_axis({"title": {"text": "cumulative tokens"}, "overlaying": "y2",
                                 "side": "right", "anchor": "x", "showgrid": False},
                                "cum_tokens")
    layout["height"] = 520
    return _empty_note({"data": data, "layout": layout}, steps)


# Charts that plot Step.metrics keys: (title, y title, [(key, legend name)], stacked).
METRIC_CHARTS: dict[str, tuple[str, str, list[tuple[str, str]], bool]] = {
    "signal": ("Signal collapse", "fraction of prompts (0-1)", [
        ("zero_adv_frac", "kept groups with zero advantage"),
        ("first_round_all_correct", "first round all correct"),
        ("first_round_all_wrong", "first round all wrong")], False),
    "entropy": ("Policy entropy", "mean token entropy (nats)", [("entropy", "entropy")], False),
    "clip": ("PPO clip fractions", "fraction of tokens (0-1)", [
        ("clip_frac_low", "clipped at 1 - eps_low"),
        ("clip_frac_high", "clipped at 1 + eps_high"),
        ("dual_clip_frac", "capped at -A x c (dual-clip)")], False),
    "length": ("Response length", "mean response length (tokens)",
               [("response_length", "every response drawn"),
                ("kept_response_length", "responses kept for the update")], False),
    "discarded": ("Discarded tokens (streaming: aborted or finished after the prompt stopped)",
                  "response tokens per step (tokens)",
                  [("tokens_discarded", "tokens generated, then discarded")], False),
    "timing": ("Step time", "seconds per step (s)", [
        ("time_generation", "generation"), ("time_scoring", "scoring"),
        ("time_update", "update"), ("time_sync", "weight sync")], True),
    "rollout": ("Rollout vs policy log-probs (vllm engine vs trained policy)",
                "|log-prob difference| per token (nats)", [
                    ("rollout_logprob_diff_mean", "mean over kept tokens"),
                    ("rollout_logprob_diff_max", "max over kept tokens")], False),
}

# Charts that only some runs can fill: the rollout/policy gap exists where a separate engine
# samples (the vllm backend); elsewhere the rollout is the policy itself.
CHART_APPLIES: dict[str, Any] = {
    "rollout": lambda run: (run.config or {}).get("backend") == "vllm",
    # Only the streaming scheduler aborts requests; the others pool every response they draw.
    "discarded": lambda run: (run.config or {}).get("scheduler") == "streaming",
}


def run_config(run: Run) -> TrainConfig:
    """The run's stored config as a TrainConfig (keys a later version dropped are ignored)."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in (run.config or {}).items() if k in known})


def metric_chart(run: Run, name: str, max_points: int = MAX_POINTS) -> Fig:
    title, ytitle, keys, stacked = METRIC_CHARTS[name]
    s = selectors.step_series(run.pk, tuple(k for k, _ in keys))
    data = []
    for i, (key, label) in enumerate(keys):
        extra: dict[str, Any] = {}
        if stacked:
            # Stacked areas need aligned x values, so a bucket mean replaces min/max here.
            x, y = bucket_mean(s["step"], s[key], max_points)
            data.append({"type": "scatter", "mode": "lines", "name": label, "x": x, "y": y,
                         "stackgroup": "time", "line": {"color": PALETTE[i], "width": 1}})
            continue
        data.append(_line(label, s["step"], s[key], PALETTE[i], max_points, **extra))
    layout = _layout(title, "training step", ytitle)
    pin_axis(layout["yaxis"], *(k for k, _ in keys))
    if name == "rollout":
        # fp32 gaps are ~1e-6 nats: "2e-6" reads as a number, Plotly's SI "2µ" does not.
        layout["yaxis"]["exponentformat"] = "e"
    fig = _empty_note({"data": data, "layout": layout}, s["step"])
    if name == "clip" and s["step"] and run_config(run).optimizer_steps == 1:
        # One optimiser step per training step: the ratio is exactly 1, so nothing can clip.
        # Zero lines are then the configuration, not a measurement worth reading.
        fig["layout"]["annotations"] = [{
            "text": "one optimiser step per training step: the ratio is 1, nothing clips<br>"
                    "(more mini-batches or epochs engage clipping; docs/paper-fidelity.md)",
            "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.6}]
    elif s["step"] and all(v is None for key, _ in keys for v in s[key]):
        # Steps exist but none carries these metrics (e.g. the rollout gap of a run whose
        # backend samples from the policy itself): say so instead of drawing empty axes.
        fig["layout"]["annotations"] = [{
            "text": "not recorded by this run's backend", "showarrow": False,
            "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return fig


def evaluation(run: Run) -> Fig:
    e = selectors.eval_series(run.pk)
    names = {"greedy_accuracy": "greedy accuracy"}
    data = [{"type": "scatter", "mode": "lines+markers", "name": plotly_text(names.get(k, k)),
             "x": e["step"], "y": e[k], "line": {"color": PALETTE[i % len(PALETTE)]}}
            for i, k in enumerate(k for k in e if k != "step")]
    layout = _layout("Held-out evaluation", "training step", "fraction of eval prompts (0-1)")
    pin_axis(layout["yaxis"], "eval")
    fig = _empty_note({"data": data, "layout": layout}, e["step"])
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
    xtitle = "training step" + (f" ({width} steps per column)" if width > 1 else "")
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
    layout = _layout(title, xtitle, ylabel, hovermode="closest")
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
            "row_ranges": v.row_ranges, "bin_size": v.bin_size}


def prompt_pass_rate(run: Run, prompt_id: int) -> Fig:
    p = selectors.prompt_pass_rates(run.pk, prompt_id)
    est = is_algorithm(run.algorithm) and get_algorithm(run.algorithm).allocates
    hover = [f"{n} samples" + (" (allocated)" if est else ", " + (
                 f"exit after round {e}" if e is not None else "unresolved"))
             for n, e in zip(p["samples"], p["exit_round"], strict=True)]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "pass rate of its pool",
             "x": p["step"], "y": p["pass_rate"], "text": hover,
             "hovertemplate": "step %{x}: %{y:.2f}<br>%{text}<extra></extra>",
             "line": {"color": PALETTE[0]}}]
    if any(v is not None for v in p["p_hat"]):
        data.append(est_p_hat_trace(p["step"], p["p_hat"]))
    layout = _layout("Estimated pass rate of this prompt", "training step",
                     "positives / samples (0-1)", hovermode="closest")
    pin_axis(layout["yaxis"], "pass_rate")
    return _empty_note({"data": data, "layout": layout}, p["step"])


# --- Reinforce-Ada-Est ---------------------------------------------------------------------------

EST_CHARTS = ("est_allocation", "est_calibration", "est_budget")


def est_p_hat_trace(steps: list[int], p_hat: list[float | None]) -> dict[str, Any]:
    """p-hat per step on the prompt-history chart, next to the pass rate observed that step."""
    return {"type": "scatter", "mode": "lines+markers", "name": "p-hat before sampling (Est)",
            "x": steps, "y": p_hat, "hovertemplate": "step %{x}: p-hat %{y:.3f}<extra></extra>",
            "line": {"color": PALETTE[1], "dash": "dot"}, "marker": {"symbol": "diamond"}}


def _est_note(fig: Fig, empty: bool, run: Run) -> Fig:
    if empty:
        fig = _empty_note(fig, [])
        if not (is_algorithm(run.algorithm) and get_algorithm(run.algorithm).allocates):
            fig["layout"]["annotations"][0]["text"] = "not a Reinforce-Ada Est run"
    return fig


def est_allocation(run: Run) -> Fig:
    """The last step's allocation: samples N_x against p-hat for every prompt of the batch, on
    the curve N(p) = clip(c * w(p), N_min, N_max) that produced it (rounding moves a point by
    less than one sample)."""
    cfg = run.config or {}
    a = selectors.est_last_allocation(run.pk)
    n_min, n_max = int(cfg.get("est_min_samples", 2)), int(cfg.get("est_max_samples", 32))
    budget = int(cfg.get("budget_per_prompt", 8))
    weight = cfg.get("est_weight", "inv-sqrt")
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "markers", "name": "prompts of the batch",
        "x": a["p_hat"], "y": a["allocated"],
        "text": [f"prompt #{i}, pass rate seen this step: "
                 + ("–" if o is None else f"{o:.2f}") for i, o in zip(a["index"], a["observed"],
                                                                      strict=True)],
        "hovertemplate": "%{text}<br>p-hat %{x:.3f}: %{y} samples<extra></extra>",
        "marker": {"color": PALETTE[0], "size": 7, "opacity": 0.7}}]
    scale = None
    if a["step"] is not None:
        scale = selectors.step_metric(run.pk, a["step"], "alloc_scale")
    # The x axis is logarithmic: p-hat spreads over decades below 0.1, where w(p) changes most.
    lo = max(1e-4, min(a["p_hat"]) * 0.8) if a["p_hat"] else 0.01
    if scale is not None and weight in ALLOCATION_WEIGHTS:
        grid = np.geomspace(lo, 1.0, 200)
        curve = np.clip(scale * ALLOCATION_WEIGHTS[weight](grid, float(cfg.get("est_eps", 1e-6))),
                        n_min, n_max)
        formula = "1/sqrt(p + eps)" if weight == "inv-sqrt" else "1/(p + eps)"
        data.append({"type": "scatter", "mode": "lines",
                     "name": f"N(p) = clip({scale:.2f} x {formula}, {n_min}, {n_max})",
                     "x": grid.tolist(), "y": curve.tolist(), "hoverinfo": "skip",
                     "line": {"color": PALETTE[1], "width": 2}})
    data.append({"type": "scatter", "mode": "lines",
                 "name": f"uniform: {budget} per prompt (GRPO n={budget})",
                 "x": [lo, 1], "y": [budget, budget], "hoverinfo": "skip",
                 "line": {"color": "#888888", "dash": "dash", "width": 1.5}})
    step = "" if a["step"] is None else f" at step {a['step']}"
    layout = _layout(f"Allocation{step}: samples per prompt against p-hat",
                     "p-hat, pass-rate estimate before sampling (0-1, log scale)",
                     "samples allocated N_x", hovermode="closest")
    layout["xaxis"].update(type="log", dtick="D2")  # ticks at 1, 2, 5 x 10^k
    layout["yaxis"]["rangemode"] = "tozero"
    return _est_note({"data": data, "layout": layout}, a["step"] is None, run)


def est_calibration(run: Run) -> Fig:
    """p-hat against the pass rate the same prompt-steps then showed, binned by p-hat; error
    bars are one binomial standard error of the observed rate."""
    c = selectors.est_calibration(run.pk)
    err = [math.sqrt(o * (1 - o) / n) if o is not None and n else None
           for o, n in zip(c["observed"], c["samples"], strict=True)]
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "observed pass rate per p-hat bin",
         "x": c["p_hat"], "y": c["observed"],
         "error_y": {"type": "data", "array": err, "visible": True},
         "text": [f"{k} prompt-steps, {n} samples" for k, n in zip(c["prompt_steps"],
                                                                   c["samples"], strict=True)],
         "hovertemplate": "mean p-hat %{x:.3f}: observed %{y:.3f}<br>%{text}<extra></extra>",
         "line": {"color": PALETTE[0]}},
        {"type": "scatter", "mode": "lines", "name": "perfect calibration", "x": [0, 1],
         "y": [0, 1], "hoverinfo": "skip", "line": {"color": "#888888", "dash": "dash"}},
    ]
    layout = _layout("Calibration of p-hat (binned, 10 bins)",
                     "mean p-hat in the bin, before sampling (0-1)",
                     "pass rate observed in that step (0-1)", hovermode="closest")
    layout["xaxis"]["range"] = [-0.02, 1.02]
    layout["yaxis"]["range"] = [-0.02, 1.02]
    return _est_note({"data": data, "layout": layout}, not c["bin"], run)


def est_budget(run: Run, max_points: int = MAX_POINTS) -> Fig:
    """Samples per step against GRPO with n = budget_per_prompt (n = 8 by default: the same
    budget), and the spread of samples per prompt."""
    cfg = run.config or {}
    budget = int(cfg.get("budget_per_prompt", 8))
    grpo = int(cfg.get("batch_size", 0)) * budget
    s = selectors.step_series(run.pk)
    a = selectors.est_allocation_series(run.pk)
    data = [
        # Est spends exactly the GRPO budget: a wide pale band under the samples line keeps
        # the reference visible where the two coincide.
        _line(f"GRPO n={budget}: B x {budget} = {grpo} samples", s["step"],
              [grpo] * len(s["step"]), "#888888", max_points,
              line={"color": "rgba(136,136,136,0.45)", "width": 7}),
        _line("samples per step", s["step"], s["samples"], PALETTE[0], max_points),
        _line("most samples to one prompt", a["step"], a["max"], PALETTE[1], max_points,
              yaxis="y2"),
        _line("mean per prompt", a["step"], a["mean"], PALETTE[2], max_points, yaxis="y2"),
        _line("fewest samples to one prompt", a["step"], a["min"], PALETTE[3], max_points,
              yaxis="y2"),
    ]
    layout = _layout(f"Sampling budget against GRPO n={budget}", "training step",
                     "samples per step")
    layout["yaxis"].update(domain=[0, 0.45], rangemode="tozero")
    layout["yaxis2"] = {"title": {"text": "samples per prompt"}, "domain": [0.55, 1],
                        "anchor": "x", "rangemode": "tozero"}
    layout["height"] = 520
    return _est_note({"data": data, "layout": layout}, not a["step"], run)


# --- compare -----------------------------------------------------------------------------------

X_AXES = {"step": ("step", "training step"),
          "samples": ("cum_samples", "cumulative samples"),
          "tokens": ("cum_tokens", "cumulative tokens"),
          "wall": ("wall_seconds", "wall time (s)")}
COMPARE_METRICS = {"real_reward": "real reward (0-1)", "kept_reward": "kept-batch reward (0-1)",
                   "zero_adv_frac": "zero-advantage group fraction (0-1)",
                   "samples": "samples per step", "entropy": "entropy (nats)",
                   "response_length": "response length (tokens)"}


def _run_label(run: Run) -> str:
    return plotly_text(f"{run.name} "
                       f"({selectors.algorithm_label(run.algorithm)})")


def compare(runs: list[Run], x_axis: str = "step", metric: str = "real_reward",
            max_points: int = MAX_POINTS) -> Fig:
    """Overlay runs; runs that differ only by seed become one mean line with a min-max band."""
    x_key, x_title = X_AXES[x_axis]
    json_metrics = tuple(m for m in (metric,) if m in selectors.METRIC_KEYS)
    series = {r.pk: selectors.step_series(r.pk, json_metrics) for r in runs}
    groups: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        groups[selectors.seed_group_key(r)].append(r)
    data: list[dict[str, Any]] = []
    for gi, members in enumerate(groups.values()):
        color = PALETTE[gi % len(PALETTE)]
        if len(members) == 1:
            s = series[members[0].pk]
            data.append(_line(_run_label(members[0]), s[x_key], s[metric], color, max_points))
            continue
        # Align seeds on the step index: steps every member has recorded.
        by_step = [dict(zip(series[m.pk]["step"], range(len(series[m.pk]["step"])),
                            strict=True)) for m in members]
        common = sorted(set.intersection(*(set(b) for b in by_step)))
        xs, mean, lo, hi = [], [], [], []
        for st in common:
            vals = [series[m.pk][metric][b[st]] for m, b in zip(members, by_step, strict=True)]
            vals = [v for v in vals if v is not None]
            xvals = [series[m.pk][x_key][b[st]] for m, b in zip(members, by_step, strict=True)]
            xs.append(statistics.fmean(xvals))
            mean.append(statistics.fmean(vals) if vals else None)
            lo.append(min(vals) if vals else None)
            hi.append(max(vals) if vals else None)
        seeds = ", ".join(str(m.seed) for m in members)
        label = f"{_run_label(members[0])} mean of {len(members)} seeds ({seeds})"
        data.extend(band_traces(label, xs, mean, lo, hi, color, max_points, group=f"g{gi}"))
    layout = _layout(f"{COMPARE_METRICS[metric].split(' (')[0].capitalize()} vs {x_title}",
                     x_title, COMPARE_METRICS[metric])
    pin_axis(layout["xaxis"], x_key)
    pin_axis(layout["yaxis"], metric)
    layout["height"] = 460
    return {"data": data, "layout": layout}


def pass_rate_scatter(run_a: Run, run_b: Run) -> Fig:
    p = selectors.per_prompt_pass_rates(run_a, run_b)
    data = [
        {"type": "scattergl", "mode": "markers", "name": "prompts sampled by both runs",
         "x": p["a"], "y": p["b"], "customdata": p["prompt_id"],
         "text": [f"prompt #{i}" for i in p["index"]],
         "hovertemplate": "%{text}<br>A: %{x:.2f}  B: %{y:.2f}<extra></extra>",
         "marker": {"size": 6, "opacity": 0.6, "color": PALETTE[0]}},
        {"type": "scattergl", "mode": "lines", "name": "equal pass rate", "x": [0, 1],
         "y": [0, 1], "line": {"color": "#888888", "dash": "dash"}, "hoverinfo": "skip"},
    ]
    layout = _layout("Per-prompt pass rate", f"pass rate in A: {plotly_text(run_a.name)} (0-1)",
                     f"pass rate in B: {plotly_text(run_b.name)} (0-1)", hovermode="closest")
    pin_axis(layout["xaxis"], "pass_rate")
    pin_axis(layout["yaxis"], "pass_rate")
    layout["height"] = 460
    fig = {"data": data, "layout": layout}
    if not p["a"]:
        fig["layout"]["annotations"] = [{"text": "the runs sampled no prompt in common",
                                         "showarrow": False, "xref": "paper", "yref": "paper",
                                         "x": 0.5, "y": 0.5}]
    return fig


def band_traces(label: str, xs: list[Any], mean: list[Any], lo: list[Any], hi: list[Any],
                color: str, max_points: int, *, group: str, band_legend: bool = True,
                **axes: Any) -> list[dict[str, Any]]:
    """A mean line over a shaded band from ``lo`` to ``hi`` (the spread across seeds): the band's
    upper edge, its lower edge filled up to it, then the line. ``axes`` (xaxis="x2", ...) place
    all three on a subplot."""
    bx, by_hi = bucket_mean(xs, hi, max_points)
    _, by_lo = bucket_mean(xs, lo, max_points)
    edge = {"type": "scatter", "mode": "lines", "x": bx, "line": {"width": 0, "color": color},
            "legendgroup": group, **axes}
    return [
        {**edge, "y": by_hi, "showlegend": False, "hoverinfo": "skip", "name": "max"},
        {**edge, "y": by_lo, "fill": "tonexty", "fillcolor": _rgba(color, 0.2),
         "name": "min-max across seeds", "showlegend": band_legend},
        _line(label, xs, mean, color, max_points, legendgroup=group, **axes),
    ]


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


RUN_CHARTS = ("rewards", "funnel", "budget", *METRIC_CHARTS, "eval", "heatmap")
# Charts drawn without down-sampling: ``points`` does not change them (nor their cache key).
FULL_RESOLUTION_CHARTS = ("eval", "heatmap")


def charts_for(run: Run) -> list[str]:
    """The run page's charts (the heatmap has its own place) that this run can fill."""
    return [c for c in RUN_CHARTS
            if c != "heatmap" and CHART_APPLIES.get(c, lambda _run: True)(run)]


def run_chart(run: Run, name: str, max_points: int = MAX_POINTS, **options: Any) -> Fig:
    """The figure ``name`` of RUN_CHARTS; ``options`` are the heatmap's (sort, query, rows)."""
    if name == "rewards":
        return rewards(run, max_points)
    if name == "funnel":
        return funnel(run, max_points)
    if name == "budget":
        return budget(run, max_points)
    if name == "heatmap":
        return heatmap(run, **options)
    if name == "eval":
        return evaluation(run)
    if name in METRIC_CHARTS:
        return metric_chart(run, name, max_points)
    if name == "est_allocation":
        return est_allocation(run)
    if name == "est_calibration":
        return est_calibration(run)
    if name == "est_budget":
        return est_budget(run, max_points)
    raise KeyError(name)


# --- launch preflight ----------------------------------------------------------------------------

ESTIMATE_CHARTS = ("budget", "passrates")


def estimate_chart(name: str, estimate: Any, context: dict[str, Any]) -> Fig:
    """``budget``: expected samples per step of every algorithm against GRPO's B x n;
    ``passrates``: the histogram of the measured pass rates. ``context`` is the estimate panel's
    (predictions and summary for the requested run shape)."""
    shape, rows = context["shape"], [r for r in context["predictions"] if not r["error"]]
    if name == "budget":
        bxn = context["bxn"]
        labels = [r["label"] for r in rows]
        # Horizontal bars: the algorithms' names read without rotation.
        data = [
            {"type": "bar", "orientation": "h", "name": "expected samples per step",
             "y": labels, "x": [round(r["samples_per_step"], 1) for r in rows],
             "text": [f"{r['multiple_of_grpo']:.2f}x" for r in rows], "textposition": "outside",
             "cliponaxis": False, "marker": {"color": PALETTE[0]},
             "hovertemplate": "%{y}: %{x:.0f} samples per step (%{text} B x n)<extra></extra>"},
            {"type": "scatter", "mode": "lines", "name": f"GRPO budget B x n = {bxn} samples",
             "y": labels, "x": [bxn] * len(rows),
             "line": {"color": "#888888", "dash": "dash"}, "hoverinfo": "skip"},
        ]
        layout = _layout(f"Expected sampling budget (B = {shape['batch_size']}, "
                         f"n = {shape['group_size']}, M = {shape['samples_per_round']}, "
                         f"N = {shape['max_rounds']})", "samples per step", "algorithm",
                         hovermode="closest")
        pin_axis(layout["xaxis"], "samples_per_step")
        # The margin grows to fit the algorithms' names and, beside them, the axis title.
        layout["yaxis"].update(autorange="reversed", automargin=True)
        layout["yaxis"]["title"]["standoff"] = 12
        return {"data": data, "layout": layout}
    rates = (context["summary"] or {}).get("pass_rates", [])
    k = estimate.samples_per_prompt
    data = [{"type": "histogram", "name": "sampled prompts", "x": rates,
             "xbins": {"start": -0.5 / k, "end": 1 + 0.5 / k, "size": 1 / k},
             "marker": {"color": PALETTE[2]},
             "hovertemplate": "pass rate %{x:.2f}: %{y} prompts<extra></extra>"}]
    layout = _layout(f"Measured pass rates ({len(rates)} prompts, k = {k} responses each)",
                     "pass rate (0-1)", "prompts", hovermode="closest", bargap=0.05)
    # The pass-rate domain widened by half a bin, so the bins at 0 and 1 are drawn whole.
    layout["xaxis"].update(range=[-0.5 / k, 1 + 0.5 / k], autorange=False)
    pin_axis(layout["yaxis"], "prompts")
    return {"data": data, "layout": layout}
