"""Reads for the dashboard's pages and charts.

Everything that touches many rows aggregates in PostgreSQL and walks the indexes the schema
provides: (run, step) on steps and round stats, (run, prompt, step) on prompt-steps and
(run, prompt, step, index) on samples. A 600-step x 512-prompt run has 300k prompt-steps and
millions of samples, so nothing here loads rows into Python that it does not return.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Exists, Max, OuterRef
from django.utils import timezone
from experiments.models import (
    Estimate,
    EvalResult,
    Prompt,
    PromptSet,
    PromptStep,
    RoundStat,
    Run,
    Sample,
    Step,
    Sweep,
)
from experiments.selectors import SweepStatus, sweep_runs, sweep_statuses

from trainer import formatting as fmt
from trainer.algorithms import algorithms, get_algorithm, is_algorithm
from trainer.config import NOT_TRAINING, TrainConfig
from trainer.distributed.placement import COLOCATED, ROLLOUT, TRAIN

from . import metrics as declared_metrics

# The Step.metrics keys a chart may read are the trainer's declarations
# (``dashboard.metrics.METRIC_KEYS``); values are cast in SQL so Python never parses the JSON.
METRIC_KEYS = declared_metrics.METRIC_KEYS
# Step columns step_series always returns (a metric of the same name is read from the column).
STEP_COLUMNS = ("step", "real_reward", "kept_reward", "samples", "tokens", "wall_seconds",
                "cum_samples", "cum_tokens")

# DASHBOARD_CACHE=0 turns the cache of finished runs' aggregates off (the benchmark measures the
# uncached path with it).
CACHE_FINISHED = os.environ.get("DASHBOARD_CACHE", "1") != "0"

def algorithm_labels() -> dict[str, str]:
    """Name -> label of every registered algorithm (``trainer.algorithms``), in registry order;
    read live, so an algorithm registered later is listed too."""
    return {a.name: a.label for a in algorithms()}


def algorithm_label(algorithm: str, group_size: int | None = None) -> str:
    """How the dashboard names an algorithm; with ``group_size``, GRPO's ("GRPO n=16"): GRPO
    with a larger group is another budget, the others keep n for the update only. A name no
    longer registered (a run of a removed algorithm) shows as itself."""
    if not is_algorithm(algorithm):
        return algorithm
    return get_algorithm(algorithm).label_for(group_size)


# How a run's sampling settings read, per config field an algorithm lists in its record's
# ``summary_fields``: (on the run page, in the runs list's cell, in that cell's title). A field
# not listed here reads "field = value".
SHAPE_WORDS = {
    "group_size": ("n = {}", "{}", "n = {}"),
    "samples_per_round": ("M = {}", "{}", "M = {} samples per round"),
    "max_rounds": ("N = {}", "×{}", "N = {} rounds"),
    "budget_per_prompt": ("budget {} samples per prompt", "{}/prompt",
                          "{} samples per prompt on average (Est allocates them by the pass-rate "
                          "estimate, in one round)"),
    "max_num_gen_batches": ("up to {} batches", "≤{} batches",
                            "up to {} generation batches of G = dapo_gen_batch_size prompts "
                            "per step"),
}


def run_shape(run: Run) -> dict[str, str]:
    """A run's batch and sampling settings in words, from its algorithm's ``summary_fields``:
    ``meta`` for the run page ("B = 32 prompts, n = 4, M = 8, N = 4"), ``short`` and ``title``
    for the runs list ("32 · 4 · 8×4")."""
    config = TrainConfig.from_stored(run.config)
    fields = get_algorithm(run.algorithm).summary_fields if is_algorithm(run.algorithm) \
        else ("group_size",)
    generic = ("{f} = {{}}", "{{}}", "{f} = {{}}")
    words = [(f, SHAPE_WORDS.get(f) or tuple(w.format(f=f) for w in generic)) for f in fields
             if hasattr(config, f)]
    # Numbers as everywhere ("2,048"; trainer.formatting).
    cfg = {f: fmt.number(getattr(config, f)) for f, _ in words}
    batch = fmt.number(config.batch_size)
    meta = [f"B = {fmt.count(config.batch_size, 'prompt')}",
            f"n = {fmt.number(config.group_size)}"]
    meta += [w[0].format(cfg[f]) for f, w in words if f != "group_size"]
    short = batch
    for f, w in words:
        part = w[1].format(cfg[f])
        short += part if part.startswith("×") else f" · {part}"
    title = ", ".join([f"B = {batch} prompts per step",
                       *(w[2].format(cfg[f]) for f, w in words)])
    return {"meta": ", ".join(meta), "short": short, "title": title}


def _fetch(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def positive_sql(cfg: TrainConfig) -> tuple[str, list[Any]]:
    """A sample row's "positive" as the run counted it (``positive_metric``), as an SQL
    condition and its parameters. A row stores the shaped reward; where positives read the
    verifier's score and overlong shaping was on, the score is the reward less the penalty of
    its ``tokens`` (``trainer.rewards.overlong_penalty``: min(0, -(tokens - (L - B)) / B x f))."""
    if cfg.overlong_buffer_len > 0 and cfg.positive_metric in ("acc", "score"):
        L, B = cfg.max_new_tokens, cfg.overlong_buffer_len
        return ("(reward - LEAST(0.0, -((tokens - %s)::float8 / %s) * %s)) > %s",
                [L - B, B, cfg.overlong_penalty_factor, cfg.positive_threshold])
    return "reward > %s", [cfg.positive_threshold]


# --- runs --------------------------------------------------------------------------------------
# The runs themselves are read in ``experiments/selectors.py`` (the API reads them too).

@dataclass
class SweepGroup:
    """A sweep's rows in the runs list: the sweep, the status of all its runs (not only the
    ones the filters show) and the shown runs."""

    sweep: Sweep
    status: SweepStatus
    runs: list[Run]
    can_manage: bool = False  # set by the view: may the user cancel it?
    is_sweep: bool = True
    # What its compare and report leave out for good: the notes of its groups with a finished
    # run that recorded no step (``RunGroup.note``).
    left_out: list[str] = field(default_factory=list)


def group_sweeps(runs: list[Run]) -> list[Run | SweepGroup]:
    """The runs in list order, with each sweep's runs gathered under one group at the place of
    its first run in the list (runs are ordered by the grid within it)."""
    items: list[Run | SweepGroup] = []
    groups: dict[int, SweepGroup] = {}
    for run in runs:
        if run.sweep_id is None:
            items.append(run)
        elif run.sweep_id in groups:
            groups[run.sweep_id].runs.append(run)
        else:
            groups[run.sweep_id] = SweepGroup(run.sweep, SweepStatus(), [run])
            items.append(groups[run.sweep_id])
    for sid, status in sweep_statuses(list(groups)).items():
        groups[sid].status = status
        # The grid's order; a run a retry replaced just before its retry.
        groups[sid].runs.sort(key=lambda r: (r.sweep_index is None, r.sweep_index or 0, r.pk))
    for sid, notes in sweeps_left_out(list(groups)).items():
        groups[sid].left_out = notes
    return items


def sweeps_left_out(sweep_ids: list[int]) -> dict[int, list[str]]:
    """Per sweep, the notes (``RunGroup.note``) of its groups that leave out a finished run:
    one that failed, was cancelled or succeeded without recording a step, and so is missing
    from the sweep's compare and report for good (queued and running runs are counted by the
    status already). Sweeps without one are absent; one query when none has one."""
    finished = [s for s in Run.Status.values if s not in Run.ACTIVE_STATUSES]
    # A run a retry took the place of is not the sweep's any more (``sweep_runs``).
    ids = set(Run.objects.filter(sweep_id__in=sweep_ids, status__in=finished,
                                 replaced_by__isnull=True)
              .exclude(Exists(Step.objects.filter(run_id=OuterRef("pk"))))
              .values_list("sweep_id", flat=True))
    out: dict[int, list[str]] = {}
    for sid in sorted(ids):
        runs = list(sweep_runs(sid))
        out[sid] = [g.note for g in seed_groups(runs)
                    if any(m.run.status in finished for m in g.left_out)]
    return out


def answer_note(prompt_set: PromptSet, prompt: Prompt | None = None) -> str:
    """Words on how the set's answers are written where it is not the obvious way: the built-in
    task's answers are the sum's digits reversed ("749" answers 946+1=), its long variant's the
    running sums so written, separated by spaces."""
    from trainer.tasks import ANSWER_FORMAT, LONG_ANSWER_FORMAT

    if prompt_set.source != PromptSet.Source.BUILTIN:
        return ""
    # Generated and CLI-imported long sets both name their task in the description.
    if "arithmetic-long" in prompt_set.description:
        if prompt is None:
            return f"answers are {LONG_ANSWER_FORMAT}"
        sums = " ".join(s[::-1] for s in prompt.answer.split())
        return f"{LONG_ANSWER_FORMAT}: {prompt.answer} are the sums {sums}"
    if prompt is None:
        return f"answers are {ANSWER_FORMAT}"
    return f"{ANSWER_FORMAT}: {prompt.answer} is the sum {prompt.answer.strip()[::-1]}"


def skipped_updates(run: Run) -> dict[str, int] | None:
    """The optimiser steps a run skipped for a non-finite gradient norm (``skipped_updates``):
    how many in all, over how many training steps, and the latest such step; None when none."""
    rows = list(Step.objects.filter(run=run, metrics__skipped_updates__gt=0)
                .order_by("step").values_list("step", "metrics__skipped_updates"))
    if not rows:
        return None
    return {"total": int(sum(float(v) for _, v in rows)), "steps": len(rows),
            "last": rows[-1][0],
            "max": TrainConfig.from_stored(run.config).max_skipped_updates}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def _ids(kind: str, ids: list[int], most: int = 3) -> str:
    """ "run #12", "runs #12, #13, #14 and 2 more" """
    shown = ", ".join(f"#{i}" for i in ids[:most])
    more = f" and {len(ids) - most:,} more" if len(ids) > most else ""
    return f"{fmt.plural(kind, len(ids))} {shown}{more}"


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued run stands on its queue: ``place`` 1 is the next run the queue's workers
    take; ``ahead`` the queued runs they take before it, in order; ``busy`` the runs and
    estimates running on the queue now (each holds a worker)."""

    queue: str
    place: int
    ahead: list[int]
    busy_runs: list[int]
    busy_estimates: list[int]
    on_broker: bool = True

    @property
    def text(self) -> str:
        text = f"{_ordinal(self.place)} in the {self.queue} queue"
        if self.ahead:
            text += f", behind {_ids('run', self.ahead)} (queued)"
        busy = [f"{_ids('run', self.busy_runs)} (running)"] if self.busy_runs else []
        if self.busy_estimates:
            busy.append(f"{_ids('estimate', self.busy_estimates)} (running)")
        if busy:
            text += f"; its workers are busy with {' and '.join(busy)}"
        elif not self.ahead:
            text += "; no run holds its workers, so one takes it shortly (if one is up)"
        if not self.on_broker:
            text += ("; not on the broker yet (it was down when the run was queued): a worker "
                     "puts it there once the broker is back")
        return text


