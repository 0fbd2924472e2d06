"""Plotly figures (plain dicts) for the chart JSON endpoints.

Figures are built as dicts rather than with ``plotly.graph_objects``: the endpoints are polled
while a run trains, and validating every trace object costs more than the query. Every figure has a
title, axis titles with units and a legend, which the endpoint tests check.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from experiments.models import Run

from trainer import formatting as fmt
from trainer.allocation import ALLOCATION_WEIGHTS
from trainer.config import TrainConfig
from trainer.types import Metric, RankRecord

from . import heatmap as heatmap_data
from . import metrics, selectors
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

# The domain of every quantity a chart plots comes from the trainer's metric declarations
# (``dashboard.metrics``). An axis that plots only bounded quantities is pinned to their domain,
# so a flat series (every reward 0) sits at 0 on a 0-1 axis instead of mid-way on an autoscaled
# -1..1; counts start at 0.
METRIC_DOMAINS = metrics.METRIC_DOMAINS


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


STEP_TITLE = "training step"


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

def run_config(run: Run) -> TrainConfig:
    """The run's stored config as a TrainConfig (``TrainConfig.from_stored``)."""
    return TrainConfig.from_stored(run.config)


@dataclass(frozen=True)
class ChartRun:
    """What a chart's ``applies_to`` decides by: the run, its config, the extra step metrics its
    algorithm declares and whether the algorithm eliminates prompts by an exit rule."""

    run: Run
    config: TrainConfig
    algorithm_metrics: dict[str, Metric]
    eliminates: bool

    @classmethod
    def of(cls, run: Run) -> ChartRun:
        return cls(run, run_config(run), metrics.algorithm_metrics(run.algorithm),
                   metrics.algorithm_eliminates(run.algorithm))

    def declares(self, *keys: str) -> bool:
        return all(k in self.algorithm_metrics for k in keys)


def _always(_: ChartRun) -> bool:
    return True


@dataclass(frozen=True)
class Chart:
    """One chart of the run page. ``build(run, max_points, **options)`` returns the figure;
    ``applies_to`` says whether the run page shows it for a run (its endpoint draws it for any
    run, saying what is missing); ``metrics`` are the Step.metrics keys it plots; ``section``
    places it (see ``SECTIONS``); ``full_resolution`` charts ignore ``max_points``."""

    name: str
    build: Callable[..., Fig]
    applies_to: Callable[[ChartRun], bool] = _always
    metrics: tuple[str, ...] = ()
    section: str = ""
    tall: bool = False
    full_resolution: bool = False


@dataclass(frozen=True)
class Section:
    """A group of charts on the run page: the main grid ("") has no heading; an algorithm's own
    charts come under a heading, with a note template that explains them."""

    key: str
    title: str = ""
    note: str = ""  # a template included under the heading


# The registry of run-page charts, in page order; ``register_chart`` adds one.
RUN_CHARTS: dict[str, Chart] = {}
SECTIONS: dict[str, Section] = {s.key: s for s in (
    Section(""),
    Section("est", "Reinforce-Ada Est: where the budget went", "dashboard/_est_note.html"),
    Section("ranks", "Across ranks: where the run executes", "dashboard/_ranks_note.html"),
    Section("heatmap"),  # the prompt x step heatmap has a card of its own
)}


def register_chart(chart: Chart, *, after: str | None = None) -> Chart:
    """Add ``chart`` to the run page: last, or right after the chart named ``after``."""
    if chart.section not in SECTIONS:
        raise ValueError(f"chart {chart.name!r}: unknown section {chart.section!r}")
    if after is not None and after not in RUN_CHARTS:
        raise ValueError(f"chart {chart.name!r}: no chart {after!r} to follow")
    entries = [c for c in RUN_CHARTS.values() if c.name != chart.name]
    at = len(entries) if after is None else [c.name for c in entries].index(after) + 1
    entries.insert(at, chart)
    RUN_CHARTS.clear()
    RUN_CHARTS.update((c.name, c) for c in entries)
    return chart


def charts_for(run: Run) -> list[str]:
    """The names of the run page's charts (the heatmap has its own place) this run can fill."""
    return [name for section in sections_for(run) for name in section[1]]


def sections_for(run: Run) -> list[tuple[Section, list[str]]]:
    """The run page's sections, each with the names of its charts that apply to ``run``, in
    registry order; sections with none are left out (the heatmap's too: it has its own card)."""
    ctx = ChartRun.of(run)
    out: list[tuple[Section, list[str]]] = []
    for key, section in SECTIONS.items():
        names = [c.name for c in RUN_CHARTS.values()
                 if c.section == key and key != "heatmap" and c.applies_to(ctx)]
        if names:
            out.append((section, names))
    return out


