"""The run page's "Asynchronous and off-policy training" section: what the bounded policy lag
(``max_policy_lag``, ``trainer.asyncloop``) and the off-policy corrections
(``off_policy_correction``, ``trainer.offpolicy``) did, step by step. The lag of the samples each
step trained against the bound, the samples dropped instead of trained, what the engine and the
trainer did in each step's wall time (the timeline), the effective sample size of the
corrections' importance ratios, how far VCPO moved each group's baseline, and the learning rate
the optimiser applied (VCPO scales it).

A synchronous run records none of these figures (its samples carry no policy version, its steps
no lag), so its page shows none of these charts: an empty chart or a line at 0 would read as a
measurement. The endpoints still draw for any run, saying what is missing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from experiments.models import Run

from trainer.config import TrainConfig
from trainer.types import POLICY_LAG_COUNT_METRICS

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
from .metric_charts import panels_chart
from .registry import Chart, Section, register_chart, register_section

# The reference level on the ESS chart. VCPO's paper (arXiv 2602.17616, "Stable Asynchrony")
# reports that training collapse is predicted by, and preceded by, sharp drops of the ESS; it
# gives no single threshold that we could find. We mark 0.5 instead, Kish's rule of thumb (the
# level below which sequential Monte Carlo resamples): under it the update's weighted estimate
# is worth less than half of its samples drawn on-policy. At 0.5 VCPO's default rule
# (lr x sqrt(ESS), trainer.offpolicy.ess_lr_scale) applies 71% of the lr.
ESS_REFERENCE = 0.5
GREY = "#888888"


def _asynchronous(config: TrainConfig) -> bool:
    return config.max_policy_lag > 0


def _reports_off_policy(config: TrainConfig) -> bool:
    """Whether the run's steps carry ESS, the truncated share and the lr applied: as
    ``trainer.update.reports_off_policy`` decides (not imported: it would load torch into the
    web process), on a backend that trains a policy (the simulated one trains none,
    ``trainer.learner.SimulatedLearner``, so it has no importance ratio and no lr applied)."""
    return (config.max_policy_lag > 0 or config.off_policy_correction != "tis") \
        and config.backend != "simulated"


def _missing(fig: Fig, text: str) -> Fig:
    """The figure of a run that does not record these figures: no line (a bound or a reference
    line alone would read as data), the axes' titles and ``text`` across them."""
    fig["data"] = []
    fig["layout"]["annotations"] = [{"text": text, "showarrow": False, "xref": "paper",
                                     "yref": "paper", "x": 0.5, "y": 0.5}]
    return fig


SYNCHRONOUS = ("not an asynchronous run (max_policy_lag = 0): every sample is the step's own "
               "policy's")
NOT_RECORDED = ("not recorded: this run reports no off-policy figures (an asynchronous run, or "
                "off_policy_correction decoupled or vcpo, on backend hf or vllm)")


NOT_VCPO = ("not recorded: only off_policy_correction vcpo (on backend hf or vllm) moves the "
            "baseline")


def _lag_shares(rows: list[tuple[int, int, int]], steps: list[int]
                ) -> tuple[list[int], dict[int, list[float | None]]]:
    """The lags seen and, per lag, its share of each step's kept samples (None where the
    step's samples carry no version: a step recorded before the versions were)."""
    counts: dict[int, dict[int, int]] = defaultdict(dict)
    totals: dict[int, int] = defaultdict(int)
    for step, lag, n in rows:
        counts[lag][step] = n
        totals[step] += n
    lags = sorted(counts)
    return lags, {lag: [counts[lag].get(st, 0) / totals[st] if totals.get(st) else None
                        for st in steps] for lag in lags}


def _lag_rows(run: Run, s: dict[str, list[Any]], per_lag: tuple[str, ...]
              ) -> list[tuple[int, int, int]]:
    """(step, lag, kept samples) from the steps' own counts (``policy_lag_samples_<lag>``);
    a run recorded before them counts its sample rows (``selectors.policy_lag_counts``)."""
    if not s["step"] or any(v is None for v in s[per_lag[0]]):
        return selectors.policy_lag_counts(run)
    return [(st, lag, int(s[key][i])) for i, st in enumerate(s["step"])
            for lag, key in enumerate(per_lag) if s[key][i]]


