"""GVM-RAFT (Yao, Hao, Zhang, Dong, Xiong, Jiang, Zhang, arXiv 2505.02391, "Optimizing
Chain-of-Thought Reasoners via Gradient Variance Minimization in Rejection Sampling and RL"):
a two-stage, prompt-specific allocation of a step's sampling budget that minimises the variance
of the stochastic gradient, with GRPO's advantage (the authors' GVM script trains with GRPO).

Every step, for its B prompts:

1. stage 1: each prompt draws ``gvm_stage1`` responses (the authors' 8); its acceptance rate
   is p_i = accepted / gvm_stage1 (this step's own estimate, no history: the authors' code
   estimates from the first stage alone);
2. the second stage's budget N = (``gvm_budget`` - ``gvm_stage1``) x B is allocated by the
   paper's rule (the authors' ``calc_sample_ratio``, em/stage_2_calc_sample_size.py):

       n_i  proportional to  G_i / sqrt(p_i + alpha / p_i^(beta - 1)),   0 where p_i = 0,

   alpha = 1e-3 and beta = 2 (the authors' defaults): the variance-minimising n_i ~ G_i /
   sqrt(p_i), with the penalty alpha / p^(beta - 1) keeping the hardest prompts from taking the
   whole budget on a few lucky acceptances. G_i, the prompt's gradient norm, is 1 here (see
   below). The real-valued shares are clipped to [``gvm_min_samples``, ``gvm_max_samples``]
   and rounded to integers summing to N exactly (``gvm_allocate``: Est's water-filling and
   largest-remainder rounding, ``trainer.allocation.allocate``, which gives what the authors'
   round-then-correct-by-residuals gives, ties aside);
3. stage 2: each prompt with n_i > 0 draws n_i more; the update trains on the second stage's
   responses only (the first stage estimates, as in the authors' pipeline), GRPO's advantage
   within each prompt's second-stage group.

The authors' G_i is the mean, over the prompt's accepted first-stage responses, of the norm of
the gradient of their sequence log-likelihood with respect to the embedding matrix: one
backward pass per accepted response before the second stage. This platform's sampling has no
backward pass (the simulated backend has no model at all), so G_i = 1 for every prompt with an
acceptance and the allocation follows the acceptance rates alone; docs/paper-fidelity.md
("GVM-RAFT") says what that changes.

Asynchronous training (max_policy_lag > 0) admits prompts one at a time, so no first stage
over a batch exists there: each prompt draws ``gvm_budget`` responses in one round and trains
on all of them (GRPO with n = gvm_budget), which is what ``draws`` describes; the simulators
that read ``draws`` predict that too.

The run page: the stacked share of the second stage's budget that went to prompts of each
first-stage pass rate (``ALLOCATION_CHART``), the mean pass rate and largest allocation
(``PASS_RATE_CHART``), and the last step's n_i against p_i on the rule's curve (a drawing of
its own: platform/dashboard/charts/gvm_raft.py); every prompt's p_i and n_i are recorded in
its step row (``Allocation``: the prompt's history shows them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import seeds
from trainer.algorithms.base import Algorithm, SampledStep, StepContext
from trainer.allocation import Allocation, allocate
from trainer.charts import ChartSpec, Panel
from trainer.config import MAX_SAMPLES_PER_PROMPT
from trainer.options import Option
from trainer.result import SamplerResult
from trainer.sampler import AdaptiveSampler
from trainer.schedulers import run_scheduler
from trainer.types import RoundsOutcome, count, fraction
from trainer.validation import ConfigError, CrossCheck

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trainer.config import TrainConfig
    from trainer.types import Prompt

# verl's GRPO epsilon in (r - mean) / (std + eps), which the authors' GVM script trains with
# (verl/trainer/ppo/core_algos.py, compute_grpo_outcome_advantage).
GVM_EPS = 1e-6

OPTIONS = (
    Option("gvm_budget", 16, "GVM-RAFT: samples per prompt per step on average, both stages "
           "together; a step draws exactly gvm_budget x B (default 16: the authors' 8 in the "
           "first stage and 8 per prompt on average in the second).", "responses",
           ge=2, le=MAX_SAMPLES_PER_PROMPT),
    Option("gvm_stage1", 8, "GVM-RAFT: first-stage samples per prompt, which estimate its "
           "acceptance rate and are not trained on (authors' stage_1_samples_per_prompt: 8).",
           "responses", ge=1, le=MAX_SAMPLES_PER_PROMPT),
    Option("gvm_alpha", 1e-3, "GVM-RAFT: alpha of the penalty in n_i ~ 1/sqrt(p_i + alpha / "
           "p_i^(beta - 1)) (authors' default 0.001).", ge=0, le=1_000),
    Option("gvm_beta", 2.0, "GVM-RAFT: beta of that penalty (authors' default 2).",
           ge=0, le=100),
    Option("gvm_min_samples", 0, "GVM-RAFT: fewest second-stage samples a prompt gets (0: as "
           "the authors', a prompt with no acceptance gets none).", "responses", ge=0,
           le=MAX_SAMPLES_PER_PROMPT),
    Option("gvm_max_samples", 32, "GVM-RAFT: most second-stage samples a prompt gets (the "
           "authors have no cap; 32: Est's N_max).", "responses", ge=1,
           le=MAX_SAMPLES_PER_PROMPT),
)


# --- the allocation ------------------------------------------------------------------------------

def gvm_weights(accept_rates: np.ndarray, alpha: float, beta: float,
                grad_norms: np.ndarray | float = 1.0) -> np.ndarray:
    """The paper's unnormalised sample sizes, G_i / sqrt(p_i + alpha / p_i^(beta - 1)), and 0
    where p_i = 0 or G_i = 0 (nothing accepted: nothing to estimate the gradient from)."""
    p = np.asarray(accept_rates, dtype=np.float64)
    g = np.broadcast_to(np.asarray(grad_norms, dtype=np.float64), p.shape)
    safe = np.where(p > 0, p, 1.0)
    w = g / np.sqrt(safe + alpha / safe ** (beta - 1.0))
    return np.where((p > 0) & (g > 0), w, 0.0)


def gvm_allocate(weights: np.ndarray, total: int, n_min: int, n_max: int
                 ) -> tuple[np.ndarray, float]:
    """Integer second-stage samples per prompt summing to ``total``: n_i ~ w_i clipped to
    [n_min, n_max] among the prompts of positive weight (``trainer.allocation.allocate``);
    the prompts of weight 0 get n_min, and whatever the others cannot take under n_max is
    spread evenly over them (earlier prompts first for the remainder). Needs B x n_min <=
    total <= B x n_max (the config's checks). Returns (n, c), c the scale of n_i = c x w_i
    before rounding (0 where no prompt has weight)."""
    w = np.asarray(weights, dtype=np.float64)
    counts = np.zeros(len(w), dtype=np.int64)
    if not len(w) * n_min <= total <= len(w) * n_max:
        raise ValueError(f"no allocation within [{n_min}, {n_max}] per prompt sums to {total} "
                         f"over {len(w)} prompts")
    live = w > 0
    to_live = min(total - n_min * int((~live).sum()), n_max * int(live.sum()))
    scale = 0.0
    if live.any():
        counts[live], scale = allocate(w[live], to_live, n_min, n_max)
    if (~live).any():
        counts[~live], _ = allocate(np.ones(int((~live).sum())), total - to_live, n_min, n_max)
    return counts, scale


def plan_second_stage(config: TrainConfig, positives: np.ndarray,
                      samples: np.ndarray) -> Allocation:
    """Stage 2's plan from stage 1's counts: p_i, the weights and n_i (``Allocation``)."""
    p = np.divide(positives, samples, out=np.zeros(len(samples)), where=np.asarray(samples) > 0)
    w = gvm_weights(p, config.gvm_alpha, config.gvm_beta)
    total = (config.gvm_budget - config.gvm_stage1) * len(p)
    counts, scale = gvm_allocate(w, total, config.gvm_min_samples, config.gvm_max_samples)
    return Allocation(p_hat=p, weights=w, counts=counts, scale=scale)


# --- the step ------------------------------------------------------------------------------------

def _stage(ctx: StepContext, prompts: Sequence[Prompt], counts: np.ndarray, stage: int
           ) -> tuple[SamplerResult | None, RoundsOutcome]:
    """One stage: ``counts[i]`` responses of prompt i in one round through the run's scheduler,
    every one kept (what is trained is decided once both stages are in, ``merge_stages``).
    Stage 1 draws with the step's GRPO seed; stage 2 with a stream of its own."""
    c = ctx.config
    record = dataclasses.replace(GVM_RAFT, sampling="allocation", draws=None)
    gen = seeds.derive_seed(c.seed, ctx.step, seeds.GENERATION) if stage == 1 else \
        seeds.derive_seed(c.seed, ctx.step, seeds.GENERATION, stage)
    sampler = AdaptiveSampler(
        len(prompts), algorithm=record, group_size=c.group_size, samples_per_round=1,
        max_rounds=1, positive_threshold=c.positive_threshold,
        std_normalize=c.use_std_normalization, seed=seeds.derive_seed(c.seed, ctx.step,
                                                                      seeds.DOWNSAMPLE),
        allocation=counts, eps=GVM_EPS, positive_metric=c.positive_metric)
    outcome = run_scheduler(c.scheduler, sampler, prompts, ctx.backend, ctx.scorer, seed=gen,
                            should_stop=ctx.should_stop,
                            on_round=None if ctx.on_round is None else
                            lambda st: ctx.on_round(dataclasses.replace(st, round=stage)),
                            early_rounds=c.early_rounds_mode,
                            speculative_capacity=c.speculative_capacity)
    if outcome.cancelled:
        return None, outcome
    return sampler.finalize(), outcome


def merge_stages(first: SamplerResult, out1: RoundsOutcome, second: SamplerResult | None,
                 out2: RoundsOutcome | None, drew: np.ndarray) -> tuple[SamplerResult,
                                                                        RoundsOutcome]:
    """Both stages as one step: prompt i's pool is its first-stage responses (round 1, not
    kept) then its second-stage ones (round 2, kept), ``drew`` the prompts of the batch that
    drew a second stage, in ``second``'s order. The advantages are the estimator's over the
    kept, i.e. each prompt's second-stage group (GRPO)."""
    P = first.num_prompts
    where = np.full(P, -1, dtype=np.int64)
    where[drew] = np.arange(len(drew))
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("prompt", "pool", "round", "reward",
                                                         "positive", "score")}
    generations, rewards, errors = [], [], []
    for i in range(P):
        parts = [(first, i, 1, out1)]
        if where[i] >= 0 and second is not None and out2 is not None:
            parts.append((second, int(where[i]), 2, out2))
        gens, rs, errs = [], [], []
        for res, j, rnd, out in parts:
            s = slice(int(res.offsets[j]), int(res.offsets[j + 1]))
            n = s.stop - s.start
            cols["prompt"].append(np.full(n, i, dtype=np.int64))
            cols["pool"].append(res.sample_pool_index[s] + len(gens))
            cols["round"].append(np.full(n, rnd, dtype=np.int64))
            cols["reward"].append(res.rewards[s])
            cols["positive"].append(res.positive[s])
            cols["score"].append(res.scores[s])
            gens += out.generations[j]
            rs += out.rewards[j]
            errs += out.errors[j]
        generations.append(gens)
        rewards.append(rs)
        errors.append(errs)

    def cat(k: str, dtype: Any) -> np.ndarray:
        return np.concatenate(cols[k]).astype(dtype) if cols[k] else np.zeros(0, dtype)

    rnd = cat("round", np.int64)
    drew_second = np.zeros(P, dtype=bool)
    drew_second[drew] = True
    pools = SamplerResult.of_pools(
        num_prompts=P, sample_prompt=cat("prompt", np.int64),
        sample_pool_index=cat("pool", np.int64), sample_round=rnd,
        sample_order=np.arange(len(rnd)), rewards=cat("reward", np.float64),
        positive=cat("positive", bool), rounds_used=np.where(drew_second, 2, 1),
        exit_round=np.where(drew_second, 2, 1), missing=[None] * P,
        first_round_positives=first.first_round_positives,
        first_round_samples=first.first_round_samples, estimator=first.estimator,
        scores=cat("score", np.float64))
    stats = [*out1.round_stats, *([] if out2 is None else
                                  [dataclasses.replace(st, round=2) for st in out2.round_stats])]
    outs = [o for o in (out1, out2) if o is not None]
    outcome = RoundsOutcome(
        generations=generations, rewards=rewards, errors=errors, round_stats=stats,
        time_generation=sum(o.time_generation for o in outs),
        time_scoring=sum(o.time_scoring for o in outs),
        tokens_discarded=sum(o.tokens_discarded for o in outs))
    return pools.with_kept(rnd == 2), outcome


