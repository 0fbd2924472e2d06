"""GVM-RAFT's allocation chart: the last step's second-stage samples per prompt against its
first-stage pass rate, on the curve of the rule that produced them. It draws rows beyond the
step metrics (each prompt's ``p_hat`` and ``allocated``), so it is registered here for
GVM-RAFT's name; its step-metric charts are declared in its record
(trainer/algorithms/gvm_raft.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from experiments.models import Run

from trainer.algorithms.gvm_raft import GVM_RAFT, gvm_weights

from .. import selectors
from .drawing import PALETTE, Fig, base_layout, empty_note, run_config
from .registry import Chart, no_points, register_chart

ALGORITHMS = (GVM_RAFT.name,)


def gvm_allocation(run: Run) -> Fig:
    """Samples n_i of the last step's second stage against each prompt's first-stage pass rate
    p_i, with n(p) = clip(c x 1/sqrt(p + alpha/p^(beta-1)), floor, cap) for the step's c
    (rounding moves a point by less than one sample; p = 0 sits at the floor)."""
    cfg = run_config(run)
    a = selectors.est_last_allocation(run.pk)   # any run's last step with p_hat recorded
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "markers", "name": "prompts of the batch",
        "x": a["p_hat"], "y": a["allocated"],
        "text": [f"prompt #{i}" for i in a["index"]],
        "hovertemplate": "%{text}<br>first-stage pass rate %{x:.3f}: %{y} more samples"
                         "<extra></extra>",
        "marker": {"color": PALETTE[0], "size": 8, "opacity": 0.6}}]
    scale = None if a["step"] is None else selectors.step_metric(run.pk, a["step"],
                                                                  "gvm_alloc_scale")
    if scale:
        grid = np.linspace(0.0, 1.0, 401)
        curve = np.clip(scale * gvm_weights(grid, cfg.gvm_alpha, cfg.gvm_beta),
                        cfg.gvm_min_samples, cfg.gvm_max_samples)
        data.append({"type": "scatter", "mode": "lines",
                     "name": f"n(p) = clip({scale:.2f} / sqrt(p + {cfg.gvm_alpha:g} / "
                             f"p^{cfg.gvm_beta - 1:g}), {cfg.gvm_min_samples}, "
                             f"{cfg.gvm_max_samples})",
                     "x": grid.tolist(), "y": curve.tolist(), "hoverinfo": "skip",
                     "line": {"color": PALETTE[1], "width": 2}})
    uniform = cfg.gvm_budget - cfg.gvm_stage1
    data.append({"type": "scatter", "mode": "lines",
                 "name": f"uniform: {uniform} per prompt (gvm_budget - gvm_stage1)",
                 "x": [0, 1], "y": [uniform, uniform], "hoverinfo": "skip",
                 "line": {"color": "#888888", "dash": "dash", "width": 1.5}})
    step = "" if a["step"] is None else f" at step {a['step']}"
    layout = base_layout(f"Second-stage allocation{step}: samples per prompt against its "
                         "first-stage pass rate",
                         "first-stage pass rate p_i (0-1)", "second-stage samples n_i",
                         hovermode="closest")
    layout["xaxis"]["range"] = [-0.02, 1.02]
    layout["yaxis"]["rangemode"] = "tozero"
    fig = {"data": data, "layout": layout}
    if a["step"] is None:
        fig = empty_note(fig, [])
        if run.algorithm not in ALGORITHMS:
            fig["layout"]["annotations"][0]["text"] = "not a GVM-RAFT run"
    return fig


register_chart(Chart(
    "gvm_allocation_curve", no_points(gvm_allocation), algorithms=ALGORITHMS,
    metrics=("gvm_alloc_scale",),
    caption="Each dot is a prompt of the last step: the rule gives the most to hard prompts "
            "with some acceptance (p near sqrt(alpha)), less as p rises, and none to prompts "
            "that accepted nothing; dots off the curve by one sample are rounding."))
