"""The prompt x step heatmap of samples spent: every prompt a run sampled, whatever its size.

Two layers:

- ``cells(run)``: per prompt and column of steps, the sums that merge (samples, appearances,
  unresolved appearances, latest exit round) plus per-prompt positives, in
  numpy arrays. They are cached and a live run adds only the steps recorded since the previous
  request, so a 600-step run costs one step's rows per refresh instead of 300k.
- ``view(run, ...)``: the rows a request asks for (sorted, searched, a row range) aggregated
  into at most ``MAX_ROWS`` bins of consecutive rows, so that every row of the chart is at least
  ``MIN_ROW_PX`` pixels tall and every prompt is counted somewhere; the view says exactly what
  it shows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.core.cache import cache
from django.db import connection, transaction
from experiments.models import Prompt, PromptStep, Run, Step

from .selectors import CACHE_FINISHED, _fetch

MAX_COLS = 100
# At most this many rows are drawn; more prompts are aggregated into bins of consecutive rows.
MAX_ROWS = 256
MIN_ROW_PX = 4
# Sort orders: key -> what the subtitle calls it.
SORTS = {"samples": "most samples first", "first-seen": "first sampled first",
         "pass-rate": "lowest pass rate first", "unresolved": "most often unresolved first",
         "index": "set order"}


@dataclass
class Cells:
    """Per-prompt arrays; row i is prompt ``prompt_ids[i]`` (in the order first seen)."""

    upto: int                 # last step merged
    width: int                # steps per column
    prompt_ids: np.ndarray    # (P,) int64
    index: np.ndarray         # (P,) int64: position in the prompt set
    sums: np.ndarray          # (P, C) int64: samples spent
    counts: np.ndarray        # (P, C) int32: appearances (steps sampled)
    unresolved: np.ndarray    # (P, C) int32: appearances still unresolved after the last round
    max_exit: np.ndarray      # (P, C) int16: latest exit round (0: none)
    positives: np.ndarray     # (P,) int64


def _empty(width: int, ncols: int) -> Cells:
    return Cells(0, width, np.zeros(0, np.int64), np.zeros(0, np.int64),
                 np.zeros((0, ncols), np.int64), np.zeros((0, ncols), np.int32),
                 np.zeros((0, ncols), np.int32), np.zeros((0, ncols), np.int16),
                 np.zeros(0, np.int64))


def last_step(run: Run) -> int:
    return _fetch(f"SELECT COALESCE(MAX(step), 0) FROM {Step._meta.db_table} WHERE run_id = %s",
                  [run.pk])[0][0]


def cells(run: Run) -> Cells:
    """The run's cells up to its last recorded step. Columns have a width fixed by the run's
    planned length (at most ``MAX_COLS``), so the matrix keeps its shape while the run trains."""
    last = last_step(run)
    width = max(1, -(-max(run.total_steps, last) // MAX_COLS))  # steps per column, ceil
    # attempts: a resumed run rewrites steps after its checkpoint, so its cells start afresh.
    # The version names the layout of ``Cells``: a deployment never reads another's pickles.
    key = f"dash:heatmap-cells:v2:{run.pk}:{run.attempts}:{width}"
    state: Cells | None = cache.get(key) if CACHE_FINISHED else None
    if state is None or state.upto > last:
        state = _empty(width, -(-max(run.total_steps, last) // width))
    if last > state.upto:
        state = _merge(run, state, last)
        if CACHE_FINISHED:
            cache.set(key, state, timeout=6 * 3600)
    return state


def _merge(run: Run, state: Cells, last: int) -> Cells:
    """Add the prompt-steps recorded after ``state.upto`` (one aggregate query, then numpy)."""
    ps = PromptStep._meta.db_table
    with transaction.atomic(), connection.cursor() as cur:
        # The hash aggregate over a long run's prompt-steps spills to disk at the default 4 MB.
        cur.execute("SET LOCAL work_mem = '32MB'")
        cur.execute(
            f"SELECT prompt_id, (step - 1) / %s, SUM(samples), COUNT(*), "
            f"COUNT(*) FILTER (WHERE exit_round IS NULL), COALESCE(MAX(exit_round), 0), "
            f"SUM(positives) "
            f"FROM {ps} WHERE run_id = %s AND step > %s AND step <= %s GROUP BY 1, 2",
            [state.width, run.pk, state.upto, last])
        fetched = cur.fetchall()
    # 50k rows of 7 integers at paper scale: fromiter is several times faster than np.array.
    rows = np.fromiter(itertools.chain.from_iterable(fetched), dtype=np.int64,
                       count=7 * len(fetched)).reshape(-1, 7)
    ncols = max(state.sums.shape[1], -(-last // state.width))
    pid, col = rows[:, 0], rows[:, 1]
    new_ids = np.setdiff1d(np.unique(pid), state.prompt_ids)
    if len(new_ids):
        index_of = dict(Prompt.objects.filter(pk__in=new_ids.tolist())
                        .values_list("id", "index"))
        new_index = np.array([index_of.get(int(p), int(p)) for p in new_ids], np.int64)
    else:
        new_index = np.zeros(0, np.int64)
    P = len(state.prompt_ids) + len(new_ids)

    def grow(a: np.ndarray) -> np.ndarray:
        out = np.zeros((P, ncols), a.dtype)
        out[:a.shape[0], :a.shape[1]] = a
        return out

    s = Cells(last, state.width, np.concatenate([state.prompt_ids, new_ids]),
              np.concatenate([state.index, new_index]), grow(state.sums), grow(state.counts),
              grow(state.unresolved), grow(state.max_exit),
              np.concatenate([state.positives, np.zeros(len(new_ids), np.int64)]))
    order = np.argsort(s.prompt_ids)
    row = order[np.searchsorted(s.prompt_ids, pid, sorter=order)]
    # (row, col) pairs are unique in one query's result (GROUP BY prompt, column), so plain
    # fancy-index updates are exact; per-prompt totals repeat rows and need bincount / .at.
    s.sums[row, col] += rows[:, 2]
    s.counts[row, col] += rows[:, 3].astype(np.int32)
    s.unresolved[row, col] += rows[:, 4].astype(np.int32)
    s.max_exit[row, col] = np.maximum(s.max_exit[row, col], rows[:, 5])
    s.positives += np.bincount(row, weights=rows[:, 6], minlength=P).astype(np.int64)
    return s


def row_order(c: Cells, sort: str) -> np.ndarray:
    """Row indices of ``c`` in the order ``sort`` names (ties: set order). "first-seen" orders
    by the first column a prompt appears in (exact to the step when a column is one step)."""
    total = c.sums.sum(axis=1)
    if sort == "samples":
        keys = (c.index, -total)
    elif sort == "first-seen":
        keys = (c.index, (c.counts > 0).argmax(axis=1))
    elif sort == "pass-rate":
        keys = (c.index, c.positives / np.maximum(total, 1))
    elif sort == "unresolved":
        keys = (c.index, -total, -c.unresolved.sum(axis=1) / np.maximum(c.counts.sum(axis=1), 1))
    else:
        keys = (c.index,)
    return np.lexsort(keys)


@dataclass
class View:
    """What the chart draws: ``bins`` rows (each ``bin_size`` consecutive prompts of the sorted,
    searched, zoomed list) x columns of ``width`` steps."""

    x: list[float]
    z: list[list[float | None]]          # mean samples per appearance; None: not sampled
    counts: list[list[int]]              # appearances per cell
    unresolved: list[list[int]]          # unresolved appearances per cell
    exit_rounds: list[list[int]]         # latest exit round per cell (single-prompt rows)
    labels: list[str]
    prompt_ids: list[int]                # per row (single-prompt rows; [] when binned)
    texts: list[str]                     # prompt text per row (single-prompt rows)
    row_ranges: list[tuple[int, int]]    # 1-based positions (in the sorted list) per row
    bin_size: int
    prompts_total: int                   # prompts the run sampled
    prompts_matched: int                 # after the search
    rows: tuple[int, int]                # the zoomed range, 1-based inclusive
    prompt_steps: int                    # appearances drawn
    prompt_steps_total: int
    width: int
    last_step: int
    sort: str
    query: str


def view(run: Run, *, sort: str = "samples", query: str = "",
         rows: tuple[int, int] | None = None) -> View:
    """The heatmap rows for a request: prompts sorted by ``sort``, those whose text contains
    ``query``, positions ``rows`` (1-based, inclusive) of that list, binned to ``MAX_ROWS``."""
    c = cells(run)
    order = row_order(c, sort)
    if query:
        matching = np.array(Prompt.objects.filter(prompt_set_id=run.prompt_set_id,
                                                  text__icontains=query)
                            .values_list("id", flat=True), dtype=np.int64)
        order = order[np.isin(c.prompt_ids[order], matching)]
    matched = len(order)
    lo, hi = (1, matched) if rows is None else (max(1, rows[0]), min(matched, rows[1]))
    chosen = order[lo - 1:hi] if hi >= lo else order[:0]
    n = len(chosen)
    bin_size = max(1, -(-n // MAX_ROWS))
    nbins = -(-n // bin_size) if n else 0
    ncols = -(-c.upto // c.width) if c.upto else 0

    def binned(a: np.ndarray, reduce: Any = np.add) -> np.ndarray:
        picked = a[chosen, :ncols]
        pad = nbins * bin_size - n
        if pad:
            picked = np.concatenate([picked, np.zeros((pad, ncols), a.dtype)])
        return reduce.reduce(picked.reshape(nbins, bin_size, ncols), axis=1)

    sums, counts = binned(c.sums), binned(c.counts)
    unresolved, max_exit = binned(c.unresolved), binned(c.max_exit, np.maximum)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.round(sums / counts, 1)
    z = np.where(counts > 0, mean, np.nan).tolist()
    z = [[None if v != v else v for v in r] for r in z]  # NaN -> null in the JSON
    starts = [lo + b * bin_size for b in range(nbins)]
    ranges = [(s, min(s + bin_size - 1, hi)) for s in starts]
    if bin_size == 1:
        ids = c.prompt_ids[chosen].tolist()
        labels = [f"#{i}" for i in c.index[chosen].tolist()]
        text_of = dict(Prompt.objects.filter(pk__in=ids).values_list("id", "text"))
        texts = [text_of.get(i, "") for i in ids]
    else:
        ids, texts = [], []
        labels = [f"{a:,}–{b:,}" for a, b in ranges]
    w = c.width
    return View(
        x=[col * w + (w + 1) / 2 if w > 1 else col + 1 for col in range(ncols)],
        z=z, counts=counts.tolist(), unresolved=unresolved.tolist(),
        exit_rounds=max_exit.tolist(), labels=labels, prompt_ids=ids, texts=texts,
        row_ranges=ranges, bin_size=bin_size, prompts_total=len(c.prompt_ids),
        prompts_matched=matched, rows=(lo, hi), prompt_steps=int(counts.sum()),
        prompt_steps_total=int(c.counts.sum()), width=w, last_step=c.upto, sort=sort,
        query=query)


def describe(v: View) -> str:
    """The subtitle: exactly which prompts, rows and steps are drawn."""
    if v.prompts_total == 0:
        return "no prompt sampled yet"
    if v.query and not v.prompts_matched:
        return f"none of the {v.prompts_total:,} prompts matches “{v.query}”"
    if v.rows[1] < v.rows[0]:
        what = (f"{v.prompts_matched:,} prompts matching “{v.query}”" if v.query
                else f"{v.prompts_total:,} prompts")
        return f"no rows from {v.rows[0]:,} on: the list has {what}"
    parts = []
    what = f"{v.prompts_total:,} prompts"
    if v.query:
        what = f"{v.prompts_matched:,} of {v.prompts_total:,} prompts matching “{v.query}”"
    if v.rows[1] - v.rows[0] + 1 < v.prompts_matched:
        what = f"rows {v.rows[0]:,}–{v.rows[1]:,} of {what}"
    if v.bin_size > 1:
        what += f" in {len(v.labels):,} bins of {v.bin_size:,}"
    else:
        what += ", one row each"
    parts.append(what)
    parts.append(SORTS.get(v.sort, v.sort))
    parts.append(f"{v.prompt_steps:,} of {v.prompt_steps_total:,} prompt-steps")
    steps = f"steps 1–{v.last_step:,}"
    if v.width > 1:
        steps += f" in columns of {v.width}"
    parts.append(steps)
    return " · ".join(parts)
