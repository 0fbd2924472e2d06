"""Services of the launch preflight (``Estimate``): request, cancel, the worker's lease and
records, and the predictions computed from a finished sample.

A request names a prompt set, a config (its model, backend, generation settings and verifier
are what the sample uses), k and the number of prompts. The same request again returns the
stored estimate instead of sampling twice, unless it failed, was cancelled, lost its worker, or
the user asks to sample again. Sampling runs on a worker of the chosen queue
(``workers.estimate_pass_rates``, enqueued by name); predictions are pure numpy
(``trainer.preflight.predict``) and are computed here once per run shape (B, n, M, N).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from experiments.models import Estimate, PromptSet
from experiments.services import LaunchError, User, config_errors, effective_verifier, queue_errors
from experiments.services.common import _check_can_modify
from experiments.services.enqueue import BrokerUnavailable, enqueue_estimate
from trainer.config import TrainConfig
from trainer.preflight import (
    INTERVAL_KEYS,
    PREDICTION_COLUMNS,
    SIMULATED_DRAWS,
    async_model,
    pass_rates,
    predict,
    predict_async,
    predict_at_budget,
    preflight_warnings,
)

# The settings a sample depends on; the others (algorithm, optimisation) only change predictions.
SAMPLING_FIELDS = ("model", "backend", "device", "rollout_dtype", "temperature", "top_p",
                   "max_new_tokens", "verifier", "simulated_pass_rate")
DEFAULT_K = 16
DEFAULT_PROMPTS = 64
MAX_K = 256
MAX_PROMPTS = 1024
# Run shapes whose predictions an estimate keeps (each is a fraction of a second to recompute).
MAX_SHAPES = 16


def estimate_key(config: TrainConfig, prompt_set: PromptSet, k: int, num_prompts: int,
                 seed: int, queue: str = "cpu") -> str:
    """What makes two requests one sample: the sampling settings as they resolve on the
    queue's workers (``device = "auto"`` and ``"cpu"`` on the cpu queue are one setting, and
    "auto" on the gpu queue another), the prompts, k and the seed."""
    cfg = config.resolved(device=settings.RUN_QUEUE_DEVICES.get(queue))
    what = {"prompt_set": prompt_set.pk, "k": k, "num_prompts": num_prompts, "seed": seed,
            **{f: cfg[f] for f in SAMPLING_FIELDS if f in cfg}}
    if cfg.get("backend") != "simulated":
        what.pop("simulated_pass_rate", None)
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _stale_before() -> Any:
    return timezone.now() - dt.timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS)


def request_estimate(owner: User, config_dict: dict[str, Any], prompt_set: PromptSet, *,
                     queue: str = "cpu", samples_per_prompt: int = DEFAULT_K,
                     num_prompts: int = DEFAULT_PROMPTS, seed: int = 0,
                     again: bool = False) -> Estimate:
    """The estimate for these settings: a stored one when the same sample exists (finished, or
    in progress on a live worker), else a new one enqueued on ``queue`` after commit."""
    errors = config_errors(config_dict) + queue_errors(config_dict, queue)
    if prompt_set is None:
        errors.append(("prompt_set", "choose a prompt set"))
    if not 1 <= samples_per_prompt <= MAX_K:
        errors.append(("samples_per_prompt", f"must be within [1, {MAX_K:,}]"))
    if not 1 <= num_prompts <= MAX_PROMPTS:
        errors.append(("num_prompts", f"must be within [1, {MAX_PROMPTS:,}]"))
    if errors:
        raise LaunchError(*errors[0], more=errors[1:])
    config = effective_verifier(TrainConfig.from_dict(dict(config_dict)), prompt_set)
    num_prompts = min(num_prompts, prompt_set.size)
    key = estimate_key(config, prompt_set, samples_per_prompt, num_prompts, seed, queue)
    if not again:
        reusable = (Estimate.objects.filter(key=key)
                    .filter(Q(status=Estimate.Status.SUCCEEDED) | Q(status=Estimate.Status.QUEUED)
                            | Q(status=Estimate.Status.RUNNING, heartbeat_at__gte=_stale_before()))
                    .order_by("-created_at").first())
        if reusable is not None:
            return reusable
    with transaction.atomic():
        estimate = Estimate.objects.create(
            owner=owner, prompt_set=prompt_set, model=config.model, config=config.to_dict(),
            key=key, queue=queue, samples_per_prompt=samples_per_prompt,
            num_prompts=num_prompts, seed=seed)
        estimate_id = estimate.pk

        def enqueue() -> None:
            try:
                enqueue_estimate(estimate_id, queue)
            except BrokerUnavailable as exc:  # nothing will sample it: say so, do not hang
                Estimate.objects.filter(pk=estimate_id).update(
                    status=Estimate.Status.FAILED, finished_at=Now(),
                    error=f"the broker (Redis) is unreachable, so no worker got the estimate "
                          f"({exc}); ask again when it is back")

        transaction.on_commit(enqueue)
    return estimate


def cancel_estimate(estimate: Estimate, user: User) -> Estimate:
    """A queued estimate is cancelled at once; a running one stops before its next chunk of
    prompts and keeps what it sampled."""
    _check_can_modify(estimate, user)
    if not Estimate.objects.filter(pk=estimate.pk, status=Estimate.Status.QUEUED).update(
            status=Estimate.Status.CANCELLED, cancel_requested=True, finished_at=Now()):
        Estimate.objects.filter(pk=estimate.pk, status=Estimate.Status.RUNNING).update(
            cancel_requested=True)
    estimate.refresh_from_db()
    return estimate


# --- the worker's side --------------------------------------------------------------------------

def acquire_estimate(estimate_id: int, owner: str) -> Estimate | None:
    """Take a queued estimate, or a running one whose worker stopped reporting; None when it is
    finished, cancelled, gone or in progress elsewhere (a redelivered task then does nothing)."""
    taken = Estimate.objects.filter(
        Q(status=Estimate.Status.QUEUED)
        | Q(status=Estimate.Status.RUNNING, heartbeat_at__lt=_stale_before()),
        pk=estimate_id, cancel_requested=False,
    ).update(status=Estimate.Status.RUNNING, lease_owner=owner, heartbeat_at=Now(),
             started_at=Now(), prompts_done=0)
    if not taken:
        return None
    return Estimate.objects.select_related("prompt_set").get(pk=estimate_id)


def record_estimate_progress(estimate_id: int, owner: str, prompts_done: int) -> tuple[bool, bool]:
    """Progress and heartbeat; returns (cancel requested, lease lost)."""
    updated = Estimate.objects.filter(pk=estimate_id, lease_owner=owner).update(
        prompts_done=prompts_done, heartbeat_at=Now())
    if not updated:
        return False, True
    cancel = Estimate.objects.filter(pk=estimate_id).values_list("cancel_requested",
                                                                 flat=True).first()
    return bool(cancel), False


def finish_estimate(estimate_id: int, owner: str, status: str, *, results: list[Any] | None = None,
                    tokens: int = 0, time_generation: float = 0.0, time_scoring: float = 0.0,
                    error: str = "", traceback: str = "") -> bool:
    """Store how the sample ended; False when the lease was lost."""
    fields: dict[str, Any] = {"status": status, "error": error, "traceback": traceback,
                              "finished_at": Now(),
                              "heartbeat_at": Now(), "lease_owner": ""}
    if results is not None:
        fields.update(results=results, prompts_done=len(results), tokens=tokens,
                      time_generation=time_generation, time_scoring=time_scoring)
    return bool(Estimate.objects.filter(pk=estimate_id, lease_owner=owner).update(**fields))


# --- reading a finished estimate ----------------------------------------------------------------

def run_shape(estimate: Estimate, overrides: dict[str, Any] | None = None) -> dict[str, int]:
    """B, n, M, N of the predictions: the requesting config's, or those of ``overrides``."""
    cfg = TrainConfig.from_stored(estimate.config)
    shape = {k: int(getattr(cfg, k))
             for k in ("batch_size", "group_size", "samples_per_round", "max_rounds")}
    shape.update({k: int(v) for k, v in (overrides or {}).items() if v is not None and k in shape})
    return shape