def fair_queue(queue: str) -> list[int]:
    """The queued runs of ``queue`` in the order the workers take them if nothing else
    changes: ``services.take_next_run``'s order (``FAIR_PICK``) applied pick after pick, each
    pick counting as one more run executing for its user and making that user the latest
    served. One user's many queued runs interleave with the others' instead of going first."""
    live = timezone.now() - dt.timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS)
    runs = Run.objects.filter(queue=queue)
    executing = Counter(runs.filter(status=Run.Status.RUNNING, heartbeat_at__gte=live)
                        .exclude(lease_owner="").values_list("owner_id", flat=True))
    served: dict[int, tuple[int, float]] = {
        owner: (0, at.timestamp()) for owner, at in runs.values("owner_id").annotate(
            at=Max("started_at")).values_list("owner_id", "at") if at is not None}
    waiting: dict[int, list[int]] = {}
    for pk, owner in runs.filter(status=Run.Status.QUEUED).order_by("pk").values_list(
            "pk", "owner_id"):
        waiting.setdefault(owner, []).append(pk)
    order: list[int] = []
    for pick in range(sum(len(v) for v in waiting.values())):
        owner = min((o for o in waiting if waiting[o]), key=lambda o: (
            executing[o], served.get(o, (-1, 0.0)), waiting[o][0]))
        order.append(waiting[owner].pop(0))
        executing[owner] += 1
        served[owner] = (1, float(pick))
    return order


def queue_place(run: Run) -> QueuePlace | None:
    """The queued run's place on its queue (None unless queued), in the workers' fair order
    (``fair_queue``); a run the broker has not taken yet (it was down at launch) is in that
    order too: a worker takes whichever run is next, whatever message it got."""
    if run.status != Run.Status.QUEUED:
        return None
    order = fair_queue(run.queue)
    ahead_ids = order[:order.index(run.pk)] if run.pk in order else order
    busy_runs = list(Run.objects.filter(queue=run.queue, status=Run.Status.RUNNING)
                     .order_by("pk").values_list("pk", flat=True))
    busy_estimates = list(Estimate.objects.filter(queue=run.queue,
                                                  status=Estimate.Status.RUNNING)
                          .order_by("pk").values_list("pk", flat=True))
    return QueuePlace(queue=run.queue, place=len(ahead_ids) + 1, ahead=ahead_ids,
                      busy_runs=busy_runs, busy_estimates=busy_estimates,
                      on_broker=run.enqueued_at is not None)


ETA_RECENT_STEPS = 21  # the step gaps the ETA takes its median of
ETA_RECENT_EVALS = 5   # the held-out evaluations whose median duration it adds per evaluation


def _hms(seconds: float) -> str:
    return str(dt.timedelta(seconds=round(max(seconds, 0.0))))