def run_chart(run: Run, name: str, max_points: int = MAX_POINTS, **options: Any) -> Fig:
    """The figure ``name`` of RUN_CHARTS; ``options`` are the heatmap's (sort, query, rows)."""
    return whole_steps(RUN_CHARTS[name].build(run, max_points, **options))


def rewards(run: Run, max_points: int = MAX_POINTS) -> Fig:
    s = selectors.step_series(run.pk)
    data = [
        _line("real reward (first n samples)", s["step"], s["real_reward"], PALETTE[0],
              max_points),
        _line("kept-batch reward", s["step"], s["kept_reward"], PALETTE[1], max_points),
    ]
    layout = _layout("Reward per step", STEP_TITLE, "mean reward (0-1)")
    pin_axis(layout["yaxis"], "real_reward", "kept_reward")
    return _empty_note({"data": data, "layout": layout}, s["step"])


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
    layout = _layout(f"Elimination funnel (batch B = {fmt.count(batch, 'prompt')})",
                     STEP_TITLE, "outcome (prompts)", barmode="stack", bargap=0)
    layout["yaxis"]["domain"] = [0, 0.45]
    pin_axis(layout["yaxis"], "outcome")
    layout["yaxis2"] = pin_axis({"title": {"text": "still active (prompts)"},
                                 "domain": [0.55, 1], "anchor": "x"}, "active")
    layout["height"] = 520
    return _empty_note({"data": data, "layout": layout}, steps)


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
    layout = _layout(title, STEP_TITLE, "prompts sampled (prompts)", barmode="stack",
                     bargap=0)
    pin_axis(layout["yaxis"], "prompts")
    layout["height"] = 520
    fig = _empty_note({"data": data, "layout": layout}, s["step"])
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
        _line("samples per step", steps, s["samples"], PALETTE[0], max_points),
        _line(f"GRPO budget B x n = {fmt.count(bxn, 'sample')}", steps, [bxn] * len(steps),
              "#888888", max_points, line={"color": "#888888", "dash": "dash", "width": 1.5}),
        _line("tokens per step", steps, s["tokens"], PALETTE[1], max_points, yaxis="y2"),
        _line("cumulative samples", steps, s["cum_samples"], PALETTE[0], max_points,
              yaxis="y3", line={"color": PALETTE[0], "width": 2.5}),
        _line("cumulative GRPO budget", steps, [bxn * st for st in steps], "#888888",
              max_points, yaxis="y3", line={"color": "#888888", "dash": "dot", "width": 2}),
        _line("cumulative tokens", steps, s["cum_tokens"], PALETTE[1], max_points,
              yaxis="y4", line={"color": PALETTE[1], "width": 2.5}),
    ]
    layout = _layout("Sampling budget", STEP_TITLE, "samples per step")
    # Counts start at zero: a backend that reports no tokens draws a flat line at 0, not at an
    # arbitrary mid-axis.
    stack_panels(layout, [pin_axis({"title": {"text": title}, "tickformat": "~s"}, key)
                          for title, key in (("samples per step", "samples"),
                                             ("tokens per step", "tokens"),
                                             ("cumulative samples", "cum_samples"),
                                             ("cumulative tokens", "cum_tokens"))],
                 legend_items=len(data))
    return _empty_note({"data": data, "layout": layout}, steps)


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


@dataclass(frozen=True)
class MetricChart:
    """A chart of Step.metrics keys: one line per (key, legend name), stacked or not; ``note``
    (figure, series, config) may annotate it."""

    title: str
    ytitle: str
    series: tuple[tuple[str, str], ...]
    stacked: bool = False
    exponent_axis: bool = False
    note: Callable[[Fig, dict[str, list[Any]], TrainConfig], None] | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.series)


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