def sample_gvm_step(ctx: StepContext) -> SampledStep:
    """Stage 1, the allocation from its acceptance rates, stage 2; the step's ``Allocation``
    carries p_i and n_i (recorded per prompt)."""
    c, batch = ctx.config, list(ctx.batch)
    first, out1 = _stage(ctx, batch, np.full(len(batch), c.gvm_stage1, dtype=np.int64), 1)
    if first is None:
        return SampledStep(None, out1, None, batch)
    plan = plan_second_stage(c, first.positives, first.samples)
    drew = np.flatnonzero(plan.counts > 0)
    second, out2 = None, None
    if len(drew):
        second, out2 = _stage(ctx, [batch[i] for i in drew], plan.counts[drew], 2)
        if second is None:
            return SampledStep(None, out2, None, batch)
    res, outcome = merge_stages(first, out1, second, out2, drew)
    return SampledStep(res, outcome, plan, batch)


# --- metrics, checks, record ---------------------------------------------------------------------

# The second stage's budget by the prompt's first-stage acceptance rate p: (metric, legend, test).
PASS_RATE_BINS = (
    ("gvm_share_none", "p = 0 (nothing accepted)", lambda p: p == 0),
    ("gvm_share_hard", "0 < p < 0.5", lambda p: (p > 0) & (p < 0.5)),
    ("gvm_share_easy", "0.5 <= p < 1", lambda p: (p >= 0.5) & (p < 1)),
    ("gvm_share_solved", "p = 1 (all accepted)", lambda p: p == 1),
)