@dataclass(frozen=True)
class RunEta:
    """What is left of a running run: its steps (``per_step`` seconds each, evaluation pauses
    left out) and its held-out evaluations (``evals_left``, the one under way included; each
    ``eval_seconds`` as measured, None before one was). ``total`` adds them up, leaving out
    evaluations not timed yet (the text says so)."""

    total: dt.timedelta
    per_step: float
    evals_left: int
    eval_seconds: float | None

    def __str__(self) -> str:
        text = f"{_hms(self.total.total_seconds())} (h:mm:ss"
        if self.evals_left and self.eval_seconds is not None:
            text += (f"; {fmt.count(self.evals_left, 'held-out evaluation')} of about "
                     f"{_hms(self.eval_seconds)} included")
        elif self.evals_left:
            text += f"; plus {fmt.count(self.evals_left, 'held-out evaluation')}, not timed yet"
        return text + ")"


def run_eta(run: Run, now: dt.datetime | None = None) -> RunEta | None:
    """Remaining time: a step's time times the steps left, plus one held-out evaluation's
    measured time for each evaluation left; None before the first step.

    A step's time is the median gap between the run's last recorded steps (everything a step
    costs: generation, update, recording, checkpoints) with the evaluation that followed a step
    taken out of its gap: an evaluation every 20 steps made one gap in 20 minutes long, and
    the ETA that counted steps only fell short by the evaluations still to come, then lagged
    while one ran. An evaluation's time runs from its step's record to its own (the loop
    evaluates right after recording the step); the median of the last few. The median, not the
    mean since the start: a run that was interrupted, waited for GPUs or sat out a database
    outage has one long gap in its record, which would inflate a mean for the rest of the
    run."""
    # Only while it trains: an interrupted run (queued again), or one waiting for its ranks'
    # GPUs, would extrapolate a growing ETA.
    if (run.status != Run.Status.RUNNING or run.waiting_for or not run.started_at
            or run.current_step == 0):
        return None
    now = now or timezone.now()
    steps = dict(Step.objects.filter(run=run).order_by("-step")
                 .values_list("step", "created_at")[:ETA_RECENT_STEPS])
    every = TrainConfig.from_stored(run.config).eval_every if run.eval_set_id else 0
    # Evaluation k ran from step k's record to its own. Step 0's follows the model's load,
    # not a recorded step: never timed.
    took: dict[int, float] = {}
    if every:
        evals = dict(EvalResult.objects.filter(run=run, step__gte=1).order_by("-step")
                     .values_list("step", "created_at")[:ETA_RECENT_STEPS + ETA_RECENT_EVALS])
        stamps = {**dict(Step.objects.filter(run=run, step__in=[k for k in evals
                                                                 if k not in steps])
                         .values_list("step", "created_at")), **steps}
        took = {k: (at - stamps[k]).total_seconds() for k, at in evals.items() if k in stamps}
    recent = [took[k] for k in sorted(took, reverse=True)[:ETA_RECENT_EVALS]]
    eval_seconds = max(statistics.median(recent), 0.0) if recent else None
    gaps = [(steps[k + 1] - steps[k]).total_seconds() - took.get(k, 0.0)
            for k in steps if k + 1 in steps]
    if gaps:
        per_step = max(statistics.median(gaps), 0.0)
    else:  # one step so far: its time includes the model's load
        per_step = max((now - run.started_at).total_seconds() / run.current_step, 0.0)
    seconds = per_step * max(run.total_steps - run.current_step, 0)
    evals_left = 0
    if every:
        evals_left = max(run.total_steps // every - run.current_step // every, 0)
        if eval_seconds is not None:
            seconds += evals_left * eval_seconds
        at = steps.get(run.current_step)
        if run.current_step % every == 0 and run.current_step not in took and at is not None:
            evals_left += 1  # evaluating now: what is left of it
            if eval_seconds is not None:
                seconds += max(eval_seconds - (now - at).total_seconds(), 0.0)
    return RunEta(total=dt.timedelta(seconds=round(seconds)), per_step=per_step,
                  evals_left=evals_left, eval_seconds=eval_seconds)


def group_bxn(run: Run) -> int:
    """Samples GRPO spends per step: B x n."""
    cfg = TrainConfig.from_stored(run.config)
    return cfg.batch_size * cfg.group_size


# --- per-step series ---------------------------------------------------------------------------

def step_series(run_id: int, metrics: tuple[str, ...] = ()) -> dict[str, list[Any]]:
    """Columns of every recorded step in step order, plus the requested metrics from the JSON.

    Cumulative samples and tokens are window sums in SQL so the compare page can switch its x axis
    without another query.
    """
    unknown = [m for m in metrics if m not in METRIC_KEYS]
    if unknown:
        raise ValueError(f"unknown metrics: {unknown}")
    metrics = tuple(dict.fromkeys(m for m in metrics if m not in STEP_COLUMNS))
    extra = ", (metrics->>%s)::float" * len(metrics)
    rows = _fetch(
        f"SELECT step, real_reward, kept_reward, samples, tokens, wall_seconds, "
        f"SUM(samples) OVER w, SUM(tokens) OVER w{extra} "
        f"FROM {Step._meta.db_table} WHERE run_id = %s WINDOW w AS (ORDER BY step) ORDER BY step",
        [*metrics, run_id])
    base = [*STEP_COLUMNS, *metrics]
    cols: dict[str, list[Any]] = {name: [] for name in base}
    for row in rows:
        for name, value in zip(base, row, strict=True):
            cols[name].append(float(value) if name in ("cum_samples", "cum_tokens") else value)
    return cols


# --- ranks of a world_size > 1 run --------------------------------------------------------------

def run_placement(run_id: int) -> list[dict[str, Any]]:
    """Where the run executes: its latest recorded step's ranks (rank, role, node, device), in
    rank order; [] for a one-process run or before the first step. A resumed run may have moved,
    so the latest step is the one that says. ``role`` says what the rank does ("rollout":
    generates only, "train": trains only, "train+rollout": both, colocated); ranks recorded
    before the rollout/train split (no role) did both."""
    rows = _fetch(f"SELECT ranks FROM {Step._meta.db_table} WHERE run_id = %s "
                  "AND jsonb_array_length(ranks) > 0 ORDER BY step DESC LIMIT 1", [run_id])
    ranks = (json.loads(rows[0][0]) if isinstance(rows[0][0], str) else rows[0][0]) if rows else []
    # A rank recorded before the rollout/train split (no role) did both: COLOCATED.
    return sorted(({"rank": r["rank"], "role": r.get("role") or COLOCATED, "node": r["node"],
                    "device": r["device"]} for r in ranks), key=lambda r: r["rank"])


def placement_split(placement: list[dict[str, Any]]) -> dict[str, int] | None:
    """{"rollout": ranks that only generate, "train": ranks that only train} of a run that
    splits them (``rollout_ranks`` > 0); None where every rank does both."""
    roles = Counter(r["role"] for r in placement)
    if not roles or set(roles) == {COLOCATED}:
        return None
    return {ROLLOUT: roles.get(ROLLOUT, 0), TRAIN: roles.get(TRAIN, 0)}


@dataclass(frozen=True)
class RankSeries:
    """Per rank, per recorded step, each part of its step time (s): ``parts[rank][part]`` is a
    list aligned with ``steps``. ``nodes[rank]`` is the rank's latest node, ``roles[rank]`` its
    latest role (``run_placement``)."""

    steps: list[int]
    parts: dict[int, dict[str, list[float | None]]]
    nodes: dict[int, str]
    roles: dict[int, str] = field(default_factory=dict)

    def totals(self, rank: int) -> list[float | None]:
        cols = list(self.parts[rank].values())
        return [None if any(v is None for v in vals) else float(sum(vals))  # type: ignore[arg-type]
                for vals in zip(*cols, strict=True)]


def rank_series(run_id: int, part_keys: tuple[str, ...]) -> RankSeries:
    """Every recorded step's per-rank split of ``part_keys`` (RankRecord fields)."""
    rows = _fetch(f"SELECT step, ranks FROM {Step._meta.db_table} WHERE run_id = %s "
                  "AND jsonb_array_length(ranks) > 0 ORDER BY step", [run_id])
    steps: list[int] = []
    parts: dict[int, dict[str, list[float | None]]] = {}
    nodes: dict[int, str] = {}
    roles: dict[int, str] = {}
    for i, (step, ranks) in enumerate(rows):
        steps.append(step)
        ranks = json.loads(ranks) if isinstance(ranks, str) else ranks
        for r in ranks:
            k = int(r["rank"])
            cols = parts.setdefault(k, {p: [None] * i for p in part_keys})
            for p in part_keys:
                cols[p].append(r.get(p))
            nodes[k] = str(r.get("node", ""))
            roles[k] = str(r.get("role") or COLOCATED)
        for cols in parts.values():  # a rank missing from a step: a gap, not a shift
            for p in part_keys:
                if len(cols[p]) < i + 1:
                    cols[p].append(None)
    return RankSeries(steps, dict(sorted(parts.items())), nodes, roles)


def is_eval_fraction(key: str) -> bool:
    """Whether an evaluation metric is a fraction of the eval prompts (greedy accuracy, avg@k,
    pass@k); the others (prompts, k, verifier errors) are counts."""
    return key == "greedy_accuracy" or key.startswith(("avg@", "pass@"))


def eval_headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """An evaluation without its per-j curves: greedy accuracy, avg@k and pass@k at the run's k
    (``eval_k``) and the counts; ``pass@j`` (j < k) and ``all_correct@j`` stay for the report's
    pass@k figure."""
    k = metrics.get("k")
    # Recorded metrics are floats (k arrives as 8.0); the keys spell k as an integer.
    headline = f"pass@{int(k)}" if isinstance(k, (int, float)) else None

    def curve(key: str) -> bool:
        return key.startswith("all_correct@") or (
            headline is not None and key.startswith("pass@") and key != headline)

    return {m: v for m, v in metrics.items() if not curve(m)}


def step_metric(run_id: int, step: int, key: str) -> float | None:
    """One metric of one step (None when the step or the key is missing)."""
    if key not in METRIC_KEYS:
        raise ValueError(f"unknown metric: {key}")
    rows = _fetch(f"SELECT (metrics->>%s)::float FROM {Step._meta.db_table} "
                  f"WHERE run_id = %s AND step = %s", [key, run_id, step])
    return rows[0][0] if rows else None


def eval_series(run_id: int) -> dict[str, Any]:
    """Held-out evaluations in step order: {"step": [...], metric: [...]} for the headline
    fractions (``eval_headline``); counts such as ``prompts`` and ``k`` are left out."""
    rows = [(step, eval_headline(m)) for step, m in EvalResult.objects.filter(run_id=run_id)
            .order_by("step").values_list("step", "metrics")]
    keys = sorted({k for _, m in rows for k in m if is_eval_fraction(k)})
    out: dict[str, Any] = {"step": [s for s, _ in rows]}
    for k in keys:
        out[k] = [m.get(k) for _, m in rows]
    return out


def eval_cost_series(run_id: int) -> dict[str, list[Any]]:
    """Each held-out evaluation's greedy accuracy at what the run had spent by the step it
    evaluated: ``step``, ``wall_seconds`` (the step's wall time since the run started),
    ``cum_samples`` and ``cum_tokens`` (samples drawn and tokens generated up to it), with
    ``greedy_accuracy``; an evaluation before the first step (step 0) at 0 s, 0 samples and 0
    tokens, one at a step not recorded left out. Wall time, samples and tokens, not steps, are
    what a synchronous run and its asynchronous twin, or two algorithms, share."""
    e = eval_series(run_id)
    s = step_series(run_id)
    at = {st: (w, c, t) for st, w, c, t in zip(s["step"], s["wall_seconds"], s["cum_samples"],
                                               s["cum_tokens"], strict=True)}
    at[0] = (0.0, 0.0, 0.0)
    out: dict[str, list[Any]] = {"step": [], "wall_seconds": [], "cum_samples": [],
                                 "cum_tokens": [], "greedy_accuracy": []}
    for st, acc in zip(e["step"], e.get("greedy_accuracy", [None] * len(e["step"])),
                       strict=True):
        if acc is None or st not in at or at[st][0] is None:
            continue
        out["step"].append(st)
        out["wall_seconds"].append(at[st][0])
        out["cum_samples"].append(at[st][1])
        out["cum_tokens"].append(at[st][2])
        out["greedy_accuracy"].append(acc)
    return out


def round_series(run_id: int) -> dict[str, Any]:
    """Per step and round: prompts active in the round and prompts that exited after it."""
    rows = _fetch(
        f"SELECT step, round, active_prompts, finished FROM {RoundStat._meta.db_table} "
        f"WHERE run_id = %s ORDER BY step, round", [run_id])
    steps: list[int] = []
    max_round = 0
    active: dict[tuple[int, int], int] = {}
    finished: dict[tuple[int, int], int] = {}
    for step, rnd, act, fin in rows:
        if not steps or steps[-1] != step:
            steps.append(step)
        max_round = max(max_round, rnd)
        active[step, rnd] = act
        finished[step, rnd] = fin
    return {"steps": steps, "max_round": max_round, "active": active, "finished": finished}


def reward_split_series(run_id: int) -> dict[str, list[Any]]:
    """Per step, the prompts sampled split by their rewards: some right and some wrong (a group
    with signal), all right, all wrong. From the prompt-step rows, so DAPO's further batches
    count too."""
    rows = _fetch(
        f"SELECT step, COUNT(*) FILTER (WHERE positives > 0 AND negatives > 0), "
        f"COUNT(*) FILTER (WHERE negatives = 0 AND positives > 0), "
        f"COUNT(*) FILTER (WHERE positives = 0) "
        f"FROM {PromptStep._meta.db_table} WHERE run_id = %s GROUP BY step ORDER BY step",
        [run_id])
    return {"step": [r[0] for r in rows], "mixed": [r[1] for r in rows],
            "all_right": [r[2] for r in rows], "all_wrong": [r[3] for r in rows]}


def cached_for_finished(name: str, runs: list[Run], compute: Any) -> Any:
    """Cache what a set of finished runs yields: their rows no longer change. The key carries
    each run's status and last step, so a relaunched or resumed run is recomputed."""
    if not CACHE_FINISHED or any(r.status in Run.ACTIVE_STATUSES for r in runs):
        return compute()
    state = ",".join(f"{r.pk}.{r.attempts}.{r.status}.{r.current_step}" for r in runs)
    if len(state) > 120:  # a sweep's report: cache keys beyond 250 characters draw warnings
        state = hashlib.sha256(state.encode()).hexdigest()
    key = f"dash:{name}:{state}"
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, timeout=6 * 3600)
    return value


