"""What every chart builder draws with: the layout (a title, axis titles with units, a legend),
a line down-sampled to a point budget, axes pinned to their quantities' domains, panels stacked
over one step axis, whole-step ticks, the empty-chart note, bands across seeds, the palette and
log ticks; and the run's config as a chart reads it.

Figures are built as dicts rather than with ``plotly.graph_objects``: the endpoints are polled
while a run trains, and validating every trace object costs more than the query. Every figure has
a title, axis titles with units and a legend, which the endpoint tests check.
"""

from __future__ import annotations

import html
import math
from typing import Any

from experiments.models import Run

from trainer.config import TrainConfig

from .. import metrics
from ..downsample import bucket_mean, minmax

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

# The domain of every quantity a chart plots comes from the trainer's metric declarations
# (``dashboard.metrics``). An axis that plots only bounded quantities is pinned to their domain,
# so a flat series (every reward 0) sits at 0 on a 0-1 axis instead of mid-way on an autoscaled
# -1..1; counts start at 0.
METRIC_DOMAINS = metrics.METRIC_DOMAINS

STEP_TITLE = "training step"


def run_config(run: Run) -> TrainConfig:
    """The run's stored config as a TrainConfig (``TrainConfig.from_stored``)."""
    return TrainConfig.from_stored(run.config)


def pin_axis(axis: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Fix ``axis`` to the domain its quantities share: a bounded one is the range (with 2% room
    so a line at either end stays visible), one bounded below starts the axis there."""
    domains = {metrics.domain(k) for k in keys}
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


def base_layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    """A figure's layout: its title, both axis titles (with units), a legend under the plot."""
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


def line_trace(name: str, xs: list[Any], ys: list[Any], color: str, max_points: int,
               **extra: Any) -> dict[str, Any]:
    """A named line, min/max down-sampled to ``max_points``."""
    x, y = minmax(xs, ys, max_points)
    trace = {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y,
             "line": {"color": color, "width": 1.5}}
    trace.update(extra)
    return trace


def whole_steps(fig: Fig) -> Fig:
    """Ticks at whole steps on a short run's step axis. Plotly's automatic ticks fall on halves
    when a run has fewer than about ten steps ("1.5", "2.5"), and a training step has no
    half."""
    for key, axis in fig["layout"].items():
        if not key.startswith("xaxis") or axis.get("title", {}).get("text") != STEP_TITLE:
            continue
        ref = "x" + key[len("xaxis"):]
        xs = [x for t in fig["data"] if t.get("xaxis", "x") == ref
              for x in (t.get("x") or ()) if x is not None]
        if xs and all(isinstance(x, int | float) and float(x).is_integer() for x in xs) \
                and max(xs) - min(xs) < 10:
            axis.update(tick0=0, dtick=1)
    return fig


def empty_note(fig: Fig, steps: list[Any]) -> Fig:
    """With no steps, the figure says so ("no steps recorded yet") over its titled axes."""
    if not steps:
        # Keep the axis titles (the chart says what it will show) but no meaningless ticks.
        for key, axis in fig["layout"].items():
            if key.startswith(("xaxis", "yaxis")):
                axis.update(showticklabels=False, showgrid=False, zeroline=False)
        fig["layout"]["annotations"] = [{"text": "no steps recorded yet", "showarrow": False,
                                         "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return fig


# Panels stacked over one step axis, in pixels: each tall enough for its axis title ("cumulative
# samples" is about 110 px long), apart enough for their tick labels not to touch.
PANEL_PX = 150
PANEL_GAP_PX = 36
LEGEND_ROW_PX = 20


def stack_panels(layout: Fig, axes: list[dict[str, Any]], legend_items: int) -> None:
    """Stack the y axes ``axes`` (top first; they become yaxis, yaxis2, ...) over the layout's
    step axis, and put the step axis (ticks and title) under the lowest panel, and the legend
    under that. Plotly anchors an x axis to "y" by default, which here is the top panel: the
    step axis's title sat in the middle of the chart, over the panel below."""
    n = len(axes)
    plot = n * PANEL_PX + (n - 1) * PANEL_GAP_PX
    for i, axis in enumerate(axes):
        top = plot - i * (PANEL_PX + PANEL_GAP_PX)
        key = "yaxis" if i == 0 else f"yaxis{i + 1}"
        layout[key] = {**layout.get(key, {}), **axis, "anchor": "x",
                       "domain": [max(0.0, (top - PANEL_PX) / plot), top / plot]}
    layout["xaxis"]["anchor"] = "y" if n == 1 else f"y{n}"
    # The legend, a row per two entries on a chart half the page wide, under the step axis's
    # ticks and title (about 55 px).
    rows = -(-legend_items // 2)
    margin = layout["margin"]
    margin["b"] = 65 + rows * LEGEND_ROW_PX
    layout["legend"] = {**layout.get("legend", {}), "y": -55 / plot, "yanchor": "top"}
    layout["height"] = plot + margin["t"] + margin["b"]


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
        {**edge, "y": by_lo, "fill": "tonexty", "fillcolor": rgba(color, 0.2),
         "name": "min-max across seeds", "showlegend": band_legend},
        line_trace(label, xs, mean, color, max_points, legendgroup=group, **axes),
    ]


def rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def log_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Ticks of a log axis from ``lo`` to ``hi`` at 1, 2 and 5 x 10^k, each labelled in full
    ("0.05", "0.1", "0.2"): Plotly's own minor labels read "5, 0.1, 2, 5, 1"."""
    vals = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= v <= hi * 1.0001]
    return {"tickvals": vals, "ticktext": [f"{v:g}" for v in vals]}
