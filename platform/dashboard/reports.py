"""Reports: the figure and table types of the Reinforce-Ada paper drawn from the platform's own
runs (a sweep, or any chosen set of runs).

Runs are grouped as on the compare page (``selectors.seed_groups``): runs whose settings differ
only by seed form one group, labelled by its algorithm (and by the settings that tell it from the
other groups, e.g. ``lr`` in a sweep over learning rates). A group's figures and tables use its
runs that recorded steps; the others (failed or cancelled before their first step, still queued)
are left out, and the report's groups say which and why. Figures draw each group's mean over its
seeds with a min-max band; tables give the mean ± the half-width of a 95% confidence interval
over seeds (Student t).

Every figure and table is first a list of tidy rows, which are exactly its CSV, and the figure is
drawn from those rows: what the CSV says is what the picture shows. A report is plain data
(``build_report``), cached once its runs are finished, and what the API serves.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from experiments.models import Run

from trainer.algorithms import baseline
from trainer.types import PASS_RATE_METRICS, PASS_RATE_THRESHOLDS

from . import selectors
from .charts.drawing import MAX_POINTS, PALETTE, Fig, band_traces, base_layout
from .downsample import bucket_mean

# Fig. 4 (entropy against reward) draws at most this many points per group: per-step values are
# noisy, and a trajectory of bucket means reads better than a scribble.
TRAJECTORY_POINTS = 15


@dataclass(frozen=True)
class Section:
    kind: str      # "figure" or "table"
    paper: str     # the paper's figure or table it follows
    title: str     # what it shows
    caption: str   # how it is computed from the recorded rows
    columns: tuple[str, ...]  # of the CSV


SPREAD = ("mean", "min", "max", "seeds")
SECTIONS: dict[str, Section] = {
    "pass-at-k": Section(
        "figure", "Fig. 2 type", "Held-out pass@k and all-correct ratio against k",
        "From each run's last evaluation on its eval set: pass@k (some of k samples correct) "
        "and the all-correct ratio (all k correct), unbiased estimates from the eval_k samples "
        "drawn per prompt, for k = 1 .. eval_k. Mean over seeds, band: min-max.",
        ("group", "metric", "k", *SPREAD, "eval_steps")),
    "accuracy-cost": Section(
        "figure", "Cost view", "Held-out accuracy against wall time, samples and tokens",
        "Greedy accuracy on the eval set at each evaluation, placed at the wall time (left), "
        "the cumulative samples (middle) and the cumulative generated tokens (right) the run "
        "had spent by the step it evaluated; a group's seeds at the evaluations all of them "
        "made, x their mean. Mean over seeds, band: min-max. A line further left at the same "
        "height reached that accuracy cheaper: wall time shows what asynchronous overlap buys, "
        "samples and tokens what it costs.",
        ("group", "axis", "step", "x", *SPREAD)),
    "reward": Section(
        "figure", "Fig. 3 type", "Training reward against step",
        "Real reward per step: mean reward of the first n samples of each prompt (comparable "
        "across algorithms). Mean over seeds, band: min-max.",
        ("group", "step", *SPREAD)),
    "entropy-reward": Section(
        "figure", "Fig. 4 type", "Policy entropy against training reward",
        "Per step, mean token entropy against real reward, both averaged over seeds; drawn as "
        f"a trajectory of at most {TRAJECTORY_POINTS} bucket means in step order (markers grow "
        "with the step).",
        ("group", "step", "reward", "entropy", "seeds")),
    "extra-samples": Section(
        "figure", "Fig. 5 type", "Extra samples per step",
        "Samples generated per step minus GRPO's B x n for the same batch size and group size. "
        "Mean over seeds, band: min-max.",
        ("group", "step", *SPREAD)),
    "hard-prompts": Section(
        "figure", "Fig. 5 type", "Prompts below pass-rate thresholds over training",
        "Fraction of the step's batch whose pass rate in that step is at most each threshold, "
        "estimated from each prompt's first n samples (i.i.d. under every algorithm, as for "
        "the real reward). Mean over seeds, band: min-max.",
        ("group", "threshold", "step", *SPREAD)),
    "zero-advantage": Section(
        "figure", "Family view", "Zero-advantage groups per step",
        "Per step, the fraction of the kept prompt groups whose advantages are all zero (all "
        "their rewards equal: no gradient), the trainer's zero_adv_frac step metric. Mean over "
        "seeds, band: min-max.",
        ("group", "step", *SPREAD)),
    "samples-difficulty": Section(
        "figure", "Family view", "Samples per prompt against difficulty",
        "Each prompt's pass rate over the run (from the first n samples of every step it was "
        "drawn in, i.i.d. under every algorithm), binned; per bin, the mean of its prompts' "
        "samples per step they were drawn in. Per seed, then mean over seeds; error bar: "
        "min-max; prompts: the bin's prompts per seed (mean).",
        ("group", "pass_rate_bin", "bin", "prompts", *SPREAD)),
    "table-eval": Section(
        "table", "Table 1 type", "Held-out accuracy per group",
        "From each run's last evaluation: greedy accuracy, avg@k and pass@k (k = eval_k); mean "
        "± half-width of the 95% confidence interval over seeds (Student t; none for 1 seed).",
        ("group", "seeds", "eval_steps", "k", "greedy_accuracy", "greedy_accuracy_ci95",
         "avg_at_k", "avg_at_k_ci95", "pass_at_k", "pass_at_k_ci95")),
    "table-cost": Section(
        "table", "Table 2 type", "Step time, samples and tokens per step, with ratios to GRPO",
        "Per run, the mean over its steps of the step time (generation, scoring and update) and "
        "of samples and tokens per step; then mean ± 95% CI over seeds. steps_per_seed: the "
        "steps each seed recorded (\"40\", or \"38/40\" when seeds differ), not their sum. "
        "Ratios divide by the first GRPO group's means.",
        ("group", "seeds", "steps_per_seed", "step_seconds", "step_seconds_ci95",
         "samples_per_step", "samples_per_step_ci95", "tokens_per_step", "tokens_per_step_ci95",
         "step_seconds_vs_grpo", "samples_vs_grpo")),
}
FIGURES = tuple(n for n, s in SECTIONS.items() if s.kind == "figure")
# The family report (one page per sweep, every method side by side): its sections in page order,
# each with the sentence under it saying what to look for.
FAMILY: dict[str, str] = {
    "accuracy-cost": "Look for the line that climbs highest furthest left: the method that "
                     "buys held-out accuracy cheapest, in seconds, in samples and in tokens "
                     "(a method can lead on one axis and trail on another).",
    "pass-at-k": "Look at both ends: pass@1 is accuracy, pass@k at large k is how much the "
                 "policy can still solve at all; a method that trades the second for the first "
                 "narrows its search.",
    "zero-advantage": "Look for the lowest curve: a group with all rewards equal gives no "
                      "gradient, and adaptive sampling exists to make fewer of them; GRPO's "
                      "curve is what they save against.",
    "samples-difficulty": "Look at where each method spends: GRPO's bars are flat at n; a "
                          "method that allocates by difficulty rises towards the hard bins (low "
                          "pass rate) and falls on prompts already solved; one that draws a "
                          "fixed larger pool and then selects is flat at the pool's size.",
    "table-cost": "Look at the ratios to GRPO with their intervals: a method whose accuracy "
                  "gain above comes with 2x the samples per step is not the same finding as "
                  "one at a matched budget (1.0x).",
}
TABLES = tuple(n for n, s in SECTIONS.items() if s.kind == "table")

Report = dict[str, Any]
Rows = list[dict[str, Any]]


# --- what one run contributes ------------------------------------------------------------------

def run_records(run: Run) -> dict[str, Any]:
    """The per-run reads a report needs, cached once the run has finished."""
    def compute() -> dict[str, Any]:
        steps = selectors.step_series(run.pk, ("entropy", "time_step", "zero_adv_frac",
                                                *PASS_RATE_METRICS))
        if any(v is not None for v in steps[PASS_RATE_METRICS[0]]):
            hard = {"step": steps["step"], "fractions": [steps[k] for k in PASS_RATE_METRICS]}
        else:  # recorded before the trainer computed them: from the sample rows
            hard = selectors.low_pass_rate_fractions(run, PASS_RATE_THRESHOLDS)
        return {"steps": steps, "eval": selectors.last_evals([run.pk]).get(run.pk),
                "evals": selectors.eval_cost_series(run.pk),
                "hard": hard, "bxn": selectors.group_bxn(run),
                "difficulty": selectors.prompt_difficulty(run)}

    # v2: with every evaluation at its cost (``evals``); v3: with tokens, zero-advantage
    # groups and each prompt's difficulty.
    return selectors.cached_for_finished("report-run-v3", [run], compute)


def _by_step(steps: list[int], values: Iterable[Any]) -> dict[int, float]:
    return {s: v for s, v in zip(steps, values, strict=True) if v is not None}


# --- numbers -----------------------------------------------------------------------------------

def spread(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values),
            "seeds": len(values)}


def ci95(values: list[float]) -> tuple[float | None, float | None]:
    """(mean, half-width of the two-sided 95% Student-t interval); no width for one value."""
    if not values:
        return None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    from scipy.special import stdtrit  # the t quantile; scipy.special loads fast, stats not

    t = float(stdtrit(len(values) - 1, 0.975))
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


def _per_step_rows(label: str, per_run: list[dict[int, float]], **extra: Any) -> Rows:
    steps = sorted(set().union(*per_run)) if per_run else []
    return [{"group": label, **extra, "step": st,
             **spread([v[st] for v in per_run if st in v])} for st in steps]


def _distinct(values: Iterable[int]) -> str:
    """Per-seed counts as one cell: "80" when the seeds agree, "40/80" when they differ (never
    a sum over seeds)."""
    return "/".join(str(v) for v in sorted(set(values)))


def _eval_steps(evals: list[tuple[int, dict[str, Any]]]) -> str:
    """The steps the evaluations were made at, e.g. "80" (or "40/80" for an unfinished seed)."""
    return _distinct(s for s, _ in evals)


def _eval_rows(label: str, evals: list[tuple[int, dict[str, Any]]]) -> Rows:
    rows: Rows = []
    steps = _eval_steps(evals)
    for prefix, metric in (("pass@", "pass@k"), ("all_correct@", "all-correct ratio")):
        ks = sorted({int(key[len(prefix):]) for _, m in evals for key in m
                     if key.startswith(prefix) and key[len(prefix):].isdigit()})
        for k in ks:
            values = [m[f"{prefix}{k}"] for _, m in evals if m.get(f"{prefix}{k}") is not None]
            rows.append({"group": label, "metric": metric, "k": k, **spread(values),
                         "eval_steps": steps})
    return rows


# The accuracy-cost figure's panels: (the rows' axis, the eval series' key, its axis title).
COST_AXES = (("wall_seconds", "wall_seconds", "wall time (s)"),
             ("samples", "cum_samples", "cumulative samples"),
             ("tokens", "cum_tokens", "cumulative tokens"))


# Samples per prompt against difficulty: a prompt's pass rate over the run falls in the first
# bin whose upper edge it does not exceed; never solved (0) and always solved (1) are bins of
# their own, where an adaptive sampler spends most and least.
DIFFICULTY_BINS = ((0.0, "0"), (0.25, "(0, 0.25]"), (0.5, "(0.25, 0.5]"),
                   (0.75, "(0.5, 0.75]"), (1.0, "(0.75, 1)"), (1.0, "1"))


def difficulty_bin(pass_rate: float) -> int:
    """The index in ``DIFFICULTY_BINS`` of a pass rate in [0, 1]."""
    if pass_rate >= 1.0:
        return len(DIFFICULTY_BINS) - 1
    return next(i for i, (edge, _) in enumerate(DIFFICULTY_BINS) if pass_rate <= edge)


def _difficulty_rows(label: str, per_run: list[dict[str, list[float]]]) -> Rows:
    """Per bin: each seed's mean samples per prompt-step over the bin's prompts, spread over
    the seeds that have prompts in it."""
    per_seed: list[dict[int, list[float]]] = []
    for d in per_run:
        bins: dict[int, list[float]] = {}
        for rate, samples in zip(d["pass_rate"], d["samples"], strict=True):
            bins.setdefault(difficulty_bin(rate), []).append(samples)
        if bins:
            per_seed.append(bins)
    rows: Rows = []
    for i, (_, name) in enumerate(DIFFICULTY_BINS):
        seeds = [b[i] for b in per_seed if i in b]
        if seeds:
            rows.append({"group": label, "pass_rate_bin": name, "bin": i,
                         "prompts": statistics.fmean(len(s) for s in seeds),
                         **spread([statistics.fmean(s) for s in seeds])})
    return rows


def _accuracy_cost_rows(label: str, per_run: list[dict[str, list[Any]]]) -> Rows:
    """Per cost axis, each evaluation step every seed made: x the seeds' mean spend by then,
    the spread of their greedy accuracies."""
    per_run = [e for e in per_run if e["step"]]
    common = sorted(set.intersection(*(set(e["step"]) for e in per_run))) if per_run else []
    rows: Rows = []
    for axis, key, _ in COST_AXES:
        for st in common:
            at = [e["step"].index(st) for e in per_run]
            rows.append({"group": label, "axis": axis, "step": st,
                         "x": statistics.fmean(e[key][i] for e, i in zip(per_run, at,
                                                                          strict=True)),
                         **spread([e["greedy_accuracy"][i]
                                   for e, i in zip(per_run, at, strict=True)])})
    return rows


def _table_eval_row(label: str, evals: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    ks = sorted({int(m["k"]) for _, m in evals if isinstance(m.get("k"), (int, float))})
    k = ks[-1] if ks else None
    row: dict[str, Any] = {"group": label, "seeds": len(evals), "eval_steps": _eval_steps(evals),
                           "k": k}
    for key, col in (("greedy_accuracy", "greedy_accuracy"), (f"avg@{k}", "avg_at_k"),
                     (f"pass@{k}", "pass_at_k")):
        row[col], row[f"{col}_ci95"] = ci95([m[key] for _, m in evals
                                             if m.get(key) is not None])
    return row


def _mean_or_none(values: Iterable[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _table_cost_rows(groups: list[selectors.RunGroup],
                     recs: dict[int, dict[str, Any]]) -> Rows:
    rows: Rows = []
    for group in groups:
        per_run = [recs[r.pk]["steps"] for r in group.used if recs[r.pk]["steps"]["step"]]
        row: dict[str, Any] = {"group": group.label, "seeds": len(per_run),
                               "steps_per_seed": _distinct(len(s["step"]) for s in per_run)}
        for key, col in (("time_step", "step_seconds"), ("samples", "samples_per_step"),
                         ("tokens", "tokens_per_step")):
            row[col], row[f"{col}_ci95"] = ci95(
                [m for s in per_run if (m := _mean_or_none(s[key])) is not None])
        rows.append(row)
    base = next((row for row, g in zip(rows, groups, strict=True)
                 if g.algorithm == baseline().name and row["seeds"]), None)
    for row in rows:
        for col, ratio in (("step_seconds", "step_seconds_vs_grpo"),
                           ("samples_per_step", "samples_vs_grpo")):
            ok = base is not None and row[col] is not None and base[col]
            row[ratio] = row[col] / base[col] if ok else None
    return rows


def build_report(runs: list[Run]) -> Report:
    """Groups and the tidy rows of every figure and table (plain data: cached, served as JSON
    by the API)."""
    groups = selectors.seed_groups(runs)
    recs = {r.pk: run_records(r) for g in groups for r in g.used}
    rows: dict[str, Rows] = {name: [] for name in SECTIONS}

    def series(run: Run, column: str, transform: Callable[[float], float] = float
               ) -> dict[int, float]:
        s = recs[run.pk]["steps"]
        return {st: transform(v) for st, v in _by_step(s["step"], s[column]).items()}

    for group in groups:
        label, members = group.label, group.used
        evals = [recs[r.pk]["eval"] for r in members if recs[r.pk]["eval"]]
        rows["pass-at-k"] += _eval_rows(label, evals)
        rows["accuracy-cost"] += _accuracy_cost_rows(label, [recs[r.pk]["evals"]
                                                             for r in members])
        if evals:
            rows["table-eval"].append(_table_eval_row(label, evals))
        rows["reward"] += _per_step_rows(label, [series(r, "real_reward") for r in members])
        rows["zero-advantage"] += _per_step_rows(label, [series(r, "zero_adv_frac")
                                                         for r in members])
        rows["samples-difficulty"] += _difficulty_rows(label, [recs[r.pk]["difficulty"]
                                                               for r in members])
        rows["extra-samples"] += _per_step_rows(label, [
            series(r, "samples", lambda v, bxn=recs[r.pk]["bxn"]: v - bxn) for r in members])
        for i, t in enumerate(PASS_RATE_THRESHOLDS):
            rows["hard-prompts"] += _per_step_rows(label, [
                _by_step(recs[r.pk]["hard"]["step"], recs[r.pk]["hard"]["fractions"][i])
                for r in members], threshold=t)
        rewards = [series(r, "real_reward") for r in members]
        entropies = [series(r, "entropy") for r in members]
        for st in sorted(set().union(*rewards)):
            both = [(rw[st], en[st]) for rw, en in zip(rewards, entropies, strict=True)
                    if st in rw and st in en]
            if both:
                rows["entropy-reward"].append({
                    "group": label, "step": st, "reward": statistics.fmean(b[0] for b in both),
                    "entropy": statistics.fmean(b[1] for b in both), "seeds": len(both)})
    rows["table-cost"] = _table_cost_rows(groups, recs)
    # Each group's "runs" and "seeds" are those its rows use; "left_out" the others, with why.
    return {"groups": [g.as_dict() for g in groups], "rows": rows}


# The cache's name for whole reports; a new one when a report's layout changes, so that a report
# cached by an earlier version (without its groups' left-out runs; v3: without accuracy-cost;
# v4: without tokens, zero-advantage groups and samples against difficulty) is not served.
REPORT_CACHE = "report-v4"


def cached_report(runs: list[Run]) -> Report:
    return selectors.cached_for_finished(REPORT_CACHE, runs, lambda: build_report(runs))


def to_csv(report: Report, name: str) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=SECTIONS[name].columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(report["rows"][name])
    return out.getvalue()


# --- figures -----------------------------------------------------------------------------------

def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _columns(rows: Rows, *names: str) -> list[list[Any]]:
    return [[r[n] for r in rows] for n in names]


def _note(fig: Fig, text: str) -> Fig:
    fig["layout"]["annotations"] = [*fig["layout"].get("annotations", []), {
        "text": text, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
        "y": 0.5}]
    return fig


def _panels(layout: dict[str, Any], n: int, xtitle: str, ytitle: str,
            subtitles: list[str]) -> None:
    """``n`` side-by-side subplots sharing a y range, with a title above each."""
    gap = 0.06
    width = (1 - gap * (n - 1)) / n
    annotations = []
    for i in range(n):
        suffix = "" if i == 0 else str(i + 1)
        lo = i * (width + gap)
        layout[f"xaxis{suffix}"] = {"title": {"text": xtitle}, "domain": [lo, lo + width],
                                    "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"title": {"text": ytitle if i == 0 else ""},
                                    "anchor": f"x{suffix}", "range": [-0.02, 1.02]}
        if i:
            layout[f"yaxis{suffix}"]["matches"] = "y"
        annotations.append({"text": subtitles[i], "showarrow": False, "xref": "paper",
                            "yref": "paper", "x": lo + width / 2, "y": 1.0, "yanchor": "bottom",
                            "font": {"size": 13}})
    layout["annotations"] = annotations


def _bands(by_group: list[tuple[int, str, Rows]], x: str, max_points: int,
           panels: tuple[str, tuple[Any, ...]] | None = None, **line: Any) -> list[Fig]:
    """Each group's mean line over its min-max band, against ``x``; with ``panels`` (a column
    and its values) one subplot per value, the legend entry on the first."""
    column, values = panels or ("", (None,))
    data: list[Fig] = []
    for i, label, rows in by_group:
        for p, value in enumerate(values):
            sub = [r for r in rows if not column or r[column] == value]
            if not sub:
                continue
            axes = {"xaxis": f"x{p + 1}", "yaxis": f"y{p + 1}"} if p else {}
            xs, mean, lo, hi = _columns(sub, x, "mean", "min", "max")
            traces = band_traces(label, xs, mean, lo, hi, _color(i), max_points, group=label,
                                 band_legend=False, **axes)
            traces[-1].update(showlegend=p == 0, **line)
            data += traces
    return data


def figure(report: Report, name: str, max_points: int = MAX_POINTS) -> Fig:
    """The plotly figure of ``name`` (one of ``FIGURES``) drawn from the report's rows."""
    section = SECTIONS[name]
    rows = report["rows"][name]
    data: list[dict[str, Any]] = []
    by_group = [(i, g["label"], [r for r in rows if r["group"] == g["label"]])
                for i, g in enumerate(report["groups"])]
    title = section.title
    if name in ("reward", "extra-samples", "zero-advantage"):
        ytitle = {"reward": "real reward (0-1)",
                  "extra-samples": "samples per step above B x n (samples)",
                  "zero-advantage": "fraction of kept groups (0-1)"}[name]
        data = _bands(by_group, "step", max_points)
        layout = base_layout(f"{title} (mean over seeds, band: min-max)", "training step", ytitle)
    elif name == "entropy-reward":
        for i, label, g in by_group:
            if g:
                steps, reward, entropy = _columns(g, "step", "reward", "entropy")
                bx, by = bucket_mean(steps, reward, TRAJECTORY_POINTS)
                _, be = bucket_mean(steps, entropy, TRAJECTORY_POINTS)
                # Markers grow with the step, so the direction of travel reads at a glance.
                sizes = [4 + 8 * k / max(1, len(bx) - 1) for k in range(len(bx))]
                data.append({"type": "scatter", "mode": "lines+markers", "name": label,
                             "x": by, "y": be, "text": [f"steps around {round(s)}" for s in bx],
                             "hovertemplate": "%{text}: reward %{x:.3f}, entropy %{y:.3f}"
                                              "<extra></extra>",
                             "line": {"color": _color(i), "width": 1.5},
                             "marker": {"size": sizes}})
        layout = base_layout(f"{title} (mean over seeds, in step order)",
                             "real reward (0-1)", "mean token entropy (nats)", hovermode="closest")
    elif name == "pass-at-k":
        layout = base_layout(f"{title} (last evaluation; mean over seeds, band: min-max)", "", "",
                             hovermode="closest")
        metrics = ("pass@k", "all-correct ratio")
        _panels(layout, 2, "k (samples per prompt)", "fraction of eval prompts (0-1)",
                ["held-out pass@k", "all-correct ratio"])
        data = _bands(by_group, "k", max_points, ("metric", metrics), mode="lines+markers")
        for axis in ("xaxis", "xaxis2"):
            layout[axis].update(type="log", tickvals=[1, 2, 4, 8, 16, 32, 64, 128])
    elif name == "accuracy-cost":
        layout = base_layout(f"{title} (mean over seeds, band: min-max)", "", "")
        _panels(layout, len(COST_AXES), COST_AXES[0][2], "greedy accuracy on the eval set (0-1)",
                [f"against {t.split(' (')[0]}" for _, _, t in COST_AXES])
        for i, (_, _, xtitle) in enumerate(COST_AXES[1:], start=2):
            layout[f"xaxis{i}"]["title"]["text"] = xtitle
        data = _bands(by_group, "x", max_points, ("axis", tuple(a for a, _, _ in COST_AXES)),
                      mode="lines+markers")
    elif name == "samples-difficulty":
        layout = base_layout(f"{title} (mean over seeds, error bar: min-max)",
                             "prompt's pass rate over the run (binned)",
                             "samples per prompt per step (samples)", hovermode="closest",
                             barmode="group")
        layout["xaxis"].update(type="category", categoryorder="array",
                               categoryarray=[n for _, n in DIFFICULTY_BINS])
        for i, label, g in by_group:
            if g:
                bins, mean, lo, hi, prompts = _columns(g, "pass_rate_bin", "mean", "min", "max",
                                                       "prompts")
                data.append({"type": "bar", "name": label, "x": bins, "y": mean,
                             "marker": {"color": _color(i)}, "customdata": prompts,
                             "hovertemplate": "%{x}: %{y:.1f} samples per prompt-step "
                                              "(%{customdata:.1f} prompts)<extra></extra>",
                             "error_y": {"type": "data", "symmetric": False,
                                         "array": [h - m for h, m in zip(hi, mean, strict=True)],
                                         "arrayminus": [m - x for m, x in zip(mean, lo,
                                                                              strict=True)]}})
    elif name == "hard-prompts":
        layout = base_layout(f"{title} (mean over seeds, band: min-max)", "", "")
        subtitles = ["pass rate = 0" if t == 0 else f"pass rate ≤ {t:g}"
                     for t in PASS_RATE_THRESHOLDS]
        _panels(layout, len(PASS_RATE_THRESHOLDS), "training step",
                "fraction of the batch (0-1)", subtitles)
        data = _bands(by_group, "step", max_points, ("threshold", PASS_RATE_THRESHOLDS))
    else:
        raise KeyError(name)
    layout["height"] = 440
    fig = {"data": data, "layout": layout}
    if not rows:
        _note(fig, "no held-out evaluation recorded (needs an eval set and eval_every > 0)"
              if name in ("pass-at-k", "accuracy-cost") else "no steps recorded yet")
    return fig