# --- prompt history ----------------------------------------------------------------------------

@dataclass
class StepHistory:
    step: int
    samples: int
    positives: int
    negatives: int
    rounds_used: int
    exit_round: int | None
    missing: str
    kept_positives: int
    kept_negatives: int
    baseline: float
    rounds: list[dict[str, int]]
    responses: list[Sample]
    p_hat: float | None = None     # Est, GVM-RAFT, VADE: the estimate before sampling
    allocated: int | None = None   # Est, GVM-RAFT: samples allocated
    outcome: str = ""              # in words (``prompt_step_outcome``)

    @property
    def policy_versions(self) -> list[int]:
        """The policy versions that drew this step's shown responses (asynchronous runs)."""
        return sorted({r.policy_version for r in self.responses
                       if r.policy_version is not None})

    @property
    def pass_rate(self) -> float:
        return self.positives / self.samples if self.samples else 0.0


def prompt_step_outcome(exit_round: int | None, missing: str | None, p_hat: float | None,
                        allocated: int | None, *, eliminates: bool, batches: bool = False,
                        label: str = "Est") -> str:
    """What became of a prompt in a step, in words. Without an exit rule (GRPO, DAPO) a prompt
    is sampled in one round and nothing eliminates it, whatever round number its row carries
    (DAPO's is the batch it was drawn in, ``batches``). ``label``: the algorithm that allocated
    (Est, GVM-RAFT)."""
    if allocated is not None:
        return f"{label}: {allocated} allocated at p-hat " + (
            "–" if p_hat is None else f"{p_hat:.3f}")
    if not eliminates:
        return "one round, no exit rule" + (f" (batch {exit_round})" if batches and exit_round
                                            else "")
    if exit_round is None:
        return "unresolved" + (f" (missing {missing})" if missing else "")
    return f"eliminated after round {exit_round}"


