"""Plotly figures (plain dicts) for the chart JSON endpoints, one module per job:

- ``drawing``: what every builder draws with (layout, lines, axes, panels, whole steps, palette);
- ``registry``: the run page's charts and sections (``RUN_CHARTS``, ``register_chart``), the
  platform's own and those an algorithm's record declares as data;
- ``metric_charts``: charts of step metrics drawn generically (an algorithm's declared charts
  too);
- ``run_page``: the run page's common charts and the prompt history's;
- ``ranks``: the "Across ranks" section; ``est``: Reinforce-Ada Est's own section;
  ``gvm_raft``: GVM-RAFT's allocation against its curve;
  ``asynchronous``: the "Asynchronous and off-policy training" section (lag, drops, ESS, lr);
- ``compare``: the compare page's; ``estimate``: the launch preflight's.

Importing the package registers the run page's charts in page order (the common ones, Est's,
GVM-RAFT's, the ranks', then the asynchronous ones), and names here what the views, the
reports and the tests use.
"""

from __future__ import annotations

# isort: off
# In page order: the common charts (the others are placed after them), Est's section, the ranks',
# the asynchronous and off-policy section.
from . import run_page, est, gvm_raft, ranks, asynchronous
# isort: on
from .compare import (
    COMPARE_METRICS,
    HELD_OUT_AXES,
    HELD_OUT_CAPTION,
    X_AXES,
    compare,
    default_x_axis,
    held_out,
    pass_rate_scatter,
)
from .drawing import (
    MAX_POINTS,
    METRIC_DOMAINS,
    PALETTE,
    POINT_LEVELS,
    STEP_TITLE,
    Fig,
    log_ticks,
    points_level,
    run_config,
    whole_steps,
)
from .estimate import ESTIMATE_CHARTS, estimate_chart
from .metric_charts import MetricChart
from .ranks import PEER_COLOR, STRAGGLER_COLOR
from .registry import (
    RUN_CHARTS,
    SECTIONS,
    Chart,
    ChartRun,
    Section,
    charts_for,
    metric_chart_entry,
    register_chart,
    register_section,
    run_chart,
    sections_for,
)
from .run_page import prompt_pass_rate

# Charts drawn without down-sampling: ``points`` does not change them (nor their cache key).
FULL_RESOLUTION_CHARTS = tuple(c.name for c in RUN_CHARTS.values() if c.full_resolution)

__all__ = ["COMPARE_METRICS", "ESTIMATE_CHARTS", "FULL_RESOLUTION_CHARTS", "HELD_OUT_AXES",
           "HELD_OUT_CAPTION", "MAX_POINTS", "METRIC_DOMAINS", "PALETTE", "PEER_COLOR",
           "POINT_LEVELS", "RUN_CHARTS", "SECTIONS", "STEP_TITLE", "STRAGGLER_COLOR", "X_AXES",
           "Chart", "ChartRun", "Fig", "MetricChart", "Section", "asynchronous", "charts_for",
           "compare", "default_x_axis", "est", "estimate_chart", "gvm_raft", "log_ticks",
           "held_out", "metric_chart_entry", "pass_rate_scatter", "points_level",
           "prompt_pass_rate", "ranks",
           "register_chart", "register_section", "run_chart", "run_config", "run_page",
           "sections_for", "whole_steps"]
