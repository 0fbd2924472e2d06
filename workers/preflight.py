"""Sampling a launch preflight on a worker: the estimate's model, backend, generation settings and
verifier (those a run with its config would use), ``k`` responses for each prompt of a seeded
subset of its prompt set. Progress goes to the estimate row after every chunk of prompts; a
cancel request stops it before the next chunk.

The sampling runs in a child process of the worker, as a run's training does
(``workers.run_process``): a model that kills its process (OOM, a native crash) fails the
estimate with the reason, and the worker goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from experiments import preflight as services
from experiments.models import Estimate

from trainer.config import TrainConfig
from trainer.errors import plain_traceback, reason
from trainer.preflight import PassRateSample, choose_prompts, sample_pass_rates
from workers.execution import (
    how_it_ended,
    make_backend,
    new_lease_owner,
    run_child,
    trainer_prompts,
)

logger = logging.getLogger("workers.preflight")


def execute_estimate(estimate_id: int) -> str:
    """Sample estimate ``estimate_id`` in a child process; returns what happened, for the
    worker's log."""
    owner = new_lease_owner()
    if services.acquire_estimate(estimate_id, owner) is None:
        logger.info("estimate %s: skipped (finished, cancelled, gone or taken)", estimate_id)
        return "skipped"
    returncode = run_child("estimate", str(estimate_id), owner)
    if returncode == 0:
        return str(Estimate.objects.filter(pk=estimate_id).values_list("status", flat=True)
                   .first() or "deleted")
    how = how_it_ended(returncode)
    logger.error("estimate %s: its process was %s", estimate_id, how)
    # Not tried again: an estimate is cheap to request anew, a poison one would kill the next.
    services.finish_estimate(estimate_id, owner, Estimate.Status.FAILED,
                             error=f"the estimate's process was {how} (out of memory, or a "
                                   "crash in the model's native code); not tried again")
    return "failed"


def estimate_in_this_process(estimate_id: int, owner: str) -> str:
    """The child's work: sample estimate ``estimate_id`` under the lease ``owner`` the worker
    took and store the outcome."""
    from trainer.loop import make_scorer  # the run's verifier, as the training loop scores

    estimate = Estimate.objects.select_related("prompt_set").get(pk=estimate_id)
    state = {"cancel": False, "lost": False}

    def on_progress(done: int, sample: PassRateSample) -> None:
        state["cancel"], state["lost"] = services.record_estimate_progress(
            estimate_id, owner, done)

    try:
        config = TrainConfig.from_dict(estimate.config)
        prompts = trainer_prompts(estimate.prompt_set_id)
        chosen = [prompts[i] for i in choose_prompts(len(prompts), estimate.num_prompts,
                                                     estimate.seed)]
        backend = make_backend(config, chosen)
        try:
            sample = sample_pass_rates(backend, chosen, estimate.samples_per_prompt,
                                       make_scorer(config), seed=estimate.seed,
                                       on_progress=on_progress,
                                       should_stop=lambda: state["cancel"] or state["lost"])
        finally:
            # The engine, its temporary weights and a distributed run's Ray: the process ends
            # without finalization (``run_process.end_now``).
            close = getattr(backend, "close", None)
            if close is not None:
                close()
    except Exception as exc:
        logger.exception("estimate %s failed", estimate_id)
        services.finish_estimate(estimate_id, owner, Estimate.Status.FAILED,
                                 error=reason(exc)[:2000],
                                 traceback=plain_traceback(exc)[-20_000:])
        return "failed"
    if state["lost"]:
        return "lease lost"
    status = Estimate.Status.CANCELLED if sample.cancelled else Estimate.Status.SUCCEEDED
    results: list[dict[str, Any]] = [
        {"prompt_id": int(pid), "rewards": rewards, "errors": errors}
        for pid, rewards, errors in zip(sample.prompt_ids, sample.rewards, sample.errors,
                                        strict=True)]
    services.finish_estimate(estimate_id, owner, status, results=results, tokens=sample.tokens,
                             time_generation=sample.time_generation,
                             time_scoring=sample.time_scoring)
    logger.info("estimate %s: %s (%s prompts, %.1f s generating)", estimate_id, status,
                len(results), sample.time_generation)
    return status
