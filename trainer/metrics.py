"""A training step's metrics and records, from its sampling (``SamplerResult`` and what the
scheduler drew) and the mask of responses the update takes.

``step_metrics`` is the sampling half of ``trainer.types.STEP_METRICS`` (the update half comes
from ``trainer.update``) plus the algorithm's own (``Algorithm.step_metrics``); ``step_records``
the per-prompt and per-sample rows a recorder writes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainer.advantages import zero_advantage_groups
from trainer.algorithms import get_algorithm
from trainer.allocation import Allocation
from trainer.config import TrainConfig
from trainer.result import SamplerResult
from trainer.types import (
    PASS_RATE_METRICS,
    PASS_RATE_THRESHOLDS,
    Prompt,
    PromptStepRecord,
    RoundsOutcome,
    SampleRecord,
)


def step_metrics(config: TrainConfig, res: SamplerResult, outcome: RoundsOutcome,
                 kept_mask: np.ndarray, allocation: Allocation | None = None) -> dict[str, float]:
    """The sampling half of STEP_METRICS (the update half comes from ``update_policy``), plus
    the algorithm's own (``Algorithm.step_metrics``; its values replace common ones of the same
    key)."""
    n = config.group_size
    P = res.num_prompts
    rewards = res.rewards
    tokens = np.array([len(g.response_token_ids) for gens in outcome.generations for g in gens],
                      dtype=np.float64)
    errors = sum(e is not None for errs in outcome.errors for e in errs)
    has_kept = np.bincount(res.sample_prompt, weights=res.kept, minlength=P) > 0
    zero = zero_advantage_groups(res.advantages, res.sample_prompt, res.kept, P)
    unresolved = res.exit_round == 0
    missing_pos = sum(m == "positives" for m in res.missing)
    missing_neg = sum(m == "negatives" for m in res.missing)
    first_pos, first_drawn = first_n_counts(res, n)
    # outcome.generations is prompt-major in pool order: the order of res's sample arrays.
    kept_tokens = tokens[kept_mask] if len(tokens) else tokens
    extra = get_algorithm(config.algorithm).extra_metrics(config, res, allocation)
    common = {
        "reward_all": _mean(rewards),
        "real_reward": real_reward(res, n),
        "kept_reward": _mean(rewards[kept_mask]),
        "samples": float(len(rewards)),
        "tokens": float(tokens.sum()),
        "zero_adv_frac": float(zero[has_kept].mean()) if has_kept.any() else 0.0,
        # Over each prompt's first n samples for every algorithm (GRPO's n, the first n of
        # Seq's M in round 1), so that the figures compare: over the whole first round Seq's M=8
        # would be all-correct / all-wrong less often than GRPO's n=4 by construction.
        "first_round_all_correct": float(np.mean((first_pos == first_drawn)
                                                 & (first_drawn > 0))) if P else 0.0,
        "first_round_all_wrong": float(np.mean(first_pos == 0)) if P else 0.0,
        "unresolved": float(unresolved.sum()),
        "unresolved_missing_pos": float(missing_pos),
        "unresolved_missing_neg": float(missing_neg),
        "response_length": _mean(tokens),
        "kept_response_length": _mean(kept_tokens),
        "tokens_discarded": float(outcome.tokens_discarded),
        "early_rounds_started": float(outcome.early_rounds_started),
        "early_rounds_discarded": float(outcome.early_rounds_discarded),
        "early_rounds_saved_s": float(outcome.early_rounds_saved_s),
        "verifier_errors": float(errors),
        "kept_samples": float(kept_mask.sum()),
        "dropped_groups": float(np.sum(has_kept & zero)) if config.passive_filtering else 0.0,
        "dropped_unresolved": float(np.sum(has_kept & unresolved)) if config.drop_unresolved
        else 0.0,
        **low_pass_rate_fractions(res, n),
    }
    return extra | common | {k: v for k, v in extra.items() if k in common}


def first_n_counts(res: SamplerResult, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt: positives among its first min(n, pool) samples, and that count of samples.

    The first n samples are i.i.d. draws of the current policy under every algorithm (GRPO
    draws n; Seq draws M >= n in round 1; DAPO n per group), so figures over them compare. Est
    may allocate a prompt fewer than n (N_min = 2): it then counts over all it drew, which makes
    an easy prompt with 2 samples all-correct more often than it would be over n; we keep those
    prompts rather than drop them so the fraction stays one of the whole batch."""
    P = res.num_prompts
    first = res.sample_pool_index < n
    positives = np.bincount(res.sample_prompt[first], weights=res.positive[first], minlength=P)
    drawn = np.bincount(res.sample_prompt[first], minlength=P)
    return positives.astype(np.int64), drawn


