"""The launch preflight's charts (an estimate's page): the expected sampling budget of every
algorithm against GRPO's B x n, and the histogram of the measured pass rates."""

from __future__ import annotations

from typing import Any

from .drawing import PALETTE, Fig, base_layout, pin_axis


def _whiskers(labels: list[str], points: list[float], low: list[float],
              high: list[float]) -> dict[str, Any]:
    """Each bar's 95% interval, on a trace of its own: only where there is an interval (a fixed
    budget is exact; plotly would draw a zero-width whisker's caps as a tick)."""
    ranged = [(lab, p, lo, h) for lab, p, lo, h in zip(labels, points, low, high, strict=True)
              if h > lo]
    return {"type": "scatter", "mode": "markers", "marker": {"opacity": 0},
            "y": [lab for lab, _, _, _ in ranged],
            "x": [round(p, 1) for _, p, _, _ in ranged],
            "error_x": {"type": "data", "symmetric": False, "color": "#1d2330",
                        "array": [round(h - p, 1) for _, p, _, h in ranged],
                        "arrayminus": [round(p - lo, 1) for _, p, lo, _ in ranged]},
            "showlegend": False, "hoverinfo": "skip"}


def budget_chart(context: dict[str, Any]) -> Fig:
    """Expected samples per step of every algorithm (horizontal bars, whiskers: each figure's
    95% interval over the sampled prompts) against GRPO's B x n."""
    shape, rows = context["shape"], [r for r in context["predictions"] if not r["error"]]
    bxn = context["bxn"]
    labels = [r["label"] for r in rows]
    points = [r["samples_per_step"] for r in rows]
    # Rows stored before the interval existed are recomputed (preflight._current).
    low = [r.get("samples_per_step_low", p) for r, p in zip(rows, points, strict=True)]
    high = [r.get("samples_per_step_high", p) for r, p in zip(rows, points, strict=True)]
    # Horizontal bars: the algorithms' names read without rotation.
    data = [
        {"type": "bar", "orientation": "h",
         "name": "expected samples per step (whisker: 95% interval over the sampled prompts)",
         "y": labels, "x": [round(p, 1) for p in points],
         "customdata": [[round(lo), round(h)] for lo, h in zip(low, high, strict=True)],
         "text": [f"{r['multiple_of_grpo']:.2f}x" for r in rows], "textposition": "none",
         "marker": {"color": PALETTE[0]},
         "hovertemplate": "%{y}: %{x:.0f} samples per step (%{text} B x n; 95%: "
                          "%{customdata[0]}-%{customdata[1]})<extra></extra>"},
        _whiskers(labels, points, low, high),
        # Each bar's multiple of B x n, written past its whisker (not over it).
        {"type": "scatter", "mode": "text", "y": labels, "x": high,
         "text": [f" {r['multiple_of_grpo']:.2f}x" for r in rows],
         "textposition": "middle right", "cliponaxis": False, "showlegend": False,
         "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines", "name": f"GRPO budget B x n = {bxn} samples",
         "y": labels, "x": [bxn] * len(rows),
         "line": {"color": "#888888", "dash": "dash"}, "hoverinfo": "skip"},
    ]
    layout = base_layout(f"Expected sampling budget (B = {shape['batch_size']}, "
                         f"n = {shape['group_size']}, M = {shape['samples_per_round']}, "
                         f"N = {shape['max_rounds']})", "samples per step", "algorithm",
                         hovermode="closest")
    pin_axis(layout["xaxis"], "samples_per_step")
    # The margin grows to fit the algorithms' names and, beside them, the axis title.
    layout["yaxis"].update(autorange="reversed", automargin=True)
    layout["yaxis"]["title"]["standoff"] = 12
    return {"data": data, "layout": layout}


def pass_rates_chart(estimate: Any, context: dict[str, Any]) -> Fig:
    """The histogram of the measured pass rates, one bin per possible rate (k + 1 of them)."""
    rates = (context["summary"] or {}).get("pass_rates", [])
    k = estimate.samples_per_prompt
    data = [{"type": "histogram", "name": "sampled prompts", "x": rates,
             "xbins": {"start": -0.5 / k, "end": 1 + 0.5 / k, "size": 1 / k},
             "marker": {"color": PALETTE[2]},
             "hovertemplate": "pass rate %{x:.2f}: %{y} prompts<extra></extra>"}]
    layout = base_layout(f"Measured pass rates ({len(rates)} prompts, k = {k} responses each)",
                         "pass rate (0-1)", "prompts", hovermode="closest", bargap=0.05)
    # The pass-rate domain widened by half a bin, so the bins at 0 and 1 are drawn whole.
    layout["xaxis"].update(range=[-0.5 / k, 1 + 0.5 / k], autorange=False)
    pin_axis(layout["yaxis"], "prompts")
    return {"data": data, "layout": layout}


ESTIMATE_CHARTS = ("budget", "passrates")


def estimate_chart(name: str, estimate: Any, context: dict[str, Any]) -> Fig:
    """The chart ``name`` of ``ESTIMATE_CHARTS``. ``context`` is the estimate panel's
    (predictions and summary for the requested run shape)."""
    return budget_chart(context) if name == "budget" else pass_rates_chart(estimate, context)
