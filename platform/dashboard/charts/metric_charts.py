"""Charts of step metrics, drawn generically: one axis of lines (or stacked areas) per
``MetricChart``, panels stacked over one step axis (``panels_chart``), and an algorithm's own
charts declared as data (``trainer.charts.ChartSpec``, ``spec_chart``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from experiments.models import Run

from trainer.charts import ChartSpec
from trainer.config import TrainConfig

from .. import selectors
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
    run_config,
    stack_panels,
)


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
        data.append(line_trace(label, s["step"], s[key], PALETTE[i % len(PALETTE)],
                               max_points))
    layout = base_layout(spec.title, STEP_TITLE, spec.ytitle)
    pin_axis(layout["yaxis"], *spec.keys)
    if spec.exponent_axis:
        # fp32 gaps are ~1e-6 nats: "2e-6" reads as a number, Plotly's SI "2µ" does not.
        layout["yaxis"]["exponentformat"] = "e"
    fig = empty_note({"data": data, "layout": layout}, s["step"])
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


def panels_chart(title: str, panels: list[tuple[str, list[tuple[str, str]]]],
                 s: dict[str, list[Any]], max_points: int,
                 references: dict[int, tuple[str, float]] | None = None) -> Fig:
    """Step metrics in panels stacked over one step axis: ``panels`` = [(axis title,
    [(key, legend name)])]; ``references`` = {panel index: (legend name, value)} draws a dashed
    line of that value across a panel."""
    data: list[dict[str, Any]] = []
    layout = base_layout(title, STEP_TITLE, panels[0][0] if panels else "value")
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
            data.append(line_trace(label, s["step"], s[key], PALETTE[colour % len(PALETTE)],
                                   max_points, yaxis=ref))
            colour += 1
        if references and i in references:
            name, value = references[i]
            data.append(line_trace(name, s["step"], [value] * len(s["step"]), "#888888",
                                   max_points, yaxis=ref,
                                   line={"color": "#888888", "dash": "dash", "width": 1.5}))
    return empty_note({"data": data, "layout": layout}, s["step"])


def spec_chart(run: Run, spec: ChartSpec, max_points: int = MAX_POINTS) -> Fig:
    """An algorithm's chart as its record declares it: one panel without a reference line is a
    ``MetricChart`` (lines, or stacked areas); several, or a reference line, panels over one
    step axis, each reference drawn from the run's config."""
    (first, *rest) = spec.panels
    if not rest and first.reference is None:
        return metric_chart(run, MetricChart(spec.title, first.title, first.series,
                                             stacked=spec.kind == "stacked"), max_points)
    config = run_config(run)
    references = {i: p.reference(config) for i, p in enumerate(spec.panels)
                  if p.reference is not None}
    return panels_chart(spec.title, [(p.title, list(p.series)) for p in spec.panels],
                        selectors.step_series(run.pk, spec.keys), max_points,
                        references=references)