def outcome_words(run: Run) -> dict[str, Any]:
    """The keywords of ``prompt_step_outcome`` for ``run``'s algorithm."""
    return {"eliminates": declared_metrics.algorithm_eliminates(run.algorithm),
            "batches": "gen_batches" in declared_metrics.algorithm_metrics(run.algorithm),
            "label": declared_metrics.algorithm_short_label(run.algorithm)}


def prompt_history(run: Run, prompt: Prompt, page_steps: int = 5,
                   before_step: int | None = None) -> dict[str, Any]:
    """One prompt in one run: every step it was sampled in (summary rows for all of them) and,
    for the ``page_steps`` most recent steps up to ``before_step``, each round and each response.

    A prompt of a long run appears in hundreds of steps with thousands of responses; paging the
    responses keeps the page small while the summary and the pass-rate chart cover the whole run.
    """
    cfg = TrainConfig.from_stored(run.config)
    positive, positive_args = positive_sql(cfg)
    threshold = cfg.positive_threshold
    # What a positive read, in words (the reward shown is the shaped one).
    positive_of = "the verifier's score (before overlong shaping)" \
        if cfg.overlong_buffer_len > 0 and cfg.positive_metric in ("acc", "score") \
        else "its reward"
    steps = list(PromptStep.objects.filter(run=run, prompt=prompt).order_by("step").values_list(
        "step", "samples", "positives", "negatives", "rounds", "exit_round", "missing",
        "kept_positives", "kept_negatives", "baseline", "p_hat", "allocated"))
    shown = [s for s in steps if before_step is None or s[0] < before_step][-page_steps:]
    shown_steps = [s[0] for s in shown]
    rounds: dict[int, list[dict[str, int]]] = defaultdict(list)
    responses: dict[int, list[Sample]] = defaultdict(list)
    if shown_steps:
        for step, rnd, n, pos in _fetch(
                f"SELECT step, round, COUNT(*), COUNT(*) FILTER (WHERE {positive}) "
                f"FROM {Sample._meta.db_table} WHERE run_id = %s AND step = ANY(%s) "
                f"AND prompt_id = %s GROUP BY step, round ORDER BY step, round",
                [*positive_args, run.pk, shown_steps, prompt.pk]):
            rounds[step].append({"round": rnd, "samples": n, "positives": pos,
                                 "negatives": n - pos})
        # step IN (...): one probe of the (run, step, prompt, index) key per shown step.
        for s in Sample.objects.filter(run=run, step__in=shown_steps,
                                       prompt=prompt).order_by("step", "index"):
            # The step trains with version step - 1: how many updates behind it drew this one.
            s.policy_lag = None if s.policy_version is None else s.step - 1 - s.policy_version
            responses[s.step].append(s)
    words = outcome_words(run)
    history = [StepHistory(step=s[0], samples=s[1], positives=s[2], negatives=s[3],
                           rounds_used=s[4], exit_round=s[5], missing=s[6],
                           kept_positives=s[7], kept_negatives=s[8], baseline=s[9],
                           rounds=rounds.get(s[0], []), responses=responses.get(s[0], []),
                           p_hat=s[10], allocated=s[11],
                           outcome=prompt_step_outcome(s[5], s[6], s[10], s[11], **words))
               for s in reversed(shown)]
    older = shown_steps[0] if shown and steps and steps[0][0] < shown_steps[0] else None
    return {"steps": history, "all_steps": steps, "older_than": older,
            "total_steps": len(steps), "threshold": threshold, "positive_of": positive_of,
            "asynchronous": cfg.max_policy_lag > 0, "max_policy_lag": cfg.max_policy_lag,
            # Whether any response shown carries a loss weight other than 1 (an algorithm that
            # reweights: DPPO's importance weights): the responses table then shows them.
            "weighted": any(r.weight != 1.0 for h in history for r in h.responses),
            **words}


def prompt_pass_rates(run_id: int, prompt_id: int) -> dict[str, list[Any]]:
    rows = _fetch(
        f"SELECT step, positives, samples, exit_round, p_hat, allocated "
        f"FROM {PromptStep._meta.db_table} "
        f"WHERE run_id = %s AND prompt_id = %s ORDER BY step", [run_id, prompt_id])
    return {"step": [r[0] for r in rows],
            "pass_rate": [r[1] / r[2] if r[2] else None for r in rows],
            "samples": [r[2] for r in rows], "exit_round": [r[3] for r in rows],
            "p_hat": [r[4] for r in rows], "allocated": [r[5] for r in rows]}


# --- asynchronous training ---------------------------------------------------------------------

def policy_lag_counts(run: Run) -> list[tuple[int, int, int]]:
    """(step, lag, kept samples) for every lag a step trained, in step and lag order: the
    distribution behind the step metrics ``policy_lag_mean`` / ``policy_lag_max``. A step
    trains with version step - 1 (``Sample.policy_version``), so a sample's lag is
    step - 1 - its policy version; a synchronous run's samples carry none and yield no rows.

    It reads every kept sample row of the run (B x n per step), so, as
    ``low_pass_rate_fractions``, the rows are cached and each request adds only the steps
    recorded since (a recorded step never changes; a resumed run starts afresh)."""
    key = f"dash:policy-lag:{run.pk}:{run.attempts}"
    state = cache.get(key) if CACHE_FINISHED else None
    if state is None or state["upto"] > run.current_step:
        state = {"upto": 0, "rows": []}
    if run.current_step > state["upto"]:
        rows = _fetch(
            f"SELECT step, step - 1 - policy_version AS lag, COUNT(*) "
            f"FROM {Sample._meta.db_table} WHERE run_id = %s AND step > %s AND step <= %s "
            f"AND kept AND policy_version IS NOT NULL GROUP BY step, lag ORDER BY step, lag",
            [run.pk, state["upto"], run.current_step])
        state["rows"] += [(int(s), int(lag), int(n)) for s, lag, n in rows]
        state["upto"] = run.current_step
        if CACHE_FINISHED:
            cache.set(key, state, timeout=6 * 3600)
    return state["rows"]


