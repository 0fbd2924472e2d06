"""The compare page's charts: runs overlaid on one metric against steps, samples, tokens or wall
time (runs that differ only by seed drawn as one mean line over a min-max band), held-out
accuracy against wall time and against samples, and each prompt's pass rate in one run against
another."""

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
                   "samples": "samples per step",
                   "entropy": "token-mean entropy (nats per token)",
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


def default_x_axis(runs: list[Run]) -> str:
    """The x axis the compare page opens on: training steps, or wall time when the runs'
    ``max_policy_lag`` differ (a step of an asynchronous run overlaps generation with the
    update, so equal steps are not equal cost: a synchronous run and its asynchronous twin
    compare on what they spent)."""
    lags = {int((r.config or {}).get("max_policy_lag") or 0) for r in runs}
    return "wall" if len(lags) > 1 else "step"


def _group_traces(groups: list[selectors.RunGroup], series: dict[int, dict[str, list[Any]]],
                  x_key: str, y_key: str, max_points: int, **extra: Any) -> list[dict[str, Any]]:
    """Each group's line: a run alone as its own line, seeds as their mean over a min-max band
    at the steps every seed recorded (x: the seeds' mean there)."""
    data: list[dict[str, Any]] = []
    for gi, group in enumerate(groups):
        color = PALETTE[gi % len(PALETTE)]
        members = group.used
        if not members:
            continue
        label = group_trace_label(group)
        if len(members) == 1:
            s = series[members[0].pk]
            if s["step"]:  # nothing to draw (no evaluation yet): no empty legend entry
                data.append(line_trace(label, s[x_key], s[y_key], color, max_points, **extra))
            continue
        # Align seeds on the step index: steps every member has recorded.
        by_step = [dict(zip(series[m.pk]["step"], range(len(series[m.pk]["step"])),
                            strict=True)) for m in members]
        common = sorted(set.intersection(*(set(b) for b in by_step)))
        if not common:
            continue
        xs, mean, lo, hi = [], [], [], []
        for st in common:
            vals = [series[m.pk][y_key][b[st]] for m, b in zip(members, by_step, strict=True)]
            vals = [v for v in vals if v is not None]
            xvals = [series[m.pk][x_key][b[st]] for m, b in zip(members, by_step, strict=True)]
            xs.append(statistics.fmean(xvals))
            mean.append(statistics.fmean(vals) if vals else None)
            lo.append(min(vals) if vals else None)
            hi.append(max(vals) if vals else None)
        traces = band_traces(label, xs, mean, lo, hi, color, max_points, group=f"g{gi}")
        traces[-1].update(extra)
        data.extend(traces)
    return data


def _no_data(fig: Fig, text: str) -> Fig:
    if not fig["data"]:
        fig["layout"]["annotations"] = [{
            "text": text, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
            "y": 0.5}]
    return fig


def compare(runs: list[Run], x_axis: str = "step", metric: str = "real_reward",
            max_points: int = MAX_POINTS) -> Fig:
    """Overlay runs; runs that differ only by seed become one mean line with a min-max band,
    drawn from the runs that recorded steps (``selectors.seed_groups`` says which, and the page
    says which it left out)."""
    x_key, x_title = X_AXES[x_axis]
    json_metrics = tuple(m for m in (metric,) if m in selectors.METRIC_KEYS)
    groups = selectors.seed_groups(runs)
    series = {r.pk: selectors.step_series(r.pk, json_metrics) for g in groups for r in g.used}
    data = _group_traces(groups, series, x_key, metric, max_points)
    layout = base_layout(f"{COMPARE_METRICS[metric].split(' (')[0].capitalize()} vs {x_title}",
                         x_title, COMPARE_METRICS[metric])
    pin_axis(layout["xaxis"], x_key)
    pin_axis(layout["yaxis"], metric)
    layout["height"] = 460
    return whole_steps(_no_data({"data": data, "layout": layout},
                                "none of these runs recorded a step yet"))


# The held-out accuracy charts' x axes: what a run spent by the evaluated step.
HELD_OUT_AXES = {"wall": X_AXES["wall"], "samples": X_AXES["samples"]}
HELD_OUT_CAPTION = (
    "Greedy accuracy on the held-out eval set at each evaluation, placed at the wall time and "
    "at the samples the run had spent by the step it evaluated; seeds: mean over a min-max "
    "band. Read across at one height: the line further left reached that accuracy cheaper. "
    "Wall time shows what an asynchronous run's overlap buys; samples show what its stale "
    "samples cost.")


def held_out(runs: list[Run], x_axis: str = "wall", max_points: int = MAX_POINTS) -> Fig:
    """Held-out greedy accuracy against wall time or cumulative samples
    (``selectors.eval_cost_series``), one line per seed group."""
    x_key, x_title = HELD_OUT_AXES[x_axis]
    groups = selectors.seed_groups(runs)
    series = {r.pk: selectors.eval_cost_series(r.pk) for g in groups for r in g.used}
    data = _group_traces(groups, series, x_key, "greedy_accuracy", max_points,
                         mode="lines+markers")
    layout = base_layout(f"Held-out accuracy vs {x_title}", x_title,
                         "greedy accuracy on the eval set (0-1)")
    pin_axis(layout["xaxis"], x_key)
    pin_axis(layout["yaxis"], "eval")
    layout["height"] = 420
    return _no_data({"data": data, "layout": layout},
                    "no held-out evaluation recorded (needs an eval set and eval_every > 0)")


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
