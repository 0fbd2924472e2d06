"""PODS, Policy Optimization with Down-Sampling (Xu, Savani, Fang, Kolter, arXiv 2504.13818,
"Not All Rollouts are Useful: Down-Sampling Rollouts in LLM Reinforcement Learning"), with
GRPO as its policy update (the paper's GRPO-PODS):

1. each prompt generates n rollouts in one round (``pods_rollouts``, the paper's n);
2. the update trains on m = ``group_size`` of them (the paper's m), the subset chosen by
   max-variance down-sampling:

       S* = argmax_{S subset of the pool, |S| = m}  Var({r_i : i in S})

   which, with the rewards sorted r_(1) >= ... >= r_(n), is the k highest and the m - k lowest
   for the best k in 0..m (the paper's O(n log n) solution, which the authors' code applies to
   real-valued rewards; for pass/fail rewards it keeps as close to m/2 right and m/2 wrong as
   the pool allows), found by scoring those m + 1 candidates after one sort
   (``max_variance_subset``; tests/trainer/test_pods.py checks it against every subset);
3. GRPO's advantage over the kept subset, A_i = (r_i - mean(S*)) / (std(S*) + 1e-4), std
   unbiased (the authors' ``maxvargrpo_trainer.py``; std normalisation off: their
   ``scale_rewards=False``).

Responses that are not chosen are recorded with ``kept`` false, like any down-sample's.
Among equal rewards which responses are kept is a seeded uniform choice (the step's down-sample
stream); among subsets of equal variance the authors' order decides (top m, then k = 0, 1...).
No exit rule (one round, as GRPO: every scheduler, and asynchronous training keeps each
prompt's subset the same way), no persistent state. Its run-page chart is the one shared with
DPPO (``trainer.algorithms.pruning``): the completions kept and pruned each step, and their loss
weights (all 1 here); its two step metrics of its own, the mean reward std of the drawn and of
the kept, go to the run page's chart of an algorithm's metrics. docs/paper-fidelity.md
("PODS") says where each default comes from and what differs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.algorithms.base import Algorithm
from trainer.algorithms.pruning import PRUNING_CHART, PRUNING_METRICS, pruning_metrics
from trainer.algorithms.sampling import sample_batch
from trainer.config import MAX_SAMPLES_PER_PROMPT
from trainer.options import Option
from trainer.types import count
from trainer.validation import ConfigError, CrossCheck

if TYPE_CHECKING:
    from trainer.allocation import Allocation
    from trainer.config import TrainConfig
    from trainer.result import SamplerResult

# The authors' epsilon in (r - mean) / (std + eps): YixuanEvenXu/pods,
# trainer/maxvargrpo_trainer.py (_prepare_inputs) and open-r1/src/open_r1/grpo_trainer.py
# (_generate_and_score_completions), both 1e-4.
PODS_EPS = 1e-4
# Relative tolerance under which two candidate subsets' variances count as equal: the same
# multiset of rewards taken in another order can differ in its last bits, and the choice
# between equals must not hang on rounding.
TIE_TOLERANCE = 1e-12

OPTIONS = (
    Option("pods_rollouts", 16, "PODS: n, the rollouts each prompt generates, of which the "
           "update trains on group_size (the paper's m) chosen by max-variance down-sampling "
           "(default 16 = 4 x the default group_size 4: every main setting of the paper has "
           "n = 4m, GSM8K n=64 m=16, MATH n=32 m=8, 8 GPUs n=128 m=32).", "responses",
           ge=2, le=MAX_SAMPLES_PER_PROMPT),
)


def max_variance_subset(rewards: np.ndarray, m: int,
                        rng: np.random.Generator | None = None) -> np.ndarray:
    """The indices of the m rewards of largest variance (all of them when there are no more
    than m): the k highest and the m - k lowest, for the k in 0..m of largest variance.

    Why only those m + 1 candidates: some subset of largest variance is always of that form,
    for real-valued rewards too (the paper's sort-based solution; the authors' code scores the
    same m + 1 candidates of summed, real-valued rewards). Candidates are tried in the
    authors' order (k = m, then 0, 1, ..., m - 1; ``maxvargrpo_trainer.py``) and the first of
    the largest variance wins. ``rng`` shuffles before the (stable) sort, so that among equal
    rewards the responses kept are a uniform choice; without it, the first ones."""
    r = np.asarray(rewards, dtype=np.float64)
    n = len(r)
    if n <= m:
        return np.arange(n)
    shuffled = np.arange(n) if rng is None else rng.permutation(n)
    order = shuffled[np.argsort(-r[shuffled], kind="stable")]   # highest first
    ks = np.array([m, *range(m)])
    # Row i: the top ks[i] and the bottom m - ks[i] of the sorted pool (disjoint: m <= n).
    cols = np.arange(m)
    picks = np.where(cols < ks[:, None], cols, n - m + cols)
    variances = r[order[picks]].var(axis=1)
    best = int(np.argmax(variances >= variances.max() * (1 - TIE_TOLERANCE) - TIE_TOLERANCE))
    return np.sort(order[picks[best]])


def max_variance_keep(pools: SamplerResult, m: int, seed: int) -> np.ndarray:
    """PODS' keep rule (``Algorithm.keep``): each prompt's pool down-sampled to its m rewards
    of largest variance (``max_variance_subset``); ``seed`` is the step's down-sample stream."""
    rng = np.random.default_rng(seed)
    kept = np.zeros(len(pools.rewards), dtype=bool)
    for i in range(pools.num_prompts):
        lo, hi = int(pools.offsets[i]), int(pools.offsets[i + 1])
        kept[lo + max_variance_subset(pools.rewards[lo:hi], m, rng)] = True
    return kept