# --- Reinforce-Ada-Est --------------------------------------------------------------------------

def est_last_allocation(run_id: int) -> dict[str, Any]:
    """The last recorded Est step: p-hat before sampling, samples allocated and the prompt's
    index in its set, for each prompt of the batch."""
    ps = PromptStep._meta.db_table
    rows = _fetch(
        f"SELECT ps.step, ps.p_hat, ps.allocated, p.index, ps.positives, ps.samples "
        f"FROM {ps} ps JOIN {Prompt._meta.db_table} p ON p.id = ps.prompt_id "
        f"WHERE ps.run_id = %s AND ps.p_hat IS NOT NULL AND ps.step = (SELECT MAX(step) "
        f"FROM {ps} WHERE run_id = %s AND p_hat IS NOT NULL) ORDER BY ps.p_hat",
        [run_id, run_id])
    return {"step": rows[0][0] if rows else None, "p_hat": [r[1] for r in rows],
            "allocated": [r[2] for r in rows], "index": [r[3] for r in rows],
            "observed": [r[4] / r[5] if r[5] else None for r in rows]}


def est_calibration(run_id: int, bins: int = 10) -> dict[str, list[Any]]:
    """Reliability of p-hat: prompt-steps binned by p-hat (equal-width bins over [0, 1]); per
    bin the mean p-hat, the pass rate observed in those steps (positives / samples, pooled),
    and the numbers of prompt-steps and samples behind it."""
    rows = _fetch(
        f"SELECT LEAST(FLOOR(p_hat * %s)::int, %s - 1) b, AVG(p_hat), SUM(positives), "
        f"SUM(samples), COUNT(*) FROM {PromptStep._meta.db_table} "
        f"WHERE run_id = %s AND p_hat IS NOT NULL GROUP BY b ORDER BY b",
        [bins, bins, run_id])
    return {"bin": [r[0] for r in rows], "p_hat": [r[1] for r in rows],
            "observed": [r[2] / r[3] if r[3] else None for r in rows],
            "samples": [int(r[3]) for r in rows], "prompt_steps": [r[4] for r in rows]}


def est_allocation_series(run_id: int) -> dict[str, list[Any]]:
    """Per Est step: the fewest, mean and most samples allocated to a prompt."""
    rows = _fetch(
        f"SELECT step, MIN(allocated), AVG(allocated), MAX(allocated) "
        f"FROM {PromptStep._meta.db_table} WHERE run_id = %s AND allocated IS NOT NULL "
        f"GROUP BY step ORDER BY step", [run_id])
    return {"step": [r[0] for r in rows], "min": [r[1] for r in rows],
            "mean": [float(r[2]) for r in rows], "max": [r[3] for r in rows]}


# --- compare -----------------------------------------------------------------------------------

def seed_group_key(run: Run) -> str:
    """Runs whose settings differ only by seed share this key (name and seed excluded, and
    what trains nothing: ``trainer.config.NOT_TRAINING``, the trackers a run is mirrored to)."""
    cfg = {k: v for k, v in (run.config or {}).items() if k not in ("seed", *NOT_TRAINING)}
    return json.dumps([run.prompt_set_id, run.model, cfg], sort_keys=True, default=str)


# Why a run without a recorded step is left out of its group, by status.
NO_STEP_REASONS = {
    Run.Status.FAILED: "failed before its first step",
    Run.Status.CANCELLED: "cancelled before its first step",
    Run.Status.QUEUED: "queued: no step recorded yet",
    Run.Status.RUNNING: "running: no step recorded yet",
    Run.Status.SUCCEEDED: "finished without recording a step",
}


@dataclass
class GroupMember:
    """One run of a group, with how many steps it recorded (what the pages can draw of it) and,
    when its retry is compared too, that retry (``Run.replaced_by``): the retry counts, not it."""

    run: Run
    steps: int
    retried_as: int | None = None

    @property
    def used(self) -> bool:
        return bool(self.steps) and self.retried_as is None

    @property
    def reason(self) -> str:
        """Why it is left out ("" when it is used)."""
        if self.retried_as is not None:
            return f"replaced by its retry (run {self.retried_as})"
        if self.steps:
            return ""
        return NO_STEP_REASONS.get(self.run.status, f"{self.run.status}: no step recorded")


@dataclass
class RunGroup:
    """Runs whose settings differ only by seed (``seed_group_key``), as every page that
    aggregates runs shows them: ``used`` are the members with recorded steps (a mean over seeds
    is a mean over these), ``left_out`` those without, each with its reason. ``label`` names
    what the group's runs share (``group_labels``), never one member's name or seed."""

    members: list[GroupMember]
    label: str = ""

    @property
    def runs(self) -> list[Run]:
        return [m.run for m in self.members]

    @property
    def used(self) -> list[Run]:
        return [m.run for m in self.members if m.used]

    @property
    def left_out(self) -> list[GroupMember]:
        return [m for m in self.members if not m.used]

    @property
    def algorithm(self) -> str:
        return self.members[0].run.algorithm

    @property
    def used_seeds(self) -> str:
        return ", ".join(str(r.seed) for r in self.used)

    def uses(self) -> str:
        """What the group's figures are made of: "mean of 2 seeds (seeds 0, 1)", "1 seed
        (seed 1)", "no run with recorded steps"."""
        used = self.used
        if not used:
            return "no run with recorded steps"
        if len(used) == 1:
            return f"1 seed (seed {used[0].seed})"
        return f"mean of {len(used)} seeds (seeds {self.used_seeds})"

    def left_out_text(self) -> str:
        """E.g. "seed 0, failed before its first step" ("" when nothing is left out)."""
        return "; ".join(f"seed {m.run.seed}, {m.reason}" for m in self.left_out)

    @property
    def note(self) -> str:
        """The group in one line, as every aggregating page says it: "Reinforce-Ada
        Seq-balance: 1 seed (seed 1); left out: seed 0, failed before its first step"."""
        left = self.left_out_text()
        return f"{self.label}: {self.uses()}" + (f"; left out: {left}" if left else "")

    def as_dict(self) -> dict[str, Any]:
        """The group as plain data (reports, the API)."""
        return {"label": self.label, "algorithm": self.algorithm,
                "runs": [r.pk for r in self.used], "seeds": [r.seed for r in self.used],
                "left_out": [{"run": m.run.pk, "name": m.run.name, "seed": m.run.seed,
                              "status": m.run.status, "reason": m.reason}
                             for m in self.left_out],
                "note": self.note}


