"""DPPO, Dynamic Pruning Policy Optimization (Zhu, Ren, Li, Lin, Yang, Liu, Zhen, Liu, Zhang,
arXiv 2603.04135, "Unbiased Dynamic Pruning for Efficient Group-Based Policy Optimization"),
with GRPO as its policy update: prune prompts by their history and completions by their
advantage, and keep the gradient unbiased by weighting what survives by 1 / its keep
probability (importance sampling: a term kept with probability q and weighted 1/q has the
expectation of the term itself).

A step (synchronous training), hierarchically:

1. **prompt pruning**, before generation. Each prompt of the step's batch has a score from its
   history, s(x) = the mean |advantage| of its group the last time it was sampled (no history:
   no score). A prompt whose score is below the mean score of the batch's scored prompts is
   *prunable*, and is pruned with probability r_q (``dppo_prompt_prune_rate``); every other
   prompt is kept:

       p_q(x) = r_q  if s(x) < mean_batch(s)  else 0,      w_q(x) = 1 / (1 - p_q(x))

   The batch's best-scored prompt is never prunable, so a step never loses its whole batch.
2. the kept prompts draw n = ``group_size`` completions each, in one round (GRPO);
3. GRPO's advantage over the **whole** group, A_i = (r_i - mean) / (std + 1e-6), before any
   completion is pruned (the ``global`` estimator, std normalised: pruning a completion must not
   change its siblings' advantages, or the kept terms would no longer be the full group's);
4. **completion pruning**: a completion whose |A_i| is below its group's mean |A| is prunable
   and pruned with probability r_o (``dppo_completion_prune_rate``):

       p_o(i) = r_o  if |A_i| < mean_group(|A|)  else 0,   w_o(i) = 1 / (1 - p_o(i))

5. each kept completion's loss weight is w_q(x) * w_o(i) (``SamplerResult.weights``: every
   ``loss_agg_mode`` multiplies its terms by it; ``SampleRecord.weight`` records it). Pruned
   completions are recorded with ``kept`` false, pruned prompts are not drawn at all.

Then the history takes each sampled prompt's new score (persistent run state: ``PromptHistory``
under ``DPPO_STATE`` in every checkpoint). Pruning draws are seeded: the prompts' by the step's
own stream (``PROMPT_PRUNE``), the completions' by the step's down-sample stream.

Asynchronous training (max_policy_lag > 0) admits prompts one by one through ``select_batch``
into one-prompt samplers, and no seam carries a prompt's weight to its sampler: there DPPO
prunes completions only (still unbiased) and the history is kept for a later synchronous
resume. docs/paper-fidelity.md ("DPPO") says where each rule and default comes from and what
differs (the paper's exact formulas could not be read here; Dense Prompt Packing does not apply).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import seeds
from trainer.algorithms.base import Algorithm, SampledStep, StepContext
from trainer.algorithms.pruning import PRUNING_CHART, PRUNING_METRICS, pruning_metrics
from trainer.algorithms.sampling import sample_rounds
from trainer.charts import ChartSpec, Panel
from trainer.options import Option
from trainer.types import count

if TYPE_CHECKING:
    from trainer.allocation import Allocation
    from trainer.config import TrainConfig
    from trainer.result import SamplerResult
    from trainer.sampler import KeepRule
    from trainer.types import Prompt

# trainer_state.json key of the prompts' history (run state, like the weights).
DPPO_STATE = "dppo_prompt_history"
# The seed stream of a step's prompt-pruning draws (trainer.seeds' streams are 0..3, 7, 11..23
# and 2**32 - 1; this one is DPPO's alone).
PROMPT_PRUNE = 29
# |A| within this relative distance of the mean counts as equal to it: a group whose |A| are
# all equal (half right, half wrong) has nothing below its mean, whatever the rounding.
EQUAL_TOLERANCE = 1e-9
# The largest pruning rate: the paper's largest (r_q = r_o = 0.9, its variance study); a kept
# term's weight is then at most 10 for one level, 100 for both.
MAX_PRUNE_RATE = 0.9

OPTIONS = (
    Option("dppo_prompt_prune_rate", 0.5, "DPPO: r_q, the probability of pruning a prompt whose "
           "history (mean |advantage| of its group when last sampled) is below the batch's mean; "
           "a kept one weighs 1/(1 - r_q). 0.5: within the paper's range of bounded variance "
           "(r_q <= 0.7); not a value read from the paper.", ge=0, le=MAX_PRUNE_RATE),
    Option("dppo_completion_prune_rate", 0.5, "DPPO: r_o, the probability of pruning a "
           "completion whose |advantage| is below its group's mean |advantage|; a kept one "
           "weighs 1/(1 - r_o). 0.5: within the paper's range of bounded variance (r_o <= 0.7); "
           "not a value read from the paper.", ge=0, le=MAX_PRUNE_RATE),
)


# --- the rules, as pure functions ------------------------------------------------------------

def prompt_prune_probabilities(scores: np.ndarray, rate: float) -> np.ndarray:
    """p_q per prompt of a batch from its history score (NaN: never sampled, never pruned):
    ``rate`` where the score is below the mean of the batch's scored prompts, else 0."""
    s = np.asarray(scores, dtype=np.float64)
    seen = ~np.isnan(s)
    if not seen.any():
        return np.zeros(len(s))
    return np.where(seen & below_mean(np.where(seen, s, np.inf), float(s[seen].mean())),
                    float(rate), 0.0)