def gvm_metrics(config: TrainConfig, res: SamplerResult,
                allocation: Allocation | None) -> dict[str, float]:
    if allocation is None:   # asynchronous training: one round of gvm_budget, no stages
        return {}
    p, n = allocation.p_hat, allocation.counts
    total = float(n.sum())
    out = {key: float(n[test(p)].sum()) / total if total else 0.0
           for key, _, test in PASS_RATE_BINS}
    out["gvm_stage1_pass_rate"] = float(p.mean()) if len(p) else 0.0
    out["gvm_max_alloc"] = float(n.max()) if len(n) else 0.0
    out["gvm_alloc_scale"] = float(allocation.scale)
    return out


def budget_fits(c: TrainConfig) -> Iterator[tuple[str, str]]:
    # Stage 2's average per prompt must lie in [gvm_min_samples, gvm_max_samples] (and be
    # >= 1: a step that trains on nothing would be no step).
    second = c.gvm_budget - c.gvm_stage1
    lo, hi = max(1, c.gvm_min_samples), c.gvm_max_samples
    if not lo <= second <= hi:
        yield "gvm_budget", (f"must leave gvm_budget - gvm_stage1 (the second stage's samples "
                             f"per prompt on average, {second}) within [max(1, "
                             f"gvm_min_samples), gvm_max_samples] = [{lo}, {hi}]")