def recorded_steps(run_ids: list[int]) -> dict[int, int]:
    """How many steps each run recorded (runs without any are absent), in one grouped query."""
    if not run_ids:
        return {}
    return dict(Step.objects.filter(run_id__in=run_ids).values("run_id")
                .annotate(n=Count("id")).values_list("run_id", "n").order_by())


def seed_groups(runs: list[Run]) -> list[RunGroup]:
    """The runs in groups of runs that differ only by seed, and in each group which runs the
    pages use (those with recorded steps) and which they leave out, and why: the one place
    compare, the report, the runs list and the API decide it. Groups in the registry's order
    (GRPO first), then in launch order; each group's runs by seed."""
    steps = recorded_steps([r.pk for r in runs])
    # A run whose retry is compared too is the retry's earlier attempt: the retry counts.
    compared = {r.pk for r in runs}
    retried = {r.pk: r.replaced_by_id for r in runs if r.replaced_by_id in compared}
    by_key: dict[str, list[Run]] = {}
    for run in runs:
        by_key.setdefault(seed_group_key(run), []).append(run)
    order = {a.name: i for i, a in enumerate(algorithms())}
    ordered = sorted(by_key.values(), key=lambda g: (order.get(g[0].algorithm, len(order)),
                                                     min(r.pk for r in g)))
    groups = [RunGroup([GroupMember(r, steps.get(r.pk, 0), retried.get(r.pk))
                        for r in sorted(g, key=lambda r: (r.seed, r.pk))]) for g in ordered]
    for group, label in zip(groups, group_labels([g.runs for g in groups]), strict=True):
        group.label = label
    return groups


def group_labels(groups: list[list[Run]]) -> list[str]:
    """The algorithm's label, plus the settings (other than the algorithm and the seed) whose
    values tell this group from the others."""
    firsts = [g[0] for g in groups]
    settings: dict[str, list[Any]] = {
        "prompt set": [r.prompt_set.name for r in firsts], "queue": [r.queue for r in firsts]}
    keys = sorted({k for r in firsts for k in (r.config or {})}
                  - {"algorithm", "seed", *NOT_TRAINING})
    settings.update({k: [(r.config or {}).get(k) for r in firsts] for k in keys})
    differing = [k for k, values in settings.items() if len({repr(v) for v in values}) > 1]
    labels = []
    for i, run in enumerate(firsts):
        # GRPO's group size is its budget, so its label names it ("GRPO n=16").
        grpo_n = (run.config or {}).get("group_size") \
            if is_algorithm(run.algorithm) and get_algorithm(run.algorithm).label_shows_group_size \
            else None
        label = algorithm_label(run.algorithm, grpo_n)
        extra = ", ".join(f"{k}={settings[k][i]}" for k in differing
                          if not (grpo_n and k == "group_size"))
        labels.append(f"{label} ({extra})" if extra else label)
    # Groups equal in every shown setting still need distinct names in a legend.
    for label in {x for x in labels if labels.count(x) > 1}:
        for n, i in enumerate(i for i, x in enumerate(labels) if x == label):
            labels[i] = f"{label} #{n + 1}"
    return labels


def scatter_pair(groups: list[RunGroup]) -> tuple[Run, Run] | None:
    """The two runs the per-prompt scatter compares: the first run with recorded steps of each
    of the first two groups that have one (two groups: the point of comparing), else the first
    two runs with steps of the one group; None when fewer than two runs recorded a step."""
    firsts = [g.used[0] for g in groups if g.used]
    if len(firsts) >= 2:
        return firsts[0], firsts[1]
    used = [r for g in groups for r in g.used]
    return (used[0], used[1]) if len(used) >= 2 else None


def per_prompt_pass_rates(run_a: Run, run_b: Run) -> dict[str, list[Any]]:
    """Pass rate of every prompt both runs sampled: positives / samples over the whole run.
    Cached once both runs are finished (two 300k-row aggregations at paper scale)."""
    return cached_for_finished("passrates", [run_a, run_b],
                                lambda: _per_prompt_pass_rates(run_a.pk, run_b.pk))


def _per_prompt_pass_rates(run_a: int, run_b: int) -> dict[str, list[Any]]:
    # One scan over both runs' prompt-steps with filtered sums: half the work of aggregating
    # each run and joining (about 600k rows at paper scale).
    ps = PromptStep._meta.db_table
    rows = _fetch(
        f"""
        SELECT t.prompt_id, t.pos_a::float / t.n_a, t.pos_b::float / t.n_b, p.index
        FROM (SELECT prompt_id,
                     SUM(positives) FILTER (WHERE run_id = %s) pos_a,
                     SUM(samples) FILTER (WHERE run_id = %s) n_a,
                     SUM(positives) FILTER (WHERE run_id = %s) pos_b,
                     SUM(samples) FILTER (WHERE run_id = %s) n_b
              FROM {ps} WHERE run_id = ANY(%s) GROUP BY prompt_id) t
        JOIN {Prompt._meta.db_table} p ON p.id = t.prompt_id
        WHERE t.n_a > 0 AND t.n_b > 0
        ORDER BY p.index
        """, [run_a, run_a, run_b, run_b, [run_a, run_b]])
    return {"prompt_id": [r[0] for r in rows], "a": [r[1] for r in rows],
            "b": [r[2] for r in rows], "index": [r[3] for r in rows]}


def final_metrics(runs: list[Run], last_k: int = 10) -> list[dict[str, Any]]:
    """Per run: totals and the mean of the last ``last_k`` steps (single steps are noisy)."""
    if not runs:
        return []
    st = Step._meta.db_table
    rows = _fetch(
        f"""
        SELECT run_id, MAX(step), SUM(samples), SUM(tokens), MAX(wall_seconds),
               AVG(real_reward) FILTER (WHERE rk <= %s),
               AVG(kept_reward) FILTER (WHERE rk <= %s),
               AVG((metrics->>'zero_adv_frac')::float) FILTER (WHERE rk <= %s)
        FROM (SELECT run_id, step, samples, tokens, wall_seconds, real_reward, kept_reward,
                     metrics, ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY step DESC) rk
              FROM {st} WHERE run_id = ANY(%s)) t
        GROUP BY run_id
        """, [last_k, last_k, last_k, [r.pk for r in runs]])
    by_run = {r[0]: r for r in rows}
    evals = {run_id: {"step": step, **eval_headline(metrics)}
             for run_id, (step, metrics) in last_evals([r.pk for r in runs]).items()}
    out = []
    for run in runs:
        r = by_run.get(run.pk)
        out.append({
            "run": run, "steps": r[1] if r else 0, "samples": r[2] if r else 0,
            "tokens": r[3] if r else 0, "wall_seconds": r[4] if r else None,
            "real_reward": r[5] if r else None, "kept_reward": r[6] if r else None,
            "zero_adv_frac": r[7] if r else None, "eval": evals.get(run.pk),
        })
    return out


def last_evals(run_ids: list[int]) -> dict[int, tuple[int, dict[str, Any]]]:
    """Each run's latest evaluation: {run id: (step, metrics)}."""
    return {run_id: (step, metrics if isinstance(metrics, dict) else json.loads(metrics))
            for run_id, step, metrics in _fetch(
                f"SELECT DISTINCT ON (run_id) run_id, step, metrics "
                f"FROM {EvalResult._meta.db_table} WHERE run_id = ANY(%s) "
                "ORDER BY run_id, step DESC", [run_ids])}