def _shape_key(shape: dict[str, int]) -> str:
    return "B{batch_size}-n{group_size}-M{samples_per_round}-N{max_rounds}".format(**shape)


def _current(rows: list[dict[str, Any]]) -> bool:
    """Whether stored rows have this version's columns (``PREDICTION_COLUMNS``, and the
    interval of samples per step): rows an older version stored, whose columns meant other
    things or lacked the interval, are computed afresh."""
    keys = [c.key for c in PREDICTION_COLUMNS] + list(INTERVAL_KEYS)
    return all(r.get("error") or all(k in r for k in keys) for r in rows)


def estimate_summary(estimate: Estimate) -> dict[str, Any]:
    """Measured pass rates, warnings and throughput of a sample (empty before it finishes)."""
    threshold = TrainConfig.from_stored(estimate.config).positive_threshold
    rewards = [r["rewards"] for r in estimate.results]
    errors = [int(r.get("errors", 0)) for r in estimate.results]
    samples = sum(len(r) for r in rewards)
    return {
        "pass_rates": pass_rates(rewards, threshold),
        "warnings": preflight_warnings(rewards, errors, threshold),
        "samples": samples,
        "verifier_errors": sum(errors),
        "seconds_per_sample": ((estimate.time_generation + estimate.time_scoring) / samples
                               if samples else None),
        "samples_per_second": (samples / estimate.time_generation
                               if estimate.time_generation > 0 else None),
        "tokens_per_second": (estimate.tokens / estimate.time_generation
                              if estimate.time_generation > 0 else None),
    }