def gvm_budget_keys(c: TrainConfig, budget: int) -> dict[str, Any]:
    """A matched budget is gvm_budget, both stages together. The first stage keeps its size
    while it leaves the second stage at least one sample per prompt, else it takes half the
    budget (the authors' 8 + 8 split); the cap on one prompt's second stage is raised to the
    second stage's mean where it was below it (``budget_fits``)."""
    if budget < 2:
        raise ConfigError("budget", f"GVM-RAFT at budget {budget}: its two stages need at "
                          "least 2 responses per prompt")
    stage1 = c.gvm_stage1 if budget - c.gvm_stage1 >= max(1, c.gvm_min_samples) \
        else budget // 2
    keys: dict[str, Any] = {"gvm_budget": budget, "gvm_stage1": stage1}
    if c.gvm_max_samples < budget - stage1:
        keys["gvm_max_samples"] = budget - stage1
    return keys


def gvm_sampler_options(c: TrainConfig) -> dict[str, Any]:
    return {"eps": GVM_EPS}


ALLOCATION_CHART = ChartSpec(
    "gvm_allocation", "GVM-RAFT: where the second stage's samples went, by first-stage pass rate",
    (Panel("share of the second stage's samples (0-1)",
           tuple((key, legend) for key, legend, _ in PASS_RATE_BINS)),),
    kind="stacked",
    caption="Each band is the share of the step's second-stage budget given to prompts whose "
            "first-stage pass rate fell in that range: the rule favours hard prompts with some "
            "acceptance (0 < p < 0.5) and gives prompts with none nothing (gvm_min_samples "
            "aside).")
