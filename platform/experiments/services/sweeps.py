"""Sweeps: a grid of config values over a base config, expanded, validated and launched whole
or not at all; cancelled as one."""

from __future__ import annotations

import difflib
import itertools
import json
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction

from experiments.models import PromptSet, Run, Sweep
from experiments.services.common import LaunchError, User, _raise_all, check_fits_columns
from experiments.services.enqueue import enqueue_on_commit
from experiments.services.launch import _new_run, launch_errors
from experiments.services.runs import request_cancel
from trainer.config import TrainConfig, field_specs

# A sweep is one launch of many runs: the product of a grid of config values over a base config.
# The grid is a list of axes [(field, values)]; every expanded config is validated (and every
# launch check made) before anything is stored, so a sweep is launched whole or not at all.

# Set from the chosen prompt sets, never swept: a sweep over data is a sweep over prompt sets.
UNSWEEPABLE = ("prompts", "eval_prompts")
Grid = list[tuple[str, list[Any]]]


def parse_sweep_spec(text: str) -> Grid:
    """The launch form's and the command line's spelling of a grid: axes separated by ``;`` or
    new lines, each ``field=v1,v2,...``; an integer field also takes a range ``a..b``
    (inclusive). Values get the field's type; errors name the field ``sweep``."""
    axes: Grid = []
    problems: list[str] = []
    for part in text.replace("\n", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        field, eq, raw = part.partition("=")
        field = field.strip()
        if not eq or not field:
            problems.append(f"expected field=value,value,... in {part!r}")
            continue
        values = [v.strip() for v in raw.split(",") if v.strip()]
        axes.append((field, values))
    try:
        grid = sweep_grid(axes) if axes or not problems else []
    except LaunchError as exc:
        problems += [reason for _, reason in exc.pairs]
    if problems:
        raise LaunchError("sweep", problems[0], more=[("sweep", p) for p in problems[1:]])
    return grid


def sweep_grid(axes: Any) -> Grid:
    """Check and type a grid given as ``[(field, values)]``, ``[{"field", "values"}]`` or a
    mapping {field: values} (a mapping keeps the caller's order). Strings are converted to the
    field's type (``"1e-4"`` for a float field, ``"0..4"`` for an int field); other values are
    kept as they are for the config's own validation."""
    types = {spec["name"]: spec["type"] for spec in field_specs()}
    if isinstance(axes, dict):
        axes = list(axes.items())
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
        raise LaunchError("sweep", f"{size:,} runs; a sweep may have at most "
                          f"{settings.SWEEP_MAX_RUNS:,}")
    return grid


def _sweep_axis(axis: Any, types: dict[str, str], grid: Grid) -> tuple[str, list[Any]]:
    """One axis of ``sweep_grid``, checked and typed (``grid``: the axes before it)."""
    if isinstance(axis, dict) and set(axis) == {"field", "values"}:
        field, values = axis["field"], axis["values"]
    elif isinstance(axis, (list, tuple)) and len(axis) == 2:
        field, values = axis
    else:
        raise LaunchError("sweep", f"expected a field and its values, got {axis!r}")
    if not isinstance(field, str) or field not in types:
        close = difflib.get_close_matches(str(field), list(types), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise LaunchError("sweep", f"{field}: no such config field{hint}")
    if field in UNSWEEPABLE:
        raise LaunchError("sweep", f"{field}: set by the prompt set, not sweepable")
    if any(f == field for f, _ in grid):
        raise LaunchError("sweep", f"{field}: swept twice")
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
    seen: set[str] = set()
    for value in typed:
        key = json.dumps(value)
        if key in seen:
            raise LaunchError("sweep", f"{field}: value {value!r} appears twice")
        seen.add(key)
    return field, typed


def _typed_values(field: str, annotation: str, value: Any) -> list[Any]:
    if not isinstance(value, str):
        return [value]
    text = value.strip()
    if annotation == "int":
        lo, dots, hi = text.partition("..")
        try:
            if not dots:
                return [int(text)]
            first, last = int(lo), int(hi)
        except ValueError:
            raise LaunchError("sweep", f"{field}: {text!r} is not an integer or a range "
                              "a..b") from None
        if not 0 <= last - first < settings.SWEEP_MAX_RUNS:
            raise LaunchError("sweep", f"{field}: range {text!r} is empty or too long")
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
    """The grid's product in axis order: the first axis varies slowest."""
    fields = [f for f, _ in grid]
    return [dict(zip(fields, combo, strict=True))
            for combo in itertools.product(*(values for _, values in grid))]


def point_label(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def expand_sweep(name: str, base_config: dict[str, Any], grid: Grid,
                 prompt_set: PromptSet | None, queue: str = "cpu", retention: str = "all"
                 ) -> list[tuple[dict[str, Any], Run]]:
    """Every run of the sweep as (grid point, unsaved run), each checked as ``launch_run``
    checks one. The first run that fails raises ``LaunchError`` with all its errors: on
    ``sweep`` when the swept values are at fault (the base config passes the checks alone), else
    on the base's offending fields, naming the run."""
    if not isinstance(base_config, dict):
        raise LaunchError("config", "expected a mapping of config fields")
    checks = {"name": name, "prompt_set": prompt_set, "queue": queue, "retention": retention}
    # Swept values may repair an invalid base: each run is what counts.
    base_ok = not launch_errors(base_config, **checks)
    limit = Run._meta.get_field("name").max_length
    out = []
    for point in sweep_points(grid):
        config_dict = {**base_config, **point}
        try:
            _raise_all(launch_errors(config_dict, **checks))
            run = _new_run(TrainConfig.from_dict(config_dict), queue, retention,
                           prompt_set=prompt_set, name=f"{name} [{point_label(point)}]"[:limit])
        except LaunchError as exc:
            errors = [_sweep_error(field, reason, point, base_ok) for field, reason in exc.pairs]
            raise LaunchError(*errors[0], more=errors[1:]) from exc
        out.append((point, run))
    return out


def _sweep_error(field: str, reason: str, point: dict[str, Any], base_ok: bool
                 ) -> tuple[str, str]:
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
    sweep = Sweep(owner=owner, name=name, base_config=dict(base_config),
                  grid=[{"field": f, "values": values} for f, values in axes])
    check_fits_columns(sweep)  # first: a bad name is the name's error, not each point's
    runs = expand_sweep(name, base_config, axes, prompt_set, queue, retention)
    with transaction.atomic():
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
    for run in runs:
        request_cancel(run, user)
    return len(runs)


