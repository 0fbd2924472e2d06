"""Sweeps: a grid of config values over a base config, expanded, validated and launched whole
or not at all; cancelled as one."""

from __future__ import annotations

import difflib
import itertools
import json
import math
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction

from experiments.models import PromptSet, Run, Sweep
from experiments.services.common import (
    Conflict,
    Gone,
    LaunchError,
    User,
    _check_can_modify,
    _raise_all,
    check_active_runs,
    check_fits_columns,
)
from experiments.services.enqueue import enqueue_on_commit
from experiments.services.launch import _new_run, launch_errors, lock_referenced
from experiments.services.runs import request_cancel
from trainer.budget import BUDGET, budget_overrides, check_budget
from trainer.config import ConfigError, TrainConfig, field_specs

# A sweep is one launch of many runs: the product of a grid of config values over a base config.
# The grid is a list of axes: an axis is one field and its values, (field, [v1, v2]), or fields
# paired value for value, ((field, field), [(v1, w1), (v2, w2)]): a paired axis takes its
# tuples as they are, never crossed with each other (Seq-balance at n=4 against GRPO at n=16,
# not GRPO at n=4), and is crossed with the other axes like any axis. Every expanded config is
# validated (and every launch check made) before anything is stored, so a sweep is launched
# whole or not at all.

# ``budget`` is a pseudo-field (``trainer.budget``): responses per prompt of a step's batch,
# which each run's algorithm turns into its own keys (GRPO's group_size, PODS' pods_rollouts,
# Est's budget_per_prompt, Seq's samples_per_round x max_rounds as a cap):
# ``algorithm=grpo,dapo,ada-balance,pods,vade; budget=16`` is every one of them at 16 responses
# per prompt. It is not stored in the runs' configs (the keys it set are); a run's point in the
# grid (``run_point``) still has it.

# Set from the chosen prompt sets, never swept: a sweep over data is a sweep over prompt sets.
UNSWEEPABLE = ("prompts", "eval_prompts")
Axis = tuple[str | tuple[str, ...], list[Any]]
Grid = list[Axis]
SPEC_HELP = ("field=value,value,... or, to pair fields value for value, "
             "(field, field)=(value, value), (value, value), ...; budget=16 puts every "
             "algorithm at 16 responses per prompt")


