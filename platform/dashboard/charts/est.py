"""Reinforce-Ada Est's own charts, under a heading of its own on its runs' pages: the last
step's allocation against the curve that produced it, the calibration of its pass-rate estimate,
its budget against GRPO's. Each needs a drawing of its own (and rows beyond the step metrics), so
they are registered here for Est's name rather than declared as data in its record
(``trainer.charts``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from experiments.models import Run

from trainer import formatting as fmt
from trainer.algorithms import EST
from trainer.allocation import ALLOCATION_WEIGHTS

from .. import selectors
from .drawing import (
    MAX_POINTS,
    PALETTE,
    STEP_TITLE,
    Fig,
    base_layout,
    empty_note,
    line_trace,
    log_ticks,
    run_config,
)
from .registry import Chart, Section, no_points, register_chart, register_section

# The algorithms whose runs these charts are drawn for.
ALGORITHMS = (EST.name,)


def _est_note(fig: Fig, empty: bool, run: Run) -> Fig:
    if empty:
        fig = empty_note(fig, [])
        if run.algorithm not in ALGORITHMS:
            fig["layout"]["annotations"][0]["text"] = "not a Reinforce-Ada Est run"
    return fig


def est_allocation(run: Run) -> Fig:
    """The last step's allocation: samples N_x against p-hat for every prompt of the batch, on
    the curve N(p) = clip(c * w(p), N_min, N_max) that produced it (rounding moves a point by
    less than one sample)."""
    cfg = run_config(run)
    a = selectors.est_last_allocation(run.pk)
    n_min, n_max = cfg.est_min_samples, cfg.est_max_samples
    budget, weight = cfg.budget_per_prompt, cfg.est_weight
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
        curve = np.clip(scale * ALLOCATION_WEIGHTS[weight](grid, cfg.est_eps),
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
    layout = base_layout(f"Allocation{step}: samples per prompt against p-hat",
                         "p-hat, pass-rate estimate before sampling (0-1, log scale)",
                         "samples allocated N_x", hovermode="closest")
    layout["xaxis"].update(type="log", **log_ticks(lo, 1.0))
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
    layout = base_layout("Calibration of p-hat (binned, 10 bins)",
                         "mean p-hat in the bin, before sampling (0-1)",
                         "pass rate observed in that step (0-1)", hovermode="closest")
    layout["xaxis"]["range"] = [-0.02, 1.02]
    layout["yaxis"]["range"] = [-0.02, 1.02]
    return _est_note({"data": data, "layout": layout}, not c["bin"], run)


def est_budget(run: Run, max_points: int = MAX_POINTS) -> Fig:
    """Samples per step against GRPO with n = budget_per_prompt (n = 8 by default: the same
    budget), and the spread of samples per prompt."""
    cfg = run_config(run)
    budget = cfg.budget_per_prompt
    grpo = cfg.batch_size * budget
    s = selectors.step_series(run.pk)
    a = selectors.est_allocation_series(run.pk)
    data = [
        # Est spends exactly the GRPO budget: a wide pale band under the samples line keeps
        # the reference visible where the two coincide.
        line_trace(f"GRPO n={budget}: B x {budget} = {fmt.count(grpo, 'sample')}", s["step"],
                   [grpo] * len(s["step"]), "#888888", max_points,
                   line={"color": "rgba(136,136,136,0.45)", "width": 7}),
        line_trace("samples per step", s["step"], s["samples"], PALETTE[0], max_points),
        line_trace("most samples to one prompt", a["step"], a["max"], PALETTE[1], max_points,
                   yaxis="y2"),
        line_trace("mean per prompt", a["step"], a["mean"], PALETTE[2], max_points, yaxis="y2"),
        line_trace("fewest samples to one prompt", a["step"], a["min"], PALETTE[3], max_points,
                   yaxis="y2"),
    ]
    layout = base_layout(f"Sampling budget against GRPO n={budget}", STEP_TITLE,
                         "samples per step")
    layout["yaxis"].update(domain=[0, 0.45], rangemode="tozero")
    layout["yaxis2"] = {"title": {"text": "samples per prompt"}, "domain": [0.55, 1],
                        "anchor": "x", "rangemode": "tozero"}
    layout["height"] = 520
    return _est_note({"data": data, "layout": layout}, not a["step"], run)


register_section(Section("est", "Reinforce-Ada Est: where the budget went",
                         "dashboard/_est_note.html"))
for _chart in (
    Chart("est_allocation", no_points(est_allocation), section="est", algorithms=ALGORITHMS,
          metrics=("alloc_scale",)),
    Chart("est_calibration", no_points(est_calibration), section="est", algorithms=ALGORITHMS),
    Chart("est_budget", est_budget, section="est", algorithms=ALGORITHMS, metrics=("samples",),
          tall=True),
):
    register_chart(_chart)
del _chart
