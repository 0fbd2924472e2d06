"""The run page's charts as one registry: ``RUN_CHARTS``, in page order, and the page's
``SECTIONS``.

An entry is a ``Chart``: how to build its figure, for which runs the page shows it (decided from
a ``ChartRun``: the run's config, the step metrics its algorithm declares, whether it
eliminates), the step metrics it plots, its section. Two kinds of entry:

- the platform's own, added by ``register_chart`` (the common charts, ``run_page``; the ranks';
  an algorithm's custom-drawn charts, registered for its name: ``est``);
- the charts a registered algorithm declares as data in its record (``Algorithm.charts``,
  ``trainer.charts.ChartSpec``), read live from the trainer's registry, drawn by
  ``metric_charts.spec_chart`` and placed after the chart each names: an algorithm registered
  after this module was imported (``RADA_ALGORITHMS``, a test's toy) gets its charts all the
  same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from dataclasses import dataclass
from typing import Any

from experiments.models import Run

from trainer.charts import ChartSpec
from trainer.config import TrainConfig
from trainer.registry import chart_specs
from trainer.types import Metric

from .. import metrics
from .drawing import MAX_POINTS, Fig, run_config, whole_steps
from .metric_charts import MetricChart, metric_chart, spec_chart


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

    def shows(self, chart: Chart) -> bool:
        """Whether the run page shows ``chart`` for this run: an algorithm's own chart only for
        the runs of that algorithm, then as the chart's ``applies_to`` says."""
        return (not chart.algorithms or self.run.algorithm in chart.algorithms) \
            and chart.applies_to(self)


def _always(_: ChartRun) -> bool:
    return True


@dataclass(frozen=True)
class Chart:
    """One chart of the run page. ``build(run, max_points, **options)`` returns the figure;
    ``applies_to`` says whether the run page shows it for a run (its endpoint draws it for any
    run, saying what is missing); ``metrics`` are the Step.metrics keys it plots; ``section``
    places it (see ``SECTIONS``); ``full_resolution`` charts ignore ``max_points``;
    ``algorithms``, where given, are the algorithms whose own chart it is (shown only on their
    runs' pages); ``caption``, where given, is the sentence under the chart saying what to look
    for."""

    name: str
    build: Callable[..., Fig]
    applies_to: Callable[[ChartRun], bool] = _always
    metrics: tuple[str, ...] = ()
    section: str = ""
    tall: bool = False
    full_resolution: bool = False
    algorithms: tuple[str, ...] = ()
    caption: str = ""


@dataclass(frozen=True)
class Section:
    """A group of charts on the run page: the main grid ("") has no heading; an algorithm's own
    charts come under a heading, with a note template that explains them."""

    key: str
    title: str = ""
    note: str = ""  # a template included under the heading


# The page's sections, in page order; ``register_section`` adds one.
SECTIONS: dict[str, Section] = {s.key: s for s in (
    Section(""),
    Section("heatmap"),  # the prompt x step heatmap has a card of its own
)}


def register_section(section: Section) -> Section:
    """Add ``section`` to the run page, after those registered before it."""
    SECTIONS[section.key] = section
    return section


@functools.cache
def _declared_chart(spec: ChartSpec, algorithms: tuple[str, ...]) -> Chart:
    """The registry entry of a chart an algorithm's record declares (one object per
    declaration, so that the registry reads the same entry every time)."""
    return Chart(spec.name, lambda run, max_points=MAX_POINTS, **_: spec_chart(run, spec,
                                                                               max_points),
                 metrics=spec.keys, tall=spec.tall, algorithms=algorithms,
                 caption=spec.caption)


class RunCharts(MutableMapping[str, Chart]):
    """The run page's charts by name, in page order: the platform's own (``register_chart``),
    with every chart the registered algorithms declare placed after the chart it names (last
    when it names none, or one not here). The platform's own entry wins a name both have.
    Writes change the platform's own entries; an algorithm's charts change with its record."""

    def __init__(self) -> None:
        self.own: dict[str, Chart] = {}

    def _entries(self) -> dict[str, Chart]:
        names = list(self.own)
        entries = dict(self.own)
        for spec, algorithms in chart_specs():
            if spec.name in entries:
                continue
            at = names.index(spec.after) + 1 if spec.after in names else len(names)
            names.insert(at, spec.name)
            entries[spec.name] = _declared_chart(spec, algorithms)
        return {name: entries[name] for name in names}

    def __getitem__(self, name: str) -> Chart:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __contains__(self, name: object) -> bool:
        return name in self._entries()

    # One merge per call, not one per entry.
    def keys(self) -> KeysView[str]:
        return self._entries().keys()

    def values(self) -> ValuesView[Chart]:
        return self._entries().values()

    def items(self) -> ItemsView[str, Chart]:
        return self._entries().items()

    def __setitem__(self, name: str, chart: Chart) -> None:
        if name not in self.own and self._entries().get(name) is chart:
            return  # an algorithm's declared chart, copied back (``update(dict(RUN_CHARTS))``)
        self.own[name] = chart

    def __delitem__(self, name: str) -> None:
        del self.own[name]

    def clear(self) -> None:
        self.own.clear()


RUN_CHARTS = RunCharts()


def register_chart(chart: Chart, *, after: str | None = None) -> Chart:
    """Add ``chart`` to the run page: last, or right after the chart named ``after``."""
    if chart.section not in SECTIONS:
        raise ValueError(f"chart {chart.name!r}: unknown section {chart.section!r}")
    if after is not None and after not in RUN_CHARTS.own:
        raise ValueError(f"chart {chart.name!r}: no chart {after!r} to follow")
    entries = [c for c in RUN_CHARTS.own.values() if c.name != chart.name]
    at = len(entries) if after is None else [c.name for c in entries].index(after) + 1
    entries.insert(at, chart)
    RUN_CHARTS.own.clear()
    RUN_CHARTS.own.update((c.name, c) for c in entries)
    return chart


def metric_chart_entry(name: str, spec: MetricChart, **chart: Any) -> Chart:
    """A registry entry for a chart of step metrics."""
    return Chart(name, lambda run, max_points=MAX_POINTS, **_: metric_chart(run, spec, max_points),
                 metrics=spec.keys, **chart)


def no_points(build: Callable[[Run], Fig]) -> Callable[..., Fig]:
    """A ``Chart.build`` of a figure drawn whole (no ``max_points``)."""
    return lambda run, max_points=MAX_POINTS, **_: build(run)


def charts_for(run: Run) -> list[str]:
    """The names of the run page's charts (the heatmap has its own place) this run can fill."""
    return [name for section in sections_for(run) for name in section[1]]


def sections_for(run: Run) -> list[tuple[Section, list[str]]]:
    """The run page's sections, each with the names of its charts that apply to ``run``, in
    registry order; sections with none are left out (the heatmap's too: it has its own card)."""
    ctx = ChartRun.of(run)
    charts = list(RUN_CHARTS.values())
    out: list[tuple[Section, list[str]]] = []
    for key, section in SECTIONS.items():
        names = [c.name for c in charts
                 if c.section == key and key != "heatmap" and ctx.shows(c)]
        if names:
            out.append((section, names))
    return out


def run_chart(run: Run, name: str, max_points: int = MAX_POINTS, **options: Any) -> Fig:
    """The figure ``name`` of RUN_CHARTS; ``options`` are the heatmap's (sort, query, rows)."""
    return whole_steps(RUN_CHARTS[name].build(run, max_points, **options))