def reward_spread(res: SamplerResult, among: np.ndarray) -> float:
    """The mean over prompts with any of ``among`` of the (population) std of their rewards
    among them."""
    p, P = res.sample_prompt, res.num_prompts
    w = among.astype(np.float64)
    size = np.bincount(p, weights=w, minlength=P)
    mean = np.divide(np.bincount(p, weights=res.rewards * w, minlength=P), size,
                     out=np.zeros(P), where=size > 0)
    sq = np.bincount(p, weights=(res.rewards - mean[p]) ** 2 * w, minlength=P)
    std = np.sqrt(np.divide(sq, size, out=np.zeros(P), where=size > 0))
    return float(std[size > 0].mean()) if np.any(size > 0) else 0.0


def pods_metrics(config: TrainConfig, res: SamplerResult,
                 allocation: Allocation | None) -> dict[str, float]:
    # What the down-sample bought: the kept subset's reward spread against the pool's (the
    # rule maximises the former; all-equal pools have 0 in both).
    return {"drawn_reward_std": reward_spread(res, np.ones(len(res.rewards), dtype=bool)),
            "kept_reward_std": reward_spread(res, res.kept), **pruning_metrics(res)}


def rollouts_at_least_m(c: TrainConfig) -> Iterator[tuple[str, str]]:
    # The update's m = group_size responses are a subset of the n generated.
    if c.pods_rollouts < c.group_size:
        yield "pods_rollouts", (f"must be >= group_size ({c.group_size}, the paper's m: the "
                                f"rollouts the update keeps), got {c.pods_rollouts}")


def pods_budget(c: TrainConfig, budget: int) -> dict[str, Any]:
    """A matched budget is the rollouts each prompt generates (the paper's n); the update still
    keeps group_size (m) of them, so the budget must cover m."""
    if budget < c.group_size:
        raise ConfigError("budget", f"PODS at budget {budget}: the update keeps group_size "
                          f"({c.group_size}, the paper's m) of the budget's rollouts, so the "
                          f"budget must be >= {c.group_size}")
    return {"pods_rollouts": budget}


def pods_sampler_options(c: TrainConfig) -> dict[str, Any]:
    return {"eps": PODS_EPS}


PODS = Algorithm(
    name="pods", label="PODS",
    help="PODS: one round of pods_rollouts (n) per prompt, the update trains on the "
         "group_size (m) of largest reward variance, GRPO's advantage over them",
    sampling="group", sample_step=sample_batch, draws=lambda c: c.pods_rollouts,
    keep=max_variance_keep, advantage="group", std_normalize=True,
    sampler_options=pods_sampler_options, options=OPTIONS,
    config_checks=(CrossCheck(("pods_rollouts", "group_size"), rollouts_at_least_m,
                              {"pods_rollouts": 2}),),
    step_metrics={
        "drawn_reward_std": count("mean over the step's prompts of the std of the rewards of "
                                  "the n rollouts drawn", "reward", "drawn reward std"),
        "kept_reward_std": count("mean over the step's prompts of the std of the rewards of "
                                 "the m rollouts kept (the largest any m of them have)",
                                 "reward", "kept reward std"),
        **PRUNING_METRICS},
    extra_metrics=pods_metrics, charts=(PRUNING_CHART,),
    max_samples_per_prompt=lambda c: c.pods_rollouts,
    max_samples_per_step=lambda c: c.batch_size * c.pods_rollouts,
    step_shape="batch_size x pods_rollouts",
    match_budget=pods_budget, budget_match="exact",
    budget_note="pods_rollouts = budget (the paper's n), of which the update keeps group_size "
                "(m) by max-variance down-sampling",
    summary_fields=("group_size", "pods_rollouts"))