def completion_prune_probabilities(advantages: np.ndarray, groups: np.ndarray,
                                   num_groups: int, rate: float) -> np.ndarray:
    """p_o per completion: ``rate`` where its |A| is below its group's mean |A|, else 0."""
    a = np.abs(np.asarray(advantages, dtype=np.float64))
    g = np.asarray(groups, dtype=np.int64)
    size = np.bincount(g, minlength=num_groups)
    mean = np.divide(np.bincount(g, weights=a, minlength=num_groups), size,
                     out=np.zeros(num_groups), where=size > 0)
    return np.where(below_mean(a, mean[g]), float(rate), 0.0)


def below_mean(values: np.ndarray, mean: np.ndarray | float) -> np.ndarray:
    """Strictly below ``mean``, beyond rounding (``EQUAL_TOLERANCE``)."""
    return values < np.asarray(mean) - EQUAL_TOLERANCE * np.maximum(np.abs(mean), 1e-12)


def importance_weights(prune_probabilities: np.ndarray) -> np.ndarray:
    """1 / keep probability: a term kept with probability 1 - p and weighted so has the
    expectation of the unpruned term."""
    return 1.0 / (1.0 - np.asarray(prune_probabilities, dtype=np.float64))


def prune(prune_probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Which terms are kept: each independently, with probability 1 - p (one uniform draw
    each, in order, from ``rng``)."""
    p = np.asarray(prune_probabilities, dtype=np.float64)
    return rng.random(len(p)) >= p


def group_mean_abs_advantage(res: SamplerResult) -> np.ndarray:
    """Per prompt: the mean |A| of its whole group (the history's score)."""
    full = full_group_advantages(res)
    size = np.maximum(res.samples, 1)
    return np.bincount(res.sample_prompt, weights=np.abs(full), minlength=res.num_prompts) / size


def full_group_advantages(res: SamplerResult) -> np.ndarray:
    """GRPO's advantage of every completion over its whole group, kept or not."""
    everything = np.ones(len(res.rewards), dtype=bool)
    if res.estimator is None:
        raise ValueError("DPPO needs the step's advantage estimator")
    return res.estimator(res.final_rewards, res.sample_prompt, everything, res.num_prompts)


# --- the prompts' history: persistent run state ----------------------------------------------

class PromptHistory:
    """Per prompt id, its score when last sampled (the mean |A| of its group). Run state:
    saved in every checkpoint (``state_dict``), restored on resume."""

    def __init__(self) -> None:
        self.score: dict[str, float] = {}

    @classmethod
    def from_config(cls, config: Any) -> PromptHistory:
        return cls()

    def scores(self, prompt_ids: Sequence[str]) -> np.ndarray:
        """Each prompt's score; NaN for one never sampled."""
        return np.array([self.score.get(i, np.nan) for i in prompt_ids], dtype=np.float64)

    def update(self, prompt_ids: Sequence[str], scores: np.ndarray) -> None:
        for pid, s in zip(prompt_ids, np.asarray(scores, dtype=np.float64).tolist(),
                          strict=True):
            self.score[pid] = float(s)

    def state_dict(self) -> dict[str, Any]:
        ids = sorted(self.score)
        return {"ids": ids, "scores": [self.score[i] for i in ids]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ids, scores = state["ids"], state["scores"]
        if len(ids) != len(scores):
            raise ValueError("the checkpoint's DPPO prompt history has ids and scores of "
                             f"different lengths ({len(ids)}, {len(scores)})")
        self.score = {str(i): float(s) for i, s in zip(ids, scores, strict=True)}


# --- the seams --------------------------------------------------------------------------------

def completion_keep(rate: float) -> KeepRule:
    """DPPO's keep rule at r_o = ``rate`` (through ``sampler_options``: the keep seam has no
    config): completion pruning, returning (kept, each completion's importance weight w_o).
    ``seed`` is the step's down-sample stream (asynchronous: the prompt's own)."""

    def keep(pools: SamplerResult, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        p_o = completion_prune_probabilities(full_group_advantages(pools), pools.sample_prompt,
                                             pools.num_prompts, rate)
        kept = prune(p_o, np.random.default_rng(seed))
        return kept, importance_weights(p_o)

    return keep


def dppo_sampler_options(c: TrainConfig) -> dict[str, Any]:
    return {"keep": completion_keep(c.dppo_completion_prune_rate)}


def sample_dppo_step(ctx: StepContext) -> SampledStep:
    """A synchronous step: prompt pruning from the history, the kept prompts' one round with
    completion pruning (the keep rule), every kept completion's weight times its prompt's
    w_q, then the history takes the sampled prompts' scores. A cancelled step leaves the
    history as it was."""
    history: PromptHistory = ctx.state
    c = ctx.config
    p_q = prompt_prune_probabilities(history.scores([p.id for p in ctx.batch]),
                                     c.dppo_prompt_prune_rate)
    kept_q = prune(p_q, np.random.default_rng(seeds.derive_seed(c.seed, ctx.step,
                                                                PROMPT_PRUNE)))
    survivors = [p for p, k in zip(ctx.batch, kept_q.tolist(), strict=True) if k]
    indices = None if ctx.batch_indices is None else \
        [i for i, k in zip(ctx.batch_indices, kept_q.tolist(), strict=True) if k]
    res, outcome = sample_rounds(
        ctx, survivors, downsample_seed=seeds.derive_seed(c.seed, ctx.step, seeds.DOWNSAMPLE),
        generation_seed=seeds.derive_seed(c.seed, ctx.step, seeds.GENERATION))
    if res is not None:
        w_q = importance_weights(p_q[kept_q])
        res = res.with_kept(res.kept, weights=res.weights * w_q[res.sample_prompt],
                            advantages=res.advantages)
        history.update([p.id for p in survivors], group_mean_abs_advantage(res))
    return SampledStep(res, outcome, None, survivors, prompt_indices=indices)


def dppo_trained(config: TrainConfig, history: PromptHistory, prompts: Sequence[Prompt],
                 result: SamplerResult) -> None:
    """Asynchronous DPPO: the history takes an update's prompts' scores when it trains them."""
    history.update([p.id for p in prompts], group_mean_abs_advantage(result))


def dppo_metrics(config: TrainConfig, res: SamplerResult,
                 allocation: Allocation | None) -> dict[str, float]:
    # The prompts of the step's batch that were not drawn: the batch less those sampled
    # (asynchronous DPPO, which prunes no prompts, trains a batch's worth).
    return {"prompts_pruned": float(max(config.batch_size - res.num_prompts, 0)),
            **pruning_metrics(res)}


PROMPT_CHART = ChartSpec(
    name="dppo_prompts", title="DPPO: prompts pruned before generation",
    panels=(Panel("prompts (prompts)", (("prompts_pruned", "pruned by their history"),)),),
    after="pruning",
    caption="Prompts of each step's batch that were not generated for, because their group's "
            "mean |advantage| when last sampled was below the batch's mean. Look for none in "
            "the first epoch (no history yet) and about r_q of the low-scored prompts after.")


DPPO = Algorithm(
    name="dppo", label="DPPO",
    help="DPPO: prompts pruned by their history, completions by their |advantage|, the kept "
         "ones weighted by 1 / keep probability (unbiased); GRPO's advantage over the full "
         "group",
    sampling="group", sample_step=sample_dppo_step,
    advantage="global", std_normalize=True,
    sampler_options=dppo_sampler_options, options=OPTIONS,
    match_budget=lambda c, budget: {"group_size": budget}, budget_match="cap",
    budget_note="group_size = budget: each prompt that is not pruned draws budget "
                "responses, so a step draws at most B x budget (fewer as prompts are pruned "
                "by their history)",
    step_metrics={
        "prompts_pruned": count("prompts of the step's batch pruned by their history before "
                                "generation", "prompts", "prompts pruned"),
        **PRUNING_METRICS},
    extra_metrics=dppo_metrics, charts=(PRUNING_CHART, PROMPT_CHART),
    make_state=PromptHistory.from_config, state_key=DPPO_STATE,
    async_trained=dppo_trained,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: c.batch_size * c.group_size,
    step_shape="batch_size x group_size",
    summary_fields=("group_size", "dppo_prompt_prune_rate", "dppo_completion_prune_rate"))