# The device a run's "auto" resolves to on each queue's workers.
QUEUE_DEVICES = settings.RUN_QUEUE_DEVICES


@dataclass(frozen=True)
class DiffCell:
    """One run's value of a setting: as it resolves for the run (``value``) and, where the run
    spelled it otherwise ("auto", empty), as set (``raw``; None when the same)."""

    value: Any
    raw: Any = None
    resolved: bool = False  # the value is ``raw`` resolved ("auto" -> "exact")

    @property
    def raw_text(self) -> str:
        return "empty" if self.raw is None else str(self.raw)


@dataclass(frozen=True)
class RunSettings:
    """What a run is launched with: a run's, or a launch form's before it is a run."""

    config: dict[str, Any]
    prompt_set: PromptSet
    eval_set: PromptSet | None
    queue: str
    retention: str

    @classmethod
    def of(cls, run: Run) -> RunSettings:
        return cls(run.config or {}, run.prompt_set, run.eval_set, run.queue, run.retention)

    def resolved(self) -> dict[str, Any]:
        """The config with every "auto" or empty field as it resolves for this run
        (``TrainConfig.resolved``): the prompt set says whether the prompts are the built-in
        task, the queue on which device it runs."""
        return TrainConfig.from_stored(self.config).resolved(
            device=QUEUE_DEVICES.get(self.queue),
            builtin_prompts=self.prompt_set.source == PromptSet.Source.BUILTIN)


def settings_diff(items: list[RunSettings]) -> list[tuple[str, list[DiffCell]]]:
    """The settings whose resolved values are not the same in every item, with each one's value:
    ``verifier = auto`` and ``exact`` on a built-in prompt set are the same setting and no
    difference; a value spelled otherwise than it resolves carries its spelling (``raw``)."""
    out: list[tuple[str, list[DiffCell]]] = []
    for label, values in (
            ("prompt set", [i.prompt_set.name for i in items]),
            ("eval set", [i.eval_set.name if i.eval_set else "none" for i in items]),
            ("queue", [i.queue for i in items]),
            ("retention", [Run.Retention(i.retention).label for i in items])):
        if any(v != values[0] for v in values[1:]):
            out.append((label, [DiffCell(v) for v in values]))
    resolved = [i.resolved() for i in items]
    raw = [i.config for i in items]
    keys = sorted({k for c in resolved for k in c} | {k for c in raw for k in c})
    for k in keys:
        values = [c[k] if k in c else rc.get(k) for c, rc in zip(resolved, raw, strict=True)]
        if any(v != values[0] for v in values[1:]):
            cells = []
            for value, rc in zip(values, raw, strict=True):
                spelled = rc.get(k, "(not stored: the default)")
                cells.append(DiffCell(value, spelled, resolved=spelled != value))
            out.append((k, cells))
    return out


def config_diff(runs: list[Run]) -> list[tuple[str, list[DiffCell]]]:
    """``settings_diff`` of runs (compare; a clone against its source)."""
    return settings_diff([RunSettings.of(r) for r in runs])


# --- reports -----------------------------------------------------------------------------------

def prompt_difficulty(run: Run) -> dict[str, list[float]]:
    """Per prompt the run drew: its ``pass_rate`` over the whole run and the ``samples`` it was
    given per step it was drawn in (the algorithm's spend on it), for the family report's
    samples against difficulty.

    The pass rate is estimated from the first n samples of each of its steps (``index < n``),
    as ``low_pass_rate_fractions`` does: those are i.i.d. draws of the policy under every
    algorithm, so a prompt's difficulty is measured alike whatever spent the rest (a pool that
    stops once it has a positive would read easier than it is). The spend comes from the
    prompt-step rows (B per step), not from the sample rows."""
    cfg = TrainConfig.from_stored(run.config)
    positive, positive_args = positive_sql(cfg)
    rows = _fetch(
        f"SELECT f.rate, ps.per_step FROM ("
        f"  SELECT prompt_id, SUM(samples)::float / COUNT(*) AS per_step"
        f"  FROM {PromptStep._meta.db_table} WHERE run_id = %s GROUP BY prompt_id) ps JOIN ("
        f"  SELECT prompt_id, COUNT(*) FILTER (WHERE {positive})::float / COUNT(*) AS rate"
        f"  FROM {Sample._meta.db_table} WHERE run_id = %s AND index < %s GROUP BY prompt_id) f"
        f"  USING (prompt_id) ORDER BY prompt_id",
        [run.pk, *positive_args, run.pk, cfg.group_size])
    return {"pass_rate": [r[0] for r in rows], "samples": [r[1] for r in rows]}


def low_pass_rate_fractions(run: Run, thresholds: tuple[float, ...]) -> dict[str, list[Any]]:
    """Per step, the fraction of the batch's prompts whose pass rate is at most each threshold:
    {"step": [...], "fractions": [[...] per threshold]}, from the sample rows, for runs recorded
    before the trainer computed it (the ``pass_rate_le_<t>`` step metrics).

    A prompt's pass rate in a step is estimated from its first n samples (``index < n``), as the
    real reward is: they are i.i.d. draws of the current policy under every algorithm, where the
    whole pool is not (Reinforce-Ada's pool is larger and stops adaptively, so pool rates are not
    comparable with GRPO's n samples).

    That reads a quarter of a paper-scale run's sample rows (about 1 s for 5M rows on 2 busy
    cores), so the per-step fractions are cached and each request adds only the steps recorded
    since (a recorded step never changes; a resumed run, whose ``attempts`` grows, starts
    afresh)."""
    cfg = TrainConfig.from_stored(run.config)
    n = cfg.group_size
    key = f"dash:low-pass-rate:{run.pk}:{run.attempts}:{n}:{','.join(map(str, thresholds))}"
    state = cache.get(key) if CACHE_FINISHED else None
    if state is None or state["upto"] > run.current_step:
        state = {"upto": 0, "step": [], "fractions": [[] for _ in thresholds]}
    if run.current_step > state["upto"]:
        filters = "".join(", COUNT(*) FILTER (WHERE pos <= %s * cnt)::float / COUNT(*)"
                          for _ in thresholds)
        positive, positive_args = positive_sql(cfg)
        rows = _fetch(
            f"SELECT step{filters} FROM ("
            f"  SELECT step, prompt_id, COUNT(*) AS cnt, COUNT(*) FILTER (WHERE {positive}) pos"
            f"  FROM {Sample._meta.db_table} WHERE run_id = %s AND step > %s AND step <= %s"
            f"  AND index < %s GROUP BY step, prompt_id) t GROUP BY step ORDER BY step",
            [*thresholds, *positive_args, run.pk, state["upto"],
             run.current_step, n])
        state["step"] += [r[0] for r in rows]
        for i, column in enumerate(state["fractions"], start=1):
            column += [r[i] for r in rows]
        state["upto"] = run.current_step
        if CACHE_FINISHED:
            cache.set(key, state, timeout=6 * 3600)
    return {"step": state["step"], "fractions": state["fractions"]}
