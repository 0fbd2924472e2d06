"""The compare page's charts: runs overlaid on one metric against steps, samples, tokens or wall
time (runs that differ only by seed drawn as one mean line over a min-max band), and each
prompt's pass rate in one run against another."""

from __future__ import annotations

import statistics
from typing import Any

from experiments.models import Run

from .. import selectors
from .drawing import (
    MAX_POINTS,
    PALETTE,
    STEP_TITLE,
    Fig,
    band_traces,
    base_layout,
    line_trace,
    pin_axis,
    plotly_text,
    whole_steps,
)

X_AXES = {"step": ("step", STEP_TITLE),
          "samples": ("cum_samples", "cumulative samples"),
          "tokens": ("cum_tokens", "cumulative tokens"),
          "wall": ("wall_seconds", "wall time (s)")}
COMPARE_METRICS = {"real_reward": "real reward (0-1)", "kept_reward": "kept-batch reward (0-1)",
                   "zero_adv_frac": "zero-advantage group fraction (0-1)",
                   "samples": "samples per step", "entropy": "entropy (nats)",
                   "response_length": "response length (tokens)"}


def group_trace_label(group: selectors.RunGroup) -> str:
    """A group's legend entry: what its runs share and what the line is made of ("GRPO n=4:
    mean of 2 seeds (seeds 0, 1)"); a run compared alone keeps its own name."""
    used = group.used
    if len(group.members) == 1:
        return plotly_text(f"{used[0].name} ({group.label})")
    if len(used) == 1:
        return plotly_text(f"{group.label}: seed {used[0].seed} "
                           f"(1 of {len(group.members)} seeds)")
    return plotly_text(f"{group.label}: {group.uses()}")


def compare(runs: list[Run], x_axis: str = "step", metric: str = "real_reward",
            max_points: int = MAX_POINTS) -> Fig:
    """Overlay runs; runs that differ only by seed become one mean line with a min-max band,
    drawn from the runs that recorded steps (``selectors.seed_groups`` says which, and the page
    says which it left out)."""
    x_key, x_title = X_AXES[x_axis]
    json_metrics = tuple(m for m in (metric,) if m in selectors.METRIC_KEYS)
    groups = selectors.seed_groups(runs)
    series = {r.pk: selectors.step_series(r.pk, json_metrics) for g in groups for r in g.used}
    data: list[dict[str, Any]] = []
    for gi, group in enumerate(groups):
        color = PALETTE[gi % len(PALETTE)]
        members = group.used
        if not members:
            continue
        label = group_trace_label(group)
        if len(members) == 1:
            s = series[members[0].pk]
            data.append(line_trace(label, s[x_key], s[metric], color, max_points))
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
        data.extend(band_traces(label, xs, mean, lo, hi, color, max_points, group=f"g{gi}"))
    layout = base_layout(f"{COMPARE_METRICS[metric].split(' (')[0].capitalize()} vs {x_title}",
                         x_title, COMPARE_METRICS[metric])
    pin_axis(layout["xaxis"], x_key)
    pin_axis(layout["yaxis"], metric)
    layout["height"] = 460
    fig = {"data": data, "layout": layout}
    if not data:
        fig["layout"]["annotations"] = [{
            "text": "none of these runs recorded a step yet", "showarrow": False,
            "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return whole_steps(fig)


def pass_rate_scatter(pair: tuple[Run, Run] | None) -> Fig:
    """Each prompt's pass rate in run A against run B (``selectors.scatter_pair`` picks them
    from the runs with recorded steps); None: fewer than two runs recorded a step."""
    if pair is None:
        p: dict[str, list[Any]] = {"a": [], "b": [], "prompt_id": [], "index": []}
        names = ("A", "B")
    else:
        p = selectors.per_prompt_pass_rates(*pair)
        names = (pair[0].name, pair[1].name)
    data = [
        {"type": "scattergl", "mode": "markers", "name": "prompts sampled by both runs",
         "x": p["a"], "y": p["b"], "customdata": p["prompt_id"],
         "text": [f"prompt #{i}" for i in p["index"]],
         "hovertemplate": "%{text}<br>A: %{x:.2f}  B: %{y:.2f}<extra></extra>",
         "marker": {"size": 6, "opacity": 0.6, "color": PALETTE[0]}},
        {"type": "scattergl", "mode": "lines", "name": "equal pass rate", "x": [0, 1],
         "y": [0, 1], "line": {"color": "#888888", "dash": "dash"}, "hoverinfo": "skip"},
    ]
    layout = base_layout("Per-prompt pass rate", f"pass rate in A: {plotly_text(names[0])} (0-1)",
                         f"pass rate in B: {plotly_text(names[1])} (0-1)", hovermode="closest")
    pin_axis(layout["xaxis"], "pass_rate")
    pin_axis(layout["yaxis"], "pass_rate")
    layout["height"] = 460
    fig = {"data": data, "layout": layout}
    if not p["a"]:
        fig["layout"]["annotations"] = [{"text": "the runs sampled no prompt in common"
                                         if pair else "needs two runs that recorded a step",
                                         "showarrow": False, "xref": "paper", "yref": "paper",
                                         "x": 0.5, "y": 0.5}]
    return fig