def policy_lag(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """The lag of the samples each step trained (optimiser versions between the weights that drew
    a sample and those it trained), against the bound k: on top the mean and the largest lag
    (the step metrics) under the bound's line, below the share of the step's kept samples at each
    lag (from the sample rows), stacked to 1."""
    k = run_config(run).max_policy_lag
    per_lag = POLICY_LAG_COUNT_METRICS[:k + 1]
    s = selectors.step_series(run.pk, ("policy_lag_mean", "policy_lag_max", *per_lag))
    steps = s["step"]
    lags, shares = _lag_shares(_lag_rows(run, s, per_lag) if k else [], steps)
    data: list[dict[str, Any]] = [
        line_trace("mean lag of the kept samples", steps, s["policy_lag_mean"], PALETTE[0],
                   max_points),
        # Markers only: where every sample is as stale as the bound allows, the mean, the
        # largest lag and the bound are one value, and a line would hide the other two.
        line_trace("largest lag of a kept sample", steps, s["policy_lag_max"], PALETTE[1],
                   max_points, mode="markers", marker={"size": 7, "symbol": "diamond"}),
        line_trace(f"bound: max_policy_lag = {k}", steps, [k] * len(steps), GREY, max_points,
                   line={"color": GREY, "dash": "dash", "width": 1.5}),
    ]
    for i, lag in enumerate(lags):
        x, y = bucket_mean(steps, shares[lag], max_points)
        data.append({"type": "bar", "name": f"lag {lag}" + (" (on-policy)" if lag == 0 else ""),
                     "x": x, "y": y, "yaxis": "y2", "legendgroup": "share",
                     "marker": {"color": PALETTE[(i + 2) % len(PALETTE)]}})
    layout = base_layout(f"Policy lag of the trained samples (bound max_policy_lag = {k})",
                         STEP_TITLE, "lag (optimiser versions)", barmode="stack", bargap=0.1)
    top = pin_axis({"title": {"text": "lag (optimiser versions)"}, "dtick": 1},
                   "policy_lag_mean", "policy_lag_max")
    # Room above the bound, so its line is not drawn on the frame.
    top.update(range=[-0.1, k + 0.5], autorange=False)
    stack_panels(layout, [top, pin_axis({"title": {"text": "share of kept samples (0-1)"}},
                                        "lag_share")], legend_items=len(data))
    fig = empty_note({"data": data, "layout": layout}, steps)
    if steps and not k:
        _missing(fig, SYNCHRONOUS)
    return fig


def stale_dropped(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """Samples drawn but never trained, per step: past the bound (stale), or left out by the
    algorithm (asynchronous DAPO's groups without signal, each refilled by another prompt)."""
    keys = (("samples_stale_dropped", "dropped: training them would exceed max_policy_lag"),
            ("samples_filtered", "left out by the algorithm (no signal), refilled"))
    s = selectors.step_series(run.pk, tuple(k for k, _ in keys))
    data = [line_trace(label, s["step"], s[key], PALETTE[i], max_points, mode="lines+markers")
            for i, (key, label) in enumerate(keys)]
    layout = base_layout("Samples drawn and not trained", STEP_TITLE,
                         "samples per step (samples)")
    pin_axis(layout["yaxis"], *(k for k, _ in keys))
    fig = empty_note({"data": data, "layout": layout}, s["step"])
    if s["step"] and not _asynchronous(run_config(run)):
        _missing(fig, SYNCHRONOUS)
    return fig


def ess(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """The normalised ESS of the kept responses' sequence importance ratios per step, with a
    reference level (``ESS_REFERENCE``), over the share of tokens the correction truncated."""
    s = selectors.step_series(run.pk, ("ess", "is_truncated_frac"))
    fig = panels_chart(
        "Effective sample size of the update (importance ratios pi_prox / pi_behav)",
        [("ESS, normalised (0-1)", [("ess", "ESS = (sum w)^2 / (n sum w^2)")]),
         ("share of kept tokens (0-1)",
          [("is_truncated_frac", "tokens truncated (tis, vcpo) or left out (decoupled)")])],
        s, max_points,
        references={0: (f"reference {ESS_REFERENCE:g}: half the batch's worth of on-policy "
                        f"samples (Kish)", ESS_REFERENCE)})
    if s["step"] and (not _reports_off_policy(run_config(run))
                      or all(v is None for v in s["ess"])):
        _missing(fig, NOT_RECORDED)
    return fig


def _vcpo(config: TrainConfig) -> bool:
    """Whether the run's steps carry ``baseline_shift``: VCPO's baseline is its alone."""
    return config.off_policy_correction == "vcpo" and _reports_off_policy(config)


def baseline_shift(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """How far VCPO's minimum-variance baseline moved from the algorithm's own, per step (the
    mean over the groups whose kept rewards differ), in reward units. Its own chart, not a panel
    of the ESS chart: its unit is the reward's, not a share, and only vcpo records it."""
    s = selectors.step_series(run.pk, ("baseline_shift",))
    data = [line_trace("mean |VCPO's baseline - the algorithm's baseline|", s["step"],
                       s["baseline_shift"], PALETTE[0], max_points, mode="lines+markers")]
    layout = base_layout("VCPO's baseline shift", STEP_TITLE,
                         "baseline shift (reward units)")
    pin_axis(layout["yaxis"], "baseline_shift")
    fig = empty_note({"data": data, "layout": layout}, s["step"])
    if s["step"] and (not _vcpo(run_config(run))
                      or all(v is None for v in s["baseline_shift"])):
        _missing(fig, NOT_VCPO)
    return fig


def lr_applied(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """The learning rate the optimiser steps applied (mean over the step's optimiser steps)
    against the one the schedule set: equal under tis and decoupled, below it under vcpo (each
    optimiser step's lr times the square root of its mini-batch's ESS)."""
    s = selectors.step_series(run.pk, ("lr_applied", "lr"))
    data = [line_trace("lr applied (mean over the step's optimiser steps)", s["step"],
                       s["lr_applied"], PALETTE[0], max_points, mode="lines+markers"),
            line_trace("lr the schedule set (lr, warmup)", s["step"], s["lr"], GREY, max_points,
                       line={"color": GREY, "dash": "dash", "width": 1.5})]
    layout = base_layout("Learning rate applied", STEP_TITLE, "learning rate (per optimiser step)")
    pin_axis(layout["yaxis"], "lr_applied", "lr")
    # An lr such as 1e-6 reads as a number in this format, not as Plotly's SI "1µ".
    layout["yaxis"]["exponentformat"] = "e"
    fig = empty_note({"data": data, "layout": layout}, s["step"])
    if s["step"] and (not _reports_off_policy(run_config(run))
                      or all(v is None for v in s["lr_applied"])):
        _missing(fig, NOT_RECORDED)
    return fig


# The steps the timeline draws: the last ones, each two bars (a tall chart at 40 rows).
TIMELINE_STEPS = 20
IDLE = "#BBBBBB"


def engine_timeline(run: Run, max_points: int = MAX_POINTS, **_: Any) -> Fig:
    """What the engine and the trainer did in each of the last ``TIMELINE_STEPS`` steps, one
    bar each over the step's wall time (s): the engine generating, the trainer training, both
    taking the new weights (weight transfer, ``time_sync``), and each one's idle rest, in the
    order they happen in a step (the trainer waits for ready prompts, then trains while the
    engine's tick runs; the engine is idle once its tick is done)."""
    keys = ("time_engine_busy", "time_trainer_busy", "time_sync", "time_step",
            "time_engine_idle_share", "time_trainer_idle_share", "time_overlap")
    s = selectors.step_series(run.pk, keys)
    rows = [i for i, v in enumerate(s["time_engine_busy"]) if v is not None][-TIMELINE_STEPS:]
    steps = [s["step"][i] for i in rows]
    lane = {"engine": [f"step {st} engine" for st in steps],
            "trainer": [f"step {st} trainer" for st in steps]}

    def seconds(key: str) -> list[float]:
        return [float(s[key][i] or 0.0) for i in rows]

    wall = seconds("time_step")

    def idle(key: str) -> list[float]:
        return [share * w for share, w in zip(seconds(key), wall, strict=True)]

    def bar(name: str, who: tuple[str, ...], xs: list[list[float]], color: str,
            group: str, legend: bool = True) -> dict[str, Any]:
        return {"type": "bar", "orientation": "h", "name": name, "legendgroup": group,
                "showlegend": legend, "marker": {"color": color},
                "y": [y for w in who for y in lane[w]], "x": [x for part in xs for x in part],
                "hovertemplate": "%{y}: %{x:.3f} s<extra>" + name + "</extra>"}

    data = [bar("idle", ("trainer",), [idle("time_trainer_idle_share")], IDLE, "idle"),
            bar("generating (engine)", ("engine",), [seconds("time_engine_busy")], PALETTE[0],
                "generating"),
            bar("training (trainer)", ("trainer",), [seconds("time_trainer_busy")], PALETTE[1],
                "training"),
            bar("idle", ("engine",), [idle("time_engine_idle_share")], IDLE, "idle",
                legend=False),
            bar("weight transfer", ("engine", "trainer"),
                [seconds("time_sync"), seconds("time_sync")], PALETTE[2], "sync")]
    if steps:
        both = sum(seconds("time_overlap")) / max(sum(wall), 1e-12)
        title = (f"Engine and trainer over the last {len(steps)} steps (both busy "
                 f"{both:.0%} of the time)")
    else:
        title = "Engine and trainer per step"
    # Two bars per step, the engine's over the trainer's, the latest step on top (a category
    # axis lists its categories from the bottom up).
    order = [y for st in steps for y in (f"step {st} trainer", f"step {st} engine")]
    layout = base_layout(title, "seconds into the step (s)", "step, engine or trainer",
                         barmode="stack", bargap=0.15, hovermode="closest")
    # Every lane named ("step 12 engine"), the labels given the room they need.
    layout["yaxis"].update(categoryorder="array", categoryarray=order, type="category",
                           automargin=True, dtick=1)
    layout["xaxis"]["rangemode"] = "tozero"
    fig = empty_note({"data": data, "layout": layout}, s["step"])
    if s["step"] and not _asynchronous(run_config(run)):
        _missing(fig, SYNCHRONOUS)
    elif s["step"] and not steps:
        _missing(fig, "not recorded: this run's steps carry no timeline (recorded before the "
                      "engine thread, issue 29 item 4)")
    return fig


register_section(Section("async", "Asynchronous and off-policy training",
                         "dashboard/_async_note.html"))
_entries = (
    Chart("policy_lag", policy_lag, metrics=("policy_lag_mean", "policy_lag_max"),
          applies_to=lambda ctx: _asynchronous(ctx.config), section="async", tall=True,
          caption="Look for the largest lag reaching the bound every step: generation is "
                  "then ahead as far as allowed, and the share at the bound is what the "
                  "correction has to repair; a share mostly at lag 0 means the run is "
                  "nearly synchronous and buys little overlap."),
    Chart("stale_dropped", stale_dropped, metrics=("samples_stale_dropped", "samples_filtered"),
          applies_to=lambda ctx: _asynchronous(ctx.config), section="async",
          caption="Samples paid for and thrown away. Stale drops that grow step after step "
                  "mean generation outruns the update by more than the bound absorbs: "
                  "a larger max_policy_lag, or fewer rollout resources, would waste less."),
    Chart("engine_timeline", engine_timeline,
          metrics=("time_engine_busy", "time_trainer_busy", "time_sync", "time_step",
                   "time_engine_idle_share", "time_trainer_idle_share", "time_overlap"),
          applies_to=lambda ctx: _asynchronous(ctx.config), section="async", tall=True,
          full_resolution=True,
          caption="Each step is two bars over its wall time in seconds: the engine's "
                  "(generating, idle, weight transfer) and the trainer's (idle, training, "
                  "weight transfer). Look for the side that idles: a long trainer idle means "
                  "the update waits for generation (the engine bounds the step), a long "
                  "engine idle that generation waits for the update; where both bars are "
                  "mostly busy, generation and training overlap."),
    Chart("ess", ess, metrics=("ess", "is_truncated_frac"),
          applies_to=lambda ctx: _reports_off_policy(ctx.config), section="async", tall=True,
          caption="1 means every sample weighs the same (on-policy). Look for sharp or lasting "
                  "drops: VCPO's paper (arXiv 2602.17616) found collapse preceded by falling "
                  "ESS. The dashed 0.5 is a rule of thumb marked here, not the paper's figure."),
    Chart("baseline_shift", baseline_shift, metrics=("baseline_shift",),
          applies_to=lambda ctx: _vcpo(ctx.config), section="async",
          caption="VCPO replaces each group's baseline by the one that minimises the "
                  "variance of the weighted gradient: the group's rewards weighted by w^2 "
                  "times each response's squared gradient norm, so it moves even on-policy "
                  "(0: no group's rewards differed, nothing to shift). With rewards in [0, 1] "
                  "0.5 is half their range. Look for a shift that stays high while the ESS "
                  "above is low: the baseline then follows a few heavily weighted responses."),
    Chart("lr_applied", lr_applied, metrics=("lr_applied", "lr"),
          applies_to=lambda ctx: _reports_off_policy(ctx.config), section="async",
          caption="Under vcpo each optimiser step applies the schedule's lr times the "
                  "square root of its mini-batch's ESS: a gap to the dashed line is the update "
                  "VCPO damped. Under tis and decoupled the two lines coincide."),
)
_after = "rank_split"
for _chart in _entries:
    register_chart(_chart, after=_after)
    _after = _chart.name
del _chart, _after