def simulated_draws() -> int:
    """Simulated steps per prediction (``trainer.preflight.SIMULATED_DRAWS``), read when
    called, so that a test of the pages can ask for fewer."""
    return SIMULATED_DRAWS


def estimate_predictions(estimate: Estimate, shape: dict[str, int], *,
                         draws: int | None = None) -> list[dict[str, Any]]:
    """Predicted per-step figures of every algorithm for a run of ``shape`` (see
    ``trainer.preflight.predict``), computed once per shape and kept with the estimate."""
    if estimate.status != Estimate.Status.SUCCEEDED or not estimate.results:
        return []
    key = _shape_key(shape)
    stored = (estimate.predictions or {}).get(key)
    if stored is not None and _current(stored):
        return stored
    summary = estimate_summary(estimate)
    rows = predict(summary["pass_rates"], seconds_per_sample=summary["seconds_per_sample"],
                   seed=estimate.seed, draws=draws or simulated_draws(), **shape)
    _keep(estimate, key, rows)
    return rows


def budget_predictions(estimate: Estimate, budget: int, batch_size: int | None = None, *,
                       draws: int | None = None) -> list[dict[str, Any]]:
    """Every algorithm at ``budget`` responses per prompt (a sweep's ``budget``,
    ``trainer.preflight.predict_at_budget``), on the estimate's config (its n, M and the
    algorithms' options) at B = ``batch_size`` (the config's by default): the samples per step
    each will spend; kept with the estimate like ``estimate_predictions``."""
    if estimate.status != Estimate.Status.SUCCEEDED or not estimate.results:
        return []
    batch_size = batch_size or run_shape(estimate)["batch_size"]
    key = f"B{batch_size}-budget{budget}"
    stored = (estimate.predictions or {}).get(key)
    if stored is not None and _current(stored):
        return stored
    summary = estimate_summary(estimate)
    rows = predict_at_budget(summary["pass_rates"], budget=budget, batch_size=batch_size,
                             config=dict(estimate.config),
                             seconds_per_sample=summary["seconds_per_sample"],
                             seed=estimate.seed, draws=draws or simulated_draws())
    _keep(estimate, key, rows)
    return rows


def _keep(estimate: Estimate, key: str, rows: list[dict[str, Any]]) -> None:
    """Store ``rows`` under ``key`` with the estimate's other predictions (at most MAX_SHAPES;
    the requesting config's shape stays)."""
    with transaction.atomic():
        locked = Estimate.objects.select_for_update().get(pk=estimate.pk)
        kept = dict(locked.predictions or {})
        if len(kept) >= MAX_SHAPES:
            own = _shape_key(run_shape(estimate))
            kept = {k: v for k, v in kept.items() if k == own}
        locked.predictions = {**kept, key: rows}
        locked.save(update_fields=["predictions"])
    estimate.predictions = locked.predictions
    return rows


def estimate_async(estimate: Estimate, shape: dict[str, int]) -> dict[str, Any] | None:
    """For a requesting config with max_policy_lag = k >= 1: its algorithm's step time and idle
    shares at k beside the synchronous step's (``trainer.preflight.predict_async``), computed
    once per run shape and kept with the estimate; None for a synchronous config or an estimate
    not finished."""
    cfg = TrainConfig.from_stored(estimate.config)
    if not cfg.max_policy_lag or estimate.status != Estimate.Status.SUCCEEDED \
            or not estimate.results:
        return None
    key = f"async-{_shape_key(shape)}"
    stored = (estimate.predictions or {}).get(key)
    if stored is not None:
        return stored
    prediction = predict_async(
        estimate_summary(estimate)["pass_rates"], algorithm=cfg.algorithm,
        max_policy_lag=cfg.max_policy_lag, max_tokens=cfg.max_new_tokens,
        world_size=cfg.world_size, rollout_ranks=cfg.rollout_ranks,
        model=async_model(cfg.model), seed=estimate.seed, **shape)
    with transaction.atomic():
        locked = Estimate.objects.select_for_update().get(pk=estimate.pk)
        locked.predictions = {**(locked.predictions or {}), key: prediction}
        locked.save(update_fields=["predictions"])
    estimate.predictions = locked.predictions
    return prediction
