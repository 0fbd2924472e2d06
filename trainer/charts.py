"""An algorithm's own run-page charts, declared as data where the algorithm is.

A record's ``charts`` (``trainer.algorithms.Algorithm``) lists ``ChartSpec``s: a title, the step
metrics it draws with their legend names, each axis's title with its unit, and its kind. The
dashboard draws every spec with one generic builder (``platform/dashboard/charts/``): a run of
the algorithm gets the chart on its page and at ``/runs/<id>/charts/<name>.json``, with no edit
to the platform. Nothing here draws: the trainer never imports plotly or Django.

A chart that needs a drawing of its own (Est's allocation against its curve) is a platform
module instead, registered for the algorithm's name (docs/architecture.md).

Light imports only: the web process reads the records.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.config import TrainConfig

# "lines": a line per series, each panel an axis of its own, stacked over the step axis;
# "stacked": the series' areas stacked on one axis (parts of a whole: the step's seconds).
CHART_KINDS = ("lines", "stacked")
# A chart's name is its endpoint's slug (/runs/<id>/charts/<name>.json) and its element's id.
CHART_NAME = re.compile(r"[a-z0-9][a-z0-9_]*\Z")

# A reference line across a panel, from the run's config: (legend name, value), or None where
# the run has none (DAPO's max_num_gen_batches = 0: no limit).
Reference = Callable[["TrainConfig"], "tuple[str, float] | None"]


@dataclass(frozen=True)
class Panel:
    """One y axis of a chart: its title with the unit ("prompts (prompts)"), the step metrics
    drawn on it as (key, legend name), and optionally a dashed line at a value the run's config
    gives (``reference(config) -> (legend name, value)``: DAPO's "at most
    max_num_gen_batches")."""

    title: str
    series: tuple[tuple[str, str], ...]
    reference: Reference | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.series)


@dataclass(frozen=True)
class ChartSpec:
    """A run-page chart of step metrics, as data: ``name`` (the endpoint's slug), ``title``,
    its ``panels`` (top first, over one step axis), its ``kind`` (``CHART_KINDS``), the chart it
    follows on the page (``after``, a chart's name; empty or unknown: last), whether it is
    drawn tall and its ``caption`` (the sentence under it saying what to look for; optional)."""

    name: str
    title: str
    panels: tuple[Panel, ...]
    kind: str = "lines"
    after: str = ""
    tall: bool = False
    caption: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not CHART_NAME.match(self.name):
            raise ValueError(f"chart name {self.name!r}: lower-case letters, digits and '_', "
                             "starting with a letter or digit")
        if self.kind not in CHART_KINDS:
            raise ValueError(f"chart {self.name!r}: kind must be one of "
                             f"{', '.join(CHART_KINDS)}, got {self.kind!r}")
        if not self.panels or not all(p.series for p in self.panels):
            raise ValueError(f"chart {self.name!r}: every panel draws at least one metric")
        if self.kind == "stacked" and (len(self.panels) > 1 or self.panels[0].reference):
            raise ValueError(f"chart {self.name!r}: a stacked chart is one panel, without a "
                             "reference line")

    @property
    def keys(self) -> tuple[str, ...]:
        """The step metrics it draws, in order."""
        return tuple(k for p in self.panels for k in p.keys)