def parse_sweep_spec(text: str) -> Grid:
    """The launch form's and the command line's spelling of a grid: axes separated by ``;`` or
    new lines, each ``field=v1,v2,...`` (an integer field also takes a range ``a..b``,
    inclusive) or a paired axis ``(field, field)=(v1, w1), (v2, w2)``, whose tuples are taken
    as they are while the axes are crossed: ``(algorithm, group_size)=(ada-balance, 4),
    (grpo, 16); seed=0..2`` is 6 runs. Values get the field's type; errors name the field
    ``sweep``, every bad axis at once."""
    axes: list[Any] = []
    problems: list[str] = []
    for part in text.replace("\n", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        left, eq, raw = part.partition("=")
        left = left.strip()
        if not eq or not left:
            problems.append(f"expected {SPEC_HELP} in {part!r}")
        elif left.startswith("(") or left.endswith(")"):
            try:
                axes.append((_paired_fields(left), _tuples(left, raw)))
            except LaunchError as exc:
                problems.append(exc.reason)
        elif "," in left:
            names = ", ".join(f.strip() for f in left.split(","))
            problems.append(f"{left}: to pair fields, write ({names})=(value, value), "
                            "(value, value), ...")
        else:
            axes.append((left, [v.strip() for v in raw.split(",") if v.strip()]))
    try:
        grid = sweep_grid(axes) if axes or not problems else []
    except LaunchError as exc:
        problems += [reason for _, reason in exc.pairs]
    if problems:
        raise LaunchError("sweep", problems[0], more=[("sweep", p) for p in problems[1:]])
    return grid


def _paired_fields(left: str) -> tuple[str, ...]:
    if not (left.startswith("(") and left.endswith(")")):
        raise LaunchError("sweep", f"{left}: paired fields go in parentheses, e.g. "
                          "(algorithm, group_size)")
    return tuple(f.strip() for f in left[1:-1].split(","))


def _tuples(left: str, raw: str) -> list[list[str]]:
    """``(a, b), (c, d)`` as [["a", "b"], ["c", "d"]]."""
    out: list[list[str]] = []
    rest = raw.strip()
    while rest:
        close = rest.find(")")
        if not rest.startswith("(") or close < 0 or "(" in rest[1:close]:
            raise LaunchError("sweep", f"{left}: expected (value, value), (value, value), ... "
                              f"after '=', got {raw.strip()!r}")
        out.append([v.strip() for v in rest[1:close].split(",")])
        rest = rest[close + 1:].strip()
        if rest.startswith(","):
            rest = rest[1:].strip()
            if not rest:
                raise LaunchError("sweep", f"{left}: a ',' with no (values) after it")
        elif rest:
            raise LaunchError("sweep", f"{left}: expected ',' between tuples, got "
                              f"{rest[:20]!r}")
    return out


def sweep_grid(axes: Any) -> Grid:
    """Check and type a grid given as a list of axes, each ``(field, values)``,
    ``{"field", "values"}``, or paired ``((field, field), [(v, w), ...])``,
    ``{"fields": [...], "values": [[v, w], ...]}``; or a mapping {field: values} (a mapping
    keeps the caller's order; a key of paired fields is written "(field, field)"). Strings are
    converted to the field's type (``"1e-4"`` for a float field, ``"0..4"`` for an int field
    outside a pair); other values are kept as they are for the config's own validation."""
    types = {spec["name"]: spec["type"] for spec in field_specs()} | {BUDGET: "int"}
    if isinstance(axes, dict):
        axes = [(_mapping_key(k), v) for k, v in axes.items()]
    if not isinstance(axes, (list, tuple)):
        raise LaunchError("sweep", "expected a list of axes (field and values)")
    grid: Grid = []
    # Every axis is checked, and every bad one named at once: "algorithm=;;seed=x" is two
    # mistakes, not one to fix before the next is shown.
    problems: list[str] = []
    for axis in axes:
        try:
            grid.append(_sweep_axis(axis, types, grid))
        except LaunchError as exc:
            problems += [reason for _, reason in exc.pairs]
    if problems:
        raise LaunchError("sweep", problems[0], more=[("sweep", p) for p in problems[1:]])
    if not grid:
        raise LaunchError("sweep", "a sweep needs a field and its values, e.g. seed=0,1,2")
    size = math.prod(len(values) for _, values in grid)
    if size > settings.SWEEP_MAX_RUNS:
        sizes = " x ".join(f"{len(values):,}" for _, values in grid)
        raise LaunchError("sweep", f"{size:,} runs ({sizes}); {_at_most()}")
    return grid


def _at_most() -> str:
    return f"a sweep launches at most {settings.SWEEP_MAX_RUNS:,} (SWEEP_MAX_RUNS)"


def _mapping_key(key: Any) -> Any:
    if isinstance(key, str) and key.strip().startswith("("):
        return _paired_fields(key.strip())
    return key


def axis_fields(axis: Axis) -> tuple[str, ...]:
    field, _ = axis
    return field if isinstance(field, tuple) else (field,)


def axis_name(fields: Any) -> str:
    """An axis as the errors and pages name it: "seed", "(algorithm, group_size)"."""
    if isinstance(fields, (tuple, list)):
        return f"({', '.join(map(str, fields))})"
    return str(fields)


def _sweep_axis(axis: Any, types: dict[str, str], grid: Grid) -> Axis:
    """One axis of ``sweep_grid``, checked and typed (``grid``: the axes before it)."""
    if isinstance(axis, dict) and set(axis) == {"field", "values"}:
        field, values = axis["field"], axis["values"]
    elif isinstance(axis, dict) and set(axis) == {"fields", "values"}:
        field, values = axis["fields"], axis["values"]
        if not isinstance(field, (list, tuple)):
            raise LaunchError("sweep", f"fields: expected a list of field names, got {field!r}")
        field = tuple(field)
    elif isinstance(axis, (list, tuple)) and len(axis) == 2:
        field, values = axis
        if isinstance(field, list):
            field = tuple(field)
    else:
        raise LaunchError("sweep", f"expected a field and its values, got {axis!r}")
    if isinstance(field, tuple):
        return _paired_axis(field, values, types, grid)
    _check_field(field, types, grid, set())
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise LaunchError("sweep", f"{field}: expected a list of values")
    typed: list[Any] = []
    bad: list[str] = []
    for value in values:
        try:
            typed.extend(_typed_values(field, types[field], value))
        except LaunchError as exc:
            bad.append(exc.reason)
    if bad:
        raise LaunchError("sweep", bad[0], more=[("sweep", b) for b in bad[1:]])
    if not typed:
        raise LaunchError("sweep", f"{field}: no values")
    _check_budgets(field, typed)
    _no_repeats(field, typed)
    return field, typed


def _check_budgets(field: str, values: list[Any]) -> None:
    """``budget``'s values are whole numbers of responses per prompt within bounds."""
    if field != BUDGET:
        return
    bad = []
    for value in values:
        try:
            check_budget(value)
        except ConfigError as exc:
            bad.append(f"{BUDGET}: {exc.reason}")
    if bad:
        raise LaunchError("sweep", bad[0], more=[("sweep", b) for b in bad[1:]])


def _check_field(field: Any, types: dict[str, str], grid: Grid, pair: set[str]) -> None:
    if not isinstance(field, str) or field not in types:
        close = difflib.get_close_matches(str(field), list(types), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise LaunchError("sweep", f"{field}: no such config field{hint}")
    if field in UNSWEEPABLE:
        raise LaunchError("sweep", f"{field}: set by the prompt set, not sweepable")
    if field in pair or any(field in axis_fields(a) for a in grid):
        raise LaunchError("sweep", f"{field}: swept twice")


def _paired_axis(fields: tuple[Any, ...], values: Any, types: dict[str, str],
                 grid: Grid) -> Axis:
    name = axis_name(fields)
    if len(fields) < 2:
        raise LaunchError("sweep", f"{name}: pair two fields or more (one field is "
                          "field=v1,v2,...)")
    problems: list[str] = []
    seen: set[str] = set()
    for field in fields:
        try:
            _check_field(field, types, grid, seen)
        except LaunchError as exc:
            problems.append(exc.reason)
        seen.add(str(field))
    if problems:
        raise LaunchError("sweep", problems[0], more=[("sweep", p) for p in problems[1:]])
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise LaunchError("sweep", f"{name}: expected a list of tuples of values")
    typed: list[tuple[Any, ...]] = []
    for row in values:
        if isinstance(row, (str, bytes)) or not isinstance(row, (list, tuple)) \
                or len(row) != len(fields):
            shown = f"({', '.join(map(str, row))})" if isinstance(row, (list, tuple)) \
                else repr(row)
            problems.append(f"{name}: {shown} has {_count(row)}; each tuple needs "
                            f"{len(fields)}, one per field")
            continue
        out: list[Any] = []
        for field, value in zip(fields, row, strict=True):
            try:
                one = _typed_values(field, types[field], value, ranges=False)
            except LaunchError as exc:
                problems.append(exc.reason)
                continue
            out.extend(one)
        if len(out) == len(fields):
            try:
                for field, value in zip(fields, out, strict=True):
                    _check_budgets(field, [value])
            except LaunchError as exc:
                problems.append(exc.reason)
                continue
            typed.append(tuple(out))
    if problems:
        raise LaunchError("sweep", problems[0], more=[("sweep", p) for p in problems[1:]])
    if not typed:
        raise LaunchError("sweep", f"{name}: no values")
    _no_repeats(name, typed)
    return fields, typed


def _count(row: Any) -> str:
    n = len(row) if isinstance(row, (list, tuple)) else 1
    return f"{n} value" + ("" if n == 1 else "s")


def _no_repeats(name: str, values: list[Any]) -> None:
    seen: set[str] = set()
    for value in values:
        key = json.dumps(value)
        if key in seen:
            shown = (f"({', '.join(map(str, value))})" if isinstance(value, tuple)
                     else repr(value))
            raise LaunchError("sweep", f"{name}: value {shown} appears twice")
        seen.add(key)


def _typed_values(field: str, annotation: str, value: Any, ranges: bool = True) -> list[Any]:
    if not isinstance(value, str):
        return [value]
    text = value.strip()
    if annotation.endswith(" | None") and not annotation.startswith("bool"):
        # An optional number (K_pos): empty means the algorithm's default.
        if text.lower() in ("none", "default"):
            return [None]
        annotation = annotation.removesuffix(" | None")
    if annotation == "int":
        lo, dots, hi = text.partition("..")
        if dots and not ranges:
            raise LaunchError("sweep", f"{field}: a range ({text!r}) cannot be paired: each "
                              "tuple holds one value per field")
        try:
            if not dots:
                return [int(text)]
            first, last = int(lo), int(hi)
        except ValueError:
            raise LaunchError("sweep", f"{field}: {text!r} is not an integer or a range "
                              "a..b") from None
        if last < first:
            raise LaunchError("sweep", f"{field}: range {text!r} is empty (a..b needs "
                              "a <= b)")
        if last - first + 1 > settings.SWEEP_MAX_RUNS:
            raise LaunchError("sweep", f"{field}: range {text!r} is {last - first + 1:,} runs; "
                              f"{_at_most()}")
        return list(range(first, last + 1))
    if annotation == "float":
        try:
            return [float(text)]
        except ValueError:
            raise LaunchError("sweep", f"{field}: {text!r} is not a number") from None
    if annotation.startswith("bool"):
        words = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}
        if "None" in annotation:
            words.update(none=None, default=None)
        if text.lower() not in words:
            raise LaunchError("sweep", f"{field}: {text!r} is not one of "
                              f"{', '.join(words)}")
        return [words[text.lower()]]
    return [text]


def sweep_points(grid: Grid) -> list[dict[str, Any]]:
    """The grid's product in axis order, the first axis varying slowest; a paired axis gives
    each of its tuples' fields at once."""
    choices = [[dict(zip(axis_fields(axis), value if isinstance(axis[0], tuple) else (value,),
                         strict=True)) for value in axis[1]] for axis in grid]
    return [{k: v for part in combo for k, v in part.items()}
            for combo in itertools.product(*choices)]


def grid_json(grid: Grid) -> list[dict[str, Any]]:
    """How a sweep stores its grid (``Sweep.grid``) and the API shows it: [{"field", "values"}]
    per axis, {"fields": [...], "values": [[...], ...]} for a paired one."""
    return [{"fields": list(f), "values": [list(v) for v in values]} if isinstance(f, tuple)
            else {"field": f, "values": values} for f, values in grid]


def point_label(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def sweep_run_name(sweep_name: str, point: dict[str, Any], suffix: str = "") -> str:
    """The name of a sweep's run at ``point``: "study [algorithm=grpo, seed=1]" and
    ``suffix`` (" (clone)"). Where it does not fit the column, the sweep's name is shortened,
    never the values: they are what tells the sweep's runs apart."""
    limit = Run._meta.get_field("name").max_length
    tail = f" [{point_label(point)}]{suffix}"
    if len(sweep_name) + len(tail) <= limit:
        return sweep_name + tail
    room = limit - len(tail) - 1
    if room >= 8:
        return sweep_name[:room].rstrip() + "…" + tail
    # Values too long for any name: keep the start of both ends.
    half = (limit - 1) // 2
    whole = sweep_name + tail
    return whole[:half] + "…" + whole[len(whole) - (limit - 1 - half):]


def expand_sweep(name: str, base_config: dict[str, Any], grid: Grid,
                 prompt_set: PromptSet | None, queue: str = "cpu", retention: str = "all",
                 invalid: Collection[str] = ()) -> list[tuple[dict[str, Any], Run]]:
    """Every run of the sweep as (grid point, unsaved run), each checked as ``launch_run``
    checks one. The first run that fails raises ``LaunchError`` with all its errors: on
    ``sweep`` when the swept values are at fault (the base config passes the checks alone), else
    on the base's offending fields, naming the run. ``invalid``: base fields the caller already
    found wrong (``launch_errors``); a swept value replaces them."""
    if not isinstance(base_config, dict):
        raise LaunchError("config", "expected a mapping of config fields")
    checks = {"name": name, "prompt_set": prompt_set, "queue": queue, "retention": retention}
    # Swept values may repair an invalid base: each run is what counts.
    base_ok = not invalid and not launch_errors(base_config, **checks)
    out = []
    for index, point in enumerate(sweep_points(grid)):
        try:
            config_dict, matched = at_budget({**base_config, **point}, point)
            _raise_all(launch_errors(config_dict, **checks,
                                     invalid=set(invalid) - set(point) - set(matched)))
            run = _new_run(TrainConfig.from_dict(config_dict), queue, retention,
                           prompt_set=prompt_set, name=sweep_run_name(name, point),
                           sweep_index=index)
        except LaunchError as exc:
            errors = [_sweep_error(field, reason, point, base_ok) for field, reason in exc.pairs]
            raise LaunchError(*errors[0], more=errors[1:]) from exc
        out.append((point, run))
    return out


def at_budget(config_dict: dict[str, Any], point: dict[str, Any]
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run's config, the keys the budget set) at the grid ``point``: without ``budget``
    the config as it is; with it, the run's algorithm's keys for it (``trainer.budget``). An
    algorithm that cannot match a budget is refused by name, and a key the budget sets may not
    be swept too (the two would disagree)."""
    if BUDGET not in point:
        return config_dict, {}
    config_dict = {k: v for k, v in config_dict.items() if k != BUDGET}
    budget = point[BUDGET]
    algorithm = config_dict["algorithm"] if "algorithm" in config_dict \
        else TrainConfig.algorithm
    try:
        matched = budget_overrides(config_dict, budget)
    except ConfigError as exc:
        raise LaunchError("sweep", f"{BUDGET}={budget!r} for {algorithm}: "
                          f"{exc.reason}") from None
    clash = sorted(set(matched) & set(point))
    if clash:
        raise LaunchError("sweep", f"{BUDGET}={budget!r} sets {clash[0]} for {algorithm}, "
                          f"which is swept too: sweep {BUDGET} or {clash[0]}, not both")
    return {**config_dict, **matched}, matched


def run_point(run: Run) -> dict[str, Any]:
    """The grid point a sweep's run was launched at, from the sweep's grid and the run's place
    in it (``budget`` included, which the run's config does not hold); a run without a place
    reads its swept fields from its config."""
    points = sweep_points(stored_grid(run.sweep.grid))
    if run.sweep_index is not None and 0 <= run.sweep_index < len(points):
        return points[run.sweep_index]
    return {f: (run.config or {}).get(f) for f in run.sweep.fields}


def stored_grid(axes: list[dict[str, Any]]) -> Grid:
    """``grid_json``'s axes as a ``Grid`` again (not checked: they were when stored)."""
    return [(tuple(a["fields"]), [tuple(v) for v in a["values"]]) if "fields" in a
            else (a["field"], list(a["values"])) for a in axes]


def _sweep_error(field: str, reason: str, point: dict[str, Any], base_ok: bool
                 ) -> tuple[str, str]:
    if field == "sweep":  # the grid's own (``at_budget``): it names the values it is about
        return field, reason
    if field in point:
        return "sweep", f"{field}={point[field]!r}: {reason}"
    if base_ok:
        return "sweep", f"the run {point_label(point)}: {field}: {reason}"
    return field, f"{reason} (in the sweep's run {point_label(point)})"


def launch_sweep(owner: User, name: str, base_config: dict[str, Any], grid: Any,
                 prompt_set: PromptSet, eval_set: PromptSet | None = None, queue: str = "cpu",
                 retention: str = "all") -> Sweep:
    """Check every run of the grid, then store the sweep and its queued runs in one
    transaction; each run is enqueued once it commits (a broker that is down leaves them
    queued, as ``launch_run`` does). ``grid`` as for ``sweep_grid``."""
    name = (name or "").strip()
    if not name:
        raise LaunchError("name", "a sweep needs a name")
    axes = sweep_grid(grid)
    sweep = Sweep(owner=owner, name=name, base_config=dict(base_config), grid=grid_json(axes))
    check_fits_columns(sweep)  # first: a bad name is the name's error, not each point's
    runs = expand_sweep(name, base_config, axes, prompt_set, queue, retention)
    with transaction.atomic():
        lock_referenced(prompt_set, eval_set)
        check_active_runs(owner, len(runs))
        sweep.save()
        for _, run in runs:
            run.owner, run.eval_set, run.sweep = owner, eval_set, sweep
            run.save()
            enqueue_on_commit(run)
    # As run.enqueue_error after launch_run: each run says whether the broker took it.
    sweep.launched_runs = [run for _, run in runs]
    return sweep


def can_modify_sweep(sweep: Sweep, user: User) -> bool:
    return bool(user.is_authenticated and (user.is_staff or sweep.owner_id == user.pk))


def cancel_sweep(sweep: Sweep, user: User) -> int:
    """Cancel-all: ``request_cancel`` for every run of the sweep not yet finished nor asked to
    stop (queued runs stop at once, running ones between rounds). Returns how many."""
    if not can_modify_sweep(sweep, user):
        raise PermissionDenied("only the sweep's owner or staff may do this")
    runs = list(Run.objects.filter(sweep=sweep, status__in=Run.ACTIVE_STATUSES,
                                   cancel_requested=False))
    cancelled = 0
    for run in runs:
        try:
            request_cancel(run, user)
        except Gone:  # deleted while this cancel-all went through the sweep
            continue
        cancelled += 1
    return cancelled




# A run a retry may take the place of: it ended without finishing its steps.
RETRYABLE = (Run.Status.FAILED, Run.Status.CANCELLED)


def retryable(run: Run) -> bool:
    """Whether ``retry_run`` would take ``run``: a failed or cancelled run of a sweep that no
    retry has replaced yet."""
    return run.sweep_id is not None and run.status in RETRYABLE and run.replaced_by_id is None


def retry_run(run: Run, user: User) -> Run:
    """Run a failed or cancelled run of a sweep again, in its place: a new run of the same
    sweep, config, prompt sets, queue and retention, at the same place in the grid, trained
    from step 0. The old run keeps its records and its error, marked ``replaced_by`` the new
    one; the sweep's status, compare and report count the new one instead (``sweep_runs``).

    A new run rather than the old one resumed from its checkpoint: the old run's steps came
    from the process that failed (an environment changed under it, a worker lost for good),
    and a run's records should come from one start; a failure stays on the record, on the run
    it happened to."""
    _check_can_modify(run, user)
    if run.sweep is None:
        raise LaunchError("run", "not part of a sweep: relaunch it instead (a new run of its "
                          "own)")
    if run.status not in RETRYABLE:
        raise LaunchError("run", f"the run is {run.status}; only a failed or cancelled run "
                          "of a sweep can be retried in its place")
    point = run_point(run)
    _raise_all(launch_errors(run.config, name=run.name, prompt_set=run.prompt_set,
                             queue=run.queue, retention=run.retention))
    attempt = 2
    earlier = run
    while (earlier := Run.objects.filter(replaced_by=earlier).first()) is not None:
        attempt += 1
    new = _new_run(TrainConfig.from_dict(dict(run.config)), run.queue, run.retention,
                   owner=run.owner, prompt_set=run.prompt_set, eval_set=run.eval_set,
                   sweep=run.sweep, sweep_index=run.sweep_index, cloned_from=run,
                   name=sweep_run_name(run.sweep.name, point, f" (attempt {attempt})"))
    with transaction.atomic():
        # Locked: two retries of the same run at once must not both take its place, and a
        # delete of it waits (or went first: a 404).
        lock_referenced(run.prompt_set, run.eval_set, run)
        check_active_runs(run.owner, 1)
        if not Run.objects.select_for_update().filter(
                pk=run.pk, status__in=RETRYABLE, replaced_by__isnull=True).exists():
            current = Run.objects.get(pk=run.pk)
            if current.replaced_by_id:
                raise Conflict("run", f"already retried, as run {current.replaced_by_id}")
            raise Conflict("run", f"the run is {current.status}; only a failed or "
                           "cancelled run of a sweep can be retried in its place")
        new.save()
        Run.objects.filter(pk=run.pk).update(replaced_by=new)
        enqueue_on_commit(new)
    # The old run may be deleted the moment this transaction let go of its lock.
    run.replaced_by = new
    return new