def low_pass_rate_fractions(res: SamplerResult, n: int) -> dict[str, float]:
    """``pass_rate_le_<t>``: the fraction of the batch whose pass rate is at most t, each
    prompt's pass rate taken over its first n samples (i.i.d. under every algorithm, as for the
    real reward: a Reinforce-Ada pool is larger and stops adaptively, GRPO's is n)."""
    P = res.num_prompts
    positives, drawn = first_n_counts(res, n)
    rate = positives / np.maximum(drawn, 1)
    return {key: float(np.mean(rate <= t)) if P else 0.0
            for key, t in zip(PASS_RATE_METRICS, PASS_RATE_THRESHOLDS, strict=True)}


def real_reward(res: SamplerResult, n: int) -> float:
    """Mean over prompts of the mean reward of each prompt's first min(n, pool) samples: i.i.d.
    draws from the current policy, every prompt weighing the same. With n samples of every
    prompt (GRPO, Seq) that is the plain mean of the first n; Est can give an easy prompt fewer
    than n, and a plain mean would then lean towards the prompts it sampled more, the hard ones."""
    first = res.sample_pool_index < n
    counts = np.bincount(res.sample_prompt[first], minlength=res.num_prompts)
    sums = np.bincount(res.sample_prompt[first], weights=res.rewards[first],
                       minlength=res.num_prompts)
    sampled = counts > 0
    return _mean(sums[sampled] / counts[sampled])


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else 0.0


def step_records(batch: Sequence[Prompt], res: SamplerResult, outcome: RoundsOutcome,
                 kept_mask: np.ndarray, allocation: Allocation | None = None,
                 versions: np.ndarray | None = None,
                 ) -> tuple[list[PromptStepRecord], list[SampleRecord]]:
    prompts: list[PromptStepRecord] = []
    samples: list[SampleRecord] = []
    for i, prompt in enumerate(batch):
        lo, hi = int(res.offsets[i]), int(res.offsets[i + 1])
        gens, errs = outcome.generations[i], outcome.errors[i]
        tok = kept_pos = kept_neg = 0
        for j, k in enumerate(range(lo, hi)):
            g = gens[j]
            kept = bool(kept_mask[k])
            tok += len(g.response_token_ids)
            if kept:
                if res.positive[k]:
                    kept_pos += 1
                else:
                    kept_neg += 1
            samples.append(SampleRecord(
                prompt_id=prompt.id, round=int(res.sample_round[k]), index=j, response=g.text,
                tokens=len(g.response_token_ids), reward=float(res.rewards[k]), kept=kept,
                advantage=float(res.advantages[k]) if kept else None,
                verifier_error=errs[j], weight=float(res.weights[k]),
                policy_version=None if versions is None else int(versions[k]),
                reward_components=g.reward_components))
        er = int(res.exit_round[i])
        prompts.append(PromptStepRecord(
            prompt_id=prompt.id, samples=int(res.samples[i]), positives=int(res.positives[i]),
            negatives=int(res.negatives[i]), rounds=int(res.rounds_used[i]),
            # Counted from the mask the update used, so passive filtering's drops show as 0.
            exit_round=er if er > 0 else None, kept_positives=kept_pos,
            kept_negatives=kept_neg, baseline=float(res.baseline[i]),
            missing=res.missing[i], tokens=tok,
            p_hat=None if allocation is None else float(allocation.p_hat[i]),
            allocated=None if allocation is None or allocation.counts is None
            else int(allocation.counts[i])))
    return prompts, samples