PASS_RATE_CHART = ChartSpec(
    "gvm_stage1", "GVM-RAFT: the first stage's pass rate and the largest allocation",
    (Panel("pass rate (0-1)", (("gvm_stage1_pass_rate", "mean first-stage pass rate"),)),
     Panel("samples (samples)", (("gvm_max_alloc", "most second-stage samples to one "
                                                   "prompt"),),
           reference=lambda c: (f"cap gvm_max_samples = {c.gvm_max_samples}",
                                c.gvm_max_samples))),
    after="gvm_allocation",
    caption="As the policy improves the mean first-stage pass rate rises; the largest "
            "allocation reaching the cap means a few hard prompts took as much as allowed.")


GVM_RAFT = Algorithm(
    name="gvm-raft", label="GVM-RAFT",
    help="GVM-RAFT: gvm_stage1 samples per prompt estimate its acceptance rate p, then the "
         "rest of gvm_budget x B is allocated n ~ 1/sqrt(p + alpha/p^(beta-1)) and trained "
         "with GRPO's advantage",
    sampling="group", sample_step=sample_gvm_step, draws=lambda c: c.gvm_budget,
    downsample=False, advantage="group", std_normalize=True,
    sampler_options=gvm_sampler_options, options=OPTIONS,
    match_budget=gvm_budget_keys, budget_match="exact",
    budget_note="gvm_budget = budget: the first stage's gvm_stage1 and the second stage's "
                "allocation together draw B x budget (the first stage halved where it would "
                "leave the second nothing)",
    config_checks=(CrossCheck(("gvm_budget", "gvm_stage1", "gvm_min_samples",
                               "gvm_max_samples"), budget_fits, {"gvm_budget": 8}),),
    step_metrics={
        **{key: fraction(f"share of the step's second-stage samples given to prompts whose "
                         f"first-stage pass rate is {legend}", legend)
           for key, legend, _ in PASS_RATE_BINS},
        "gvm_stage1_pass_rate": fraction("mean over the step's prompts of the first-stage "
                                         "acceptance rate p", "stage-1 pass rate"),
        "gvm_max_alloc": count("most second-stage samples allocated to one prompt", "responses",
                               "largest allocation"),
        "gvm_alloc_scale": count("c of the second stage's n_i = clip(c * w(p_i), "
                                 "gvm_min_samples, gvm_max_samples) before rounding (0: no "
                                 "prompt accepted anything)", "samples per unit weight",
                                 "allocation scale c")},
    extra_metrics=gvm_metrics, charts=(ALLOCATION_CHART, PASS_RATE_CHART),
    max_samples_per_prompt=lambda c: max(c.gvm_stage1 + c.gvm_max_samples, c.gvm_budget),
    max_samples_per_step=lambda c: c.batch_size * c.gvm_budget,
    step_shape="batch_size x gvm_budget",
    summary_fields=("gvm_budget", "gvm_stage1"))
