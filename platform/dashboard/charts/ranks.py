"""The run page's "Across ranks" section (a ``world_size > 1`` run): each rank's step time per
step, the slowest rank drawn apart and named, and each rank's mean step split by part."""

from __future__ import annotations

import math
import statistics
from typing import Any

from experiments.models import Run

from trainer.types import RankRecord

from .. import selectors
from .drawing import (
    MAX_POINTS,
    PALETTE,
    STEP_TITLE,
    Fig,
    base_layout,
    empty_note,
    line_trace,
    pin_axis,
    plotly_text,
)
from .registry import Chart, ChartRun, Section, register_chart, register_section

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


def _role(series: selectors.RankSeries, rank: int) -> str:
    """A rank's role in its name where the run splits rollout from training (" rollout",
    " train"); "" for a colocated rank, which does both."""
    role = series.roles.get(rank, selectors.COLOCATED)
    return "" if role == selectors.COLOCATED else f" {role}"


def rank_times(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """Each rank's step time (its generation, update, weight gather and engine load) per step,
    one line per rank; the slowest rank in its own colour, named in the title."""
    series = selectors.rank_series(run.pk, tuple(k for k, _ in RANK_PARTS))
    found = straggler(series)
    slow = found[0] if found else None
    traces = [line_trace(f"rank {k}{_role(series, k)}" + (" (slowest)" if k == slow else ""),
                         series.steps,
                         series.totals(k), STRAGGLER_COLOR if k == slow else PEER_COLOR, max_points,
                         **({"line": {"color": STRAGGLER_COLOR, "width": 3}} if k == slow else {}))
              for k in series.parts]
    note = _rank_note(series)
    title = "Step time per rank" + (f"<br><sup>{plotly_text(note)}</sup>" if note else "")
    fig = {"data": traces,
           "layout": base_layout(title, STEP_TITLE, "rank's step time (s)", hovermode="x")}
    pin_axis(fig["layout"]["yaxis"])
    fig["layout"]["yaxis"]["rangemode"] = "tozero"
    return empty_note(fig, series.steps)


def rank_split(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """Where each rank's step went, mean seconds over the recorded steps, stacked by part."""
    series = selectors.rank_series(run.pk, tuple(k for k, _ in RANK_PARTS))
    found = straggler(series)
    labels = [f"rank {k}{_role(series, k)}" + (" (slowest)" if found and k == found[0] else "")
              + (f"<br>{plotly_text(series.nodes[k])}" if series.nodes.get(k) else "")
              for k in series.parts]
    traces = [{"type": "bar", "name": label, "x": labels,
               "y": [_mean(series.parts[k][key]) for k in series.parts],
               "marker": {"color": PALETTE[i % len(PALETTE)]}}
              for i, (key, label) in enumerate(RANK_PARTS)]
    n = len(series.steps)
    fig = {"data": traces, "layout": base_layout(
        f"Each rank's step, split (mean over {n:,} step{'s' if n != 1 else ''})", "rank",
        "seconds per step (s)", barmode="stack", hovermode="x")}
    return empty_note(fig, series.steps)


def _spans_ranks(ctx: ChartRun) -> bool:
    return ctx.config.world_size > 1



register_section(Section("ranks", "Across ranks: where the run executes",
                         "dashboard/_ranks_note.html"))
# In the registry's order after the algorithm's own metrics (their section is apart anyway).
register_chart(Chart("rank_times", rank_times, applies_to=_spans_ranks, section="ranks"),
               after="algorithm_metrics")
register_chart(Chart("rank_split", rank_split, applies_to=_spans_ranks, section="ranks"),
               after="rank_times")