def metric_chart(run: Run, spec: MetricChart, max_points: int = MAX_POINTS) -> Fig:
    s = selectors.step_series(run.pk, spec.keys)
    data = []
    for i, (key, label) in enumerate(spec.series):
        if spec.stacked:
            # Stacked areas need aligned x values, so a bucket mean replaces min/max here.
            x, y = bucket_mean(s["step"], s[key], max_points)
            data.append({"type": "scatter", "mode": "lines", "name": label, "x": x, "y": y,
                         "stackgroup": "time", "line": {"color": PALETTE[i], "width": 1}})
            continue
        data.append(_line(label, s["step"], s[key], PALETTE[i % len(PALETTE)], max_points))
    layout = _layout(spec.title, STEP_TITLE, spec.ytitle)
    pin_axis(layout["yaxis"], *spec.keys)
    if spec.exponent_axis:
        # fp32 gaps are ~1e-6 nats: "2e-6" reads as a number, Plotly's SI "2µ" does not.
        layout["yaxis"]["exponentformat"] = "e"
    fig = _empty_note({"data": data, "layout": layout}, s["step"])
    if spec.note is not None:
        spec.note(fig, s, run_config(run))
    if "annotations" not in fig["layout"] and s["step"] and all(
            v is None for key in spec.keys for v in s[key]):
        # Steps exist but none carries these metrics (e.g. the rollout gap of a run whose
        # backend samples from the policy itself): say so instead of drawing empty axes.
        fig["layout"]["annotations"] = [{
            "text": "not recorded by this run's backend", "showarrow": False,
            "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return fig


def metric_chart_entry(name: str, spec: MetricChart, **chart: Any) -> Chart:
    """A registry entry for a chart of step metrics."""
    return Chart(name, lambda run, max_points=MAX_POINTS, **_: metric_chart(run, spec, max_points),
                 metrics=spec.keys, **chart)


def _panels_by_unit(keys: list[str]) -> list[tuple[str, list[str]]]:
    units: dict[str, list[str]] = {}
    for key in keys:
        units.setdefault(metrics.metric(key).unit, []).append(key)
    return list(units.items())


def panels_chart(title: str, panels: list[tuple[str, list[tuple[str, str]]]],
                 s: dict[str, list[Any]], max_points: int,
                 references: dict[int, tuple[str, float]] | None = None) -> Fig:
    """Step metrics in panels stacked over one step axis: ``panels`` = [(axis title,
    [(key, legend name)])]; ``references`` = {panel index: (legend name, value)} draws a dashed
    line of that value across a panel."""
    data: list[dict[str, Any]] = []
    layout = _layout(title, STEP_TITLE, panels[0][0] if panels else "value")
    if len(panels) > 1:
        stack_panels(layout, [pin_axis({"title": {"text": ytitle}}, *(k for k, _ in series))
                              for ytitle, series in panels],
                     legend_items=sum(len(series) for _, series in panels) + len(references or {}))
    elif panels:
        pin_axis(layout["yaxis"], *(k for k, _ in panels[0][1]))
    colour = 0
    for i, (_, series) in enumerate(panels):
        ref = "y" if i == 0 else f"y{i + 1}"
        for key, label in series:
            data.append(_line(label, s["step"], s[key], PALETTE[colour % len(PALETTE)],
                              max_points, yaxis=ref))
            colour += 1
        if references and i in references:
            name, value = references[i]
            data.append(_line(name, s["step"], [value] * len(s["step"]), "#888888",
                              max_points, yaxis=ref,
                              line={"color": "#888888", "dash": "dash", "width": 1.5}))
    return _empty_note({"data": data, "layout": layout}, s["step"])


def _axis_title(unit: str, keys: list[str]) -> str:
    words = metrics.label(keys[0]) if len(keys) == 1 else "value"
    return f"{words} ({unit})" if unit else words


def _drawn_elsewhere(ctx: ChartRun) -> set[str]:
    return {k for c in RUN_CHARTS.values() if c.name != "algorithm_metrics" and c.applies_to(ctx)
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


DAPO_METRICS = ("gen_batches", "signal_groups", "prompts_drawn")


def dapo_sampling(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """DAPO's dynamic sampling, per step: the generation batches of G prompts it drew (at most
    max_num_gen_batches; 0: no limit), the prompts they held and how many groups came back with
    signal, against the B groups the update wants."""
    config = run_config(run)
    s = selectors.step_series(run.pk, DAPO_METRICS)
    G = config.dapo_gen_batch_size or config.batch_size
    cap = config.max_num_gen_batches
    references = {1: (f"wanted: B = {fmt.count(config.batch_size, 'group')} with signal",
                      config.batch_size)}
    if cap:  # 0: no limit, no line to draw
        references[0] = (f"at most max_num_gen_batches = {cap}", cap)
    return panels_chart(
        "Dynamic sampling: batches drawn until B groups carry signal",
        [("batches drawn (batches)",
          [("gen_batches", f"batches of G = {fmt.count(G, 'prompt')} drawn")]),
         ("prompts (prompts)", [("prompts_drawn", "prompts drawn"),
                                ("signal_groups", "groups with signal")])],
        s, max_points, references=references)


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


def evaluation(run: Run) -> Fig:
    e = selectors.eval_series(run.pk)
    names = {"greedy_accuracy": "greedy accuracy"}
    data = [{"type": "scatter", "mode": "lines+markers", "name": plotly_text(names.get(k, k)),
             "x": e["step"], "y": e[k], "line": {"color": PALETTE[i % len(PALETTE)]}}
            for i, k in enumerate(k for k in e if k != "step")]
    layout = _layout("Held-out evaluation", STEP_TITLE, "fraction of eval prompts (0-1)")
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
            "row_ranges": v.row_ranges, "bin_size": v.bin_size,
            # Without an exit rule a prompt's one round says nothing of an exit.
            "eliminates": metrics.algorithm_eliminates(run.algorithm)}


def prompt_pass_rate(run: Run, prompt_id: int) -> Fig:
    p = selectors.prompt_pass_rates(run.pk, prompt_id)
    eliminates = metrics.algorithm_eliminates(run.algorithm)
    hover = [fmt.count(n, "sample") + (
        " (allocated)" if h is not None else
        "" if not eliminates else
        f", exit after round {e}" if e is not None else ", unresolved")
        for n, e, h in zip(p["samples"], p["exit_round"], p["p_hat"], strict=True)]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "pass rate of its pool",
             "x": p["step"], "y": p["pass_rate"], "text": hover,
             "hovertemplate": "step %{x}: %{y:.2f}<br>%{text}<extra></extra>",
             "line": {"color": PALETTE[0]}}]
    if any(v is not None for v in p["p_hat"]):
        data.append(est_p_hat_trace(p["step"], p["p_hat"]))
    layout = _layout("Estimated pass rate of this prompt", STEP_TITLE,
                     "positives / samples (0-1)", hovermode="closest")
    pin_axis(layout["yaxis"], "pass_rate")
    return whole_steps(_empty_note({"data": data, "layout": layout}, p["step"]))


# --- Reinforce-Ada-Est ---------------------------------------------------------------------------

# The Est step metrics its charts read: a run whose algorithm declares them gets the charts.
EST_METRICS = ("p_hat_mean", "alloc_scale")


def log_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Ticks of a log axis from ``lo`` to ``hi`` at 1, 2 and 5 x 10^k, each labelled in full
    ("0.05", "0.1", "0.2"): Plotly's own minor labels read "5, 0.1, 2, 5, 1"."""
    vals = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= v <= hi * 1.0001]
    return {"tickvals": vals, "ticktext": [f"{v:g}" for v in vals]}


