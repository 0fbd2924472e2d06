"""Reinforce-Ada-Est (v3): one round per step, the samples allocated per prompt from a
persistent pass-rate estimate, every sample kept, the hybrid advantage:

    p_hat_x  Beta(alpha, beta) posterior mean of decayed counts (trainer.allocation)
    N_x      = clip(c * w(p_hat_x), N_min, N_max),  sum_x N_x = budget x B,  w = 1/sqrt(p + eps)
    A_i      = (r_i - rbar_x) / sqrt(rbar_x + eps)  (trainer.advantages.hybrid_advantages)

After the step the estimator takes the step's counts (decay ``est_lambda``). docs/
reinforce-ada-est.md has the derivation and the authors' code it follows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from trainer import seeds
from trainer.algorithms.base import Algorithm, SampledStep, StepContext
from trainer.algorithms.sampling import sample_rounds
from trainer.allocation import Allocation, PassRateEstimator, plan_allocation
from trainer.config import MAX_SAMPLES_PER_PROMPT
from trainer.options import Option
from trainer.types import count, fraction
from trainer.validation import CrossCheck

if TYPE_CHECKING:
    from trainer.config import TrainConfig
    from trainer.result import SamplerResult
    from trainer.types import Prompt

# trainer_state.json key of the estimator (run state, like the weights).
ESTIMATOR_STATE = "pass_rate_estimator"
# The allocation weights w(p) (trainer.allocation.ALLOCATION_WEIGHTS).
EST_WEIGHTS = ("inv-sqrt", "inv")

# Est's options: keys of every run's config (the names and the stored JSON of the config fields
# they were before), read by Est alone.
OPTIONS = (
    Option("budget_per_prompt", 8, "Est: samples per prompt on average; a step draws exactly "
           "budget_per_prompt x B (default 8: the budget of GRPO n=8).", "responses",
           ge=1, le=MAX_SAMPLES_PER_PROMPT, group="est"),
    Option("est_min_samples", 2, "Est: N_min, fewest samples a prompt gets (2: the smallest "
           "group with a baseline).", "responses", ge=1, le=MAX_SAMPLES_PER_PROMPT,
           group="est"),
    Option("est_max_samples", 32, "Est: N_max, most samples a prompt gets (32: the Seq "
           "variants' cap M x N at the defaults).", "responses", ge=1,
           le=MAX_SAMPLES_PER_PROMPT, group="est"),
    Option("est_weight", "inv-sqrt", "Est: allocation weight w(p), inv-sqrt = 1/sqrt(p + eps) "
           "(the paper's hybrid for the log objective) or inv = 1/(p + eps) (the paper's "
           "ablation; the authors' experimental code).", choices=EST_WEIGHTS, group="est"),
    Option("est_residual_weight", True, "Est: multiply advantages by 1/sqrt(mean reward + "
           "eps), the hybrid's residual weight (off: plain r - mean).", group="est"),
    Option("est_alpha", 1.0, "Est: alpha of the Beta(alpha, beta) prior of the pass-rate "
           "estimate (authors' code: 1).", "pseudo-positives", ge=0, le=1_000_000, group="est"),
    Option("est_beta", 16.0, "Est: beta of the Beta(alpha, beta) prior (authors' code: 16).",
           "pseudo-negatives", ge=0, le=1_000_000, group="est"),
    Option("est_lambda", 0.9, "Est: decay of the estimator's counts before each update "
           "(authors' code: 0.9; 1: never forget).", ge=0, le=1, group="est"),
    Option("est_eps", 1e-6, "Est: eps in 1/sqrt(p + eps) and 1/sqrt(mean reward + eps).",
           gt=0, le=1, group="est"),
)


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


def est_admit(config: TrainConfig, estimator: PassRateEstimator, prompts: Sequence[Prompt]
              ) -> Allocation:
    """Asynchronous Est: the prompts admitted together are allocated from the estimator's
    state at admission (their budget sums to budget_per_prompt each, as a step's does)."""
    return plan_allocation(estimator, [p.id for p in prompts], config)


def est_trained(config: TrainConfig, estimator: PassRateEstimator, prompts: Sequence[Prompt],
                result: SamplerResult) -> None:
    """Asynchronous Est: the estimator takes an update's prompts' counts when it trains them."""
    estimator.update([p.id for p in prompts], result.positives, result.samples)


def est_metrics(config: TrainConfig, res: SamplerResult,
                allocation: Allocation | None) -> dict[str, float]:
    if allocation is None:
        return {}
    p_hat = allocation.p_hat
    return {"p_hat_mean": float(p_hat.mean()) if len(p_hat) else 0.0,
            "alloc_scale": float(allocation.scale)}


def est_counts_ordered(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.est_min_samples > c.est_max_samples:
        yield "est_max_samples", (f"must be >= est_min_samples ({c.est_min_samples}), got "
                                  f"{c.est_max_samples}")


def est_budget_reachable(c: TrainConfig) -> Iterator[tuple[str, str]]:
    # With N_min > N_max est_counts_ordered says so: an empty interval would say nothing more.
    if c.est_min_samples <= c.est_max_samples \
            and not c.est_min_samples <= c.budget_per_prompt <= c.est_max_samples:
        # Otherwise no allocation within [N_min, N_max] sums to the budget.
        yield "budget_per_prompt", (f"must be within [est_min_samples, est_max_samples] = "
                                    f"[{c.est_min_samples}, {c.est_max_samples}], got "
                                    f"{c.budget_per_prompt}")


def est_prior_proper(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.est_alpha + c.est_beta <= 0:
        # p-hat of a prompt never sampled would be 0/0.
        yield "est_beta", "est_alpha + est_beta must be > 0"


# Est's own checks across its options (they say nothing about another algorithm's run).
EST_CHECKS = (
    CrossCheck(("est_min_samples", "est_max_samples"), est_counts_ordered,
               {"est_min_samples": 40}),
    CrossCheck(("budget_per_prompt", "est_min_samples", "est_max_samples"),
               est_budget_reachable, {"budget_per_prompt": 1}),
    CrossCheck(("est_alpha", "est_beta"), est_prior_proper, {"est_alpha": 0.0, "est_beta": 0.0}),
)


def est_budget(c: TrainConfig, budget: int) -> dict[str, Any]:
    """A matched budget is budget_per_prompt: a step draws exactly B x budget, allocated over
    the prompts within [N_min, N_max]. Where that interval does not hold the budget, its near
    end moves to the budget (no allocation could sum to it otherwise); where it does, it stays
    as given."""
    keys: dict[str, Any] = {"budget_per_prompt": budget}
    if budget > c.est_max_samples:
        keys["est_max_samples"] = budget
    if budget < c.est_min_samples:
        keys["est_min_samples"] = budget
    return keys


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
    match_budget=est_budget, budget_match="exact",
    budget_note="budget_per_prompt = budget: exactly B x budget per step, allocated over the "
                "batch from the pass-rate estimate (est_max_samples or est_min_samples moved "
                "to the budget where [N_min, N_max] does not hold it)",
    step_metrics={
        "p_hat_mean": fraction("mean pass-rate estimate of the batch before sampling",
                               "mean p-hat"),
        "alloc_scale": count("c of the allocation N = clip(c * w(p_hat), N_min, N_max)",
                             "samples per unit weight", "allocation scale c")},
    extra_metrics=est_metrics,
    make_state=PassRateEstimator.from_config, state_key=ESTIMATOR_STATE,
    async_admit=est_admit, async_trained=est_trained,
    options=OPTIONS, config_checks=EST_CHECKS, schedulers=("round",),
    schedulers_reason="it draws a single round with per-prompt sample counts, so there is no "
                      "later round to start early and no exit rule to stream",
    summary_fields=("group_size", "budget_per_prompt"))
