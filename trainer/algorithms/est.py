"""Reinforce-Ada-Est (v3): one round per step, the samples allocated per prompt from a
persistent pass-rate estimate, every sample kept, the hybrid advantage:

    p_hat_x  Beta(alpha, beta) posterior mean of decayed counts (trainer.allocation)
    N_x      = clip(c * w(p_hat_x), N_min, N_max),  sum_x N_x = budget x B,  w = 1/sqrt(p + eps)
    A_i      = (r_i - rbar_x) / sqrt(rbar_x + eps)  (trainer.advantages.hybrid_advantages)

After the step the estimator takes the step's counts (decay ``est_lambda``). docs/
reinforce-ada-est.md has the derivation and the authors' code it follows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer import seeds
from trainer.algorithms.base import (
    Algorithm,
    SampledStep,
    StepContext,
    sample_rounds,
)
from trainer.allocation import Allocation, PassRateEstimator, plan_allocation
from trainer.types import count, fraction

if TYPE_CHECKING:
    from trainer.config import TrainConfig
    from trainer.sampler import SamplerResult

# trainer_state.json key of the estimator (run state, like the weights).
ESTIMATOR_STATE = "pass_rate_estimator"


def sample_est_step(ctx: StepContext) -> SampledStep:
    """Estimate and allocate, draw the single round, then update the estimator with the step's
    counts. A cancelled step leaves the estimator as it was."""
    estimator: PassRateEstimator = ctx.state
    ids = [p.id for p in ctx.batch]
    allocation = plan_allocation(estimator, ids, ctx.config)
    res, outcome = sample_rounds(
        ctx, ctx.batch, allocation=allocation.counts,
        downsample_seed=seeds.derive_seed(ctx.config.seed, ctx.step, seeds.DOWNSAMPLE),
        generation_seed=seeds.derive_seed(ctx.config.seed, ctx.step, seeds.GENERATION))
    if res is not None:
        estimator.update(ids, res.positives, res.samples)
    return SampledStep(res, outcome, allocation, list(ctx.batch))


def est_metrics(config: TrainConfig, res: SamplerResult,
                allocation: Allocation | None) -> dict[str, float]:
    if allocation is None:
        return {}
    p_hat = allocation.p_hat
    return {"p_hat_mean": float(p_hat.mean()) if len(p_hat) else 0.0,
            "alloc_scale": float(allocation.scale)}


def est_sampler_options(c: TrainConfig) -> dict[str, Any]:
    # Without the residual weight, Est's advantage is the plain global-baseline one.
    return {"eps": c.est_eps, **({} if c.est_residual_weight else {"advantage": "global"})}


EST = Algorithm(
    name="ada-est", label="Reinforce-Ada Est",
    help="Est: one round, samples allocated per prompt from a persistent pass-rate estimate",
    sampling="allocation", sample_step=sample_est_step,
    advantage="hybrid", std_normalize=False, downsample=False,
    sampler_options=est_sampler_options,
    max_samples_per_prompt=lambda c: c.est_max_samples,
    max_samples_per_step=lambda c: c.batch_size * c.budget_per_prompt,
    step_shape="batch_size x budget_per_prompt",
    step_metrics={
        "p_hat_mean": fraction("mean pass-rate estimate of the batch before sampling",
                               "mean p-hat"),
        "alloc_scale": count("c of the allocation N = clip(c * w(p_hat), N_min, N_max)",
                             "samples per unit weight", "allocation scale c")},
    extra_metrics=est_metrics,
    make_state=PassRateEstimator.from_config, state_key=ESTIMATOR_STATE,
    schedulers=("round",),
    schedulers_reason="it draws a single round with per-prompt sample counts, so there is no "
                      "later round to start early and no exit rule to stream",
    summary_fields=("group_size", "budget_per_prompt"))