def est_p_hat_trace(steps: list[int], p_hat: list[float | None]) -> dict[str, Any]:
    """p-hat per step on the prompt-history chart, next to the pass rate observed that step."""
    return {"type": "scatter", "mode": "lines+markers", "name": "p-hat before sampling (Est)",
            "x": steps, "y": p_hat, "hovertemplate": "step %{x}: p-hat %{y:.3f}<extra></extra>",
            "line": {"color": PALETTE[1], "dash": "dot"}, "marker": {"symbol": "diamond"}}


def _est_note(fig: Fig, empty: bool, run: Run) -> Fig:
    if empty:
        fig = _empty_note(fig, [])
        if not ChartRun.of(run).declares(*EST_METRICS):
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
    layout = _layout(f"Allocation{step}: samples per prompt against p-hat",
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
    layout = _layout("Calibration of p-hat (binned, 10 bins)",
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
        _line(f"GRPO n={budget}: B x {budget} = {fmt.count(grpo, 'sample')}", s["step"],
              [grpo] * len(s["step"]), "#888888", max_points,
              line={"color": "rgba(136,136,136,0.45)", "width": 7}),
        _line("samples per step", s["step"], s["samples"], PALETTE[0], max_points),
        _line("most samples to one prompt", a["step"], a["max"], PALETTE[1], max_points,
              yaxis="y2"),
        _line("mean per prompt", a["step"], a["mean"], PALETTE[2], max_points, yaxis="y2"),
        _line("fewest samples to one prompt", a["step"], a["min"], PALETTE[3], max_points,
              yaxis="y2"),
    ]
    layout = _layout(f"Sampling budget against GRPO n={budget}", STEP_TITLE,
                     "samples per step")
    layout["yaxis"].update(domain=[0, 0.45], rangemode="tozero")
    layout["yaxis2"] = {"title": {"text": "samples per prompt"}, "domain": [0.55, 1],
                        "anchor": "x", "rangemode": "tozero"}
    layout["height"] = 520
    return _est_note({"data": data, "layout": layout}, not a["step"], run)


# --- across ranks (world_size > 1) ----------------------------------------------------------------

RANK_PARTS = RankRecord.PARTS
STRAGGLER_COLOR = "#D55E00"
PEER_COLOR = "#7f8c9a"


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def straggler(series: selectors.RankSeries) -> tuple[int, float, int] | None:
    """(rank, its mean step time over the median rank's, steps in which it was the slowest) of
    the rank with the longest mean step time; None with fewer than two ranks."""
    means = {k: _mean(series.totals(k)) for k in series.parts}
    means = {k: v for k, v in means.items() if v is not None}
    if len(means) < 2:
        return None
    slow = max(means, key=lambda k: (means[k], -k))
    median = statistics.median(means.values())
    totals = {k: series.totals(k) for k in means}
    slowest = sum(1 for i in range(len(series.steps))
                  if all(totals[slow][i] is not None and (totals[k][i] is None
                                                         or totals[k][i] <= totals[slow][i])
                         for k in totals))
    return slow, (means[slow] / median if median else math.inf), slowest


def _rank_note(series: selectors.RankSeries) -> str:
    found = straggler(series)
    if found is None:
        return ""
    rank, ratio, slowest = found
    return (f"slowest: rank {rank} ({series.nodes.get(rank, '')}), {ratio:.2f}x the median "
            f"rank's step time, the slowest in {slowest:,} of {len(series.steps):,} steps")


def rank_times(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """Each rank's step time (its generation, update, weight gather and engine load) per step,
    one line per rank; the slowest rank in its own colour, named in the title."""
    series = selectors.rank_series(run.pk, tuple(k for k, _ in RANK_PARTS))
    found = straggler(series)
    slow = found[0] if found else None
    traces = [_line(f"rank {k}" + (" (slowest)" if k == slow else ""), series.steps,
                    series.totals(k), STRAGGLER_COLOR if k == slow else PEER_COLOR, max_points,
                    **({"line": {"color": STRAGGLER_COLOR, "width": 3}} if k == slow else {}))
              for k in series.parts]
    note = _rank_note(series)
    title = "Step time per rank" + (f"<br><sup>{plotly_text(note)}</sup>" if note else "")
    fig = {"data": traces,
           "layout": _layout(title, STEP_TITLE, "rank's step time (s)", hovermode="x")}
    pin_axis(fig["layout"]["yaxis"])
    fig["layout"]["yaxis"]["rangemode"] = "tozero"
    return _empty_note(fig, series.steps)


def rank_split(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """Where each rank's step went, mean seconds over the recorded steps, stacked by part."""
    series = selectors.rank_series(run.pk, tuple(k for k, _ in RANK_PARTS))
    found = straggler(series)
    labels = [f"rank {k}" + (" (slowest)" if found and k == found[0] else "")
              + (f"<br>{plotly_text(series.nodes[k])}" if series.nodes.get(k) else "")
              for k in series.parts]
    traces = [{"type": "bar", "name": label, "x": labels,
               "y": [_mean(series.parts[k][key]) for k in series.parts],
               "marker": {"color": PALETTE[i % len(PALETTE)]}}
              for i, (key, label) in enumerate(RANK_PARTS)]
    n = len(series.steps)
    fig = {"data": traces, "layout": _layout(
        f"Each rank's step, split (mean over {n:,} step{'s' if n != 1 else ''})", "rank",
        "seconds per step (s)", barmode="stack", hovermode="x")}
    return _empty_note(fig, series.steps)


def _spans_ranks(ctx: ChartRun) -> bool:
    return ctx.config.world_size > 1


# --- the registry of run-page charts, in page order ------------------------------------------

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


def _early_rounds(ctx: ChartRun) -> bool:
    # A prompt's next round can only go in early where there is a next round.
    return ctx.eliminates and ctx.config.early_rounds_mode != "off"


def _no_points(build: Callable[[Run], Fig]) -> Callable[..., Fig]:
    return lambda run, max_points=MAX_POINTS, **_: build(run)


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
    Chart("dapo_sampling", dapo_sampling, applies_to=lambda ctx: ctx.declares(*DAPO_METRICS),
          metrics=DAPO_METRICS, tall=True),
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
    Chart("rank_times", rank_times, applies_to=_spans_ranks, section="ranks"),
    Chart("rank_split", rank_split, applies_to=_spans_ranks, section="ranks"),
    Chart("eval", _no_points(evaluation), full_resolution=True),
    Chart("heatmap", lambda run, max_points=MAX_POINTS, **options: heatmap(run, **options),
          section="heatmap", full_resolution=True),
    Chart("est_allocation", _no_points(est_allocation), section="est",
          applies_to=lambda ctx: ctx.declares(*EST_METRICS), metrics=("alloc_scale",)),
    Chart("est_calibration", _no_points(est_calibration), section="est",
          applies_to=lambda ctx: ctx.declares(*EST_METRICS)),
    Chart("est_budget", est_budget, section="est",
          applies_to=lambda ctx: ctx.declares(*EST_METRICS), metrics=("samples",), tall=True),
):
    register_chart(_chart)
del _chart

# Charts drawn without down-sampling: ``points`` does not change them (nor their cache key).
FULL_RESOLUTION_CHARTS = tuple(c.name for c in RUN_CHARTS.values() if c.full_resolution)


# --- compare -----------------------------------------------------------------------------------

X_AXES = {"step": ("step", STEP_TITLE),
          "samples": ("cum_samples", "cumulative samples"),
          "tokens": ("cum_tokens", "cumulative tokens"),
          "wall": ("wall_seconds", "wall time (s)")}
COMPARE_METRICS = {"real_reward": "real reward (0-1)", "kept_reward": "kept-batch reward (0-1)",
                   "zero_adv_frac": "zero-advantage group fraction (0-1)",
                   "samples": "samples per step", "entropy": "token-mean entropy (nats per token)",
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
            data.append(_line(label, s[x_key], s[metric], color, max_points))
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
    layout = _layout(f"{COMPARE_METRICS[metric].split(' (')[0].capitalize()} vs {x_title}",
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
    layout = _layout("Per-prompt pass rate", f"pass rate in A: {plotly_text(names[0])} (0-1)",
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
        points = [r["samples_per_step"] for r in rows]
        # Rows stored before the interval existed are recomputed (preflight._current).
        low = [r.get("samples_per_step_low", p) for r, p in zip(rows, points, strict=True)]
        high = [r.get("samples_per_step_high", p) for r, p in zip(rows, points, strict=True)]
        # Horizontal bars: the algorithms' names read without rotation; the whiskers are each
        # figure's 95% interval over the sampled prompts (none for a fixed budget).
        data = [
            {"type": "bar", "orientation": "h",
             "name": "expected samples per step (whisker: 95% interval over the sampled prompts)",
             "y": labels, "x": [round(p, 1) for p in points],
             "customdata": [[round(lo), round(h)] for lo, h in zip(low, high, strict=True)],
             "text": [f"{r['multiple_of_grpo']:.2f}x" for r in rows], "textposition": "none",
             "marker": {"color": PALETTE[0]},
             "hovertemplate": "%{y}: %{x:.0f} samples per step (%{text} B x n; 95%: "
                              "%{customdata[0]}-%{customdata[1]})<extra></extra>"},
            # The whiskers, on their own trace: only where there is an interval (a fixed budget
            # is exact; plotly would draw a zero-width whisker's caps as a tick).
            {"type": "scatter", "mode": "markers", "marker": {"opacity": 0},
             "y": [lab for lab, lo, h in zip(labels, low, high, strict=True) if h > lo],
             "x": [round(p, 1) for p, lo, h in zip(points, low, high, strict=True) if h > lo],
             "error_x": {"type": "data", "symmetric": False, "color": "#1d2330",
                         "array": [round(h - p, 1)
                                   for p, lo, h in zip(points, low, high, strict=True) if h > lo],
                         "arrayminus": [round(p - lo, 1) for p, lo, h
                                        in zip(points, low, high, strict=True) if h > lo]},
             "showlegend": False, "hoverinfo": "skip"},
            # Each bar's multiple of B x n, written past its whisker (not over it).
            {"type": "scatter", "mode": "text", "y": labels, "x": high,
             "text": [f" {r['multiple_of_grpo']:.2f}x" for r in rows],
             "textposition": "middle right", "cliponaxis": False, "showlegend": False,
             "hoverinfo": "skip"},
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
