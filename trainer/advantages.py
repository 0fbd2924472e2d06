"""Advantage estimators over a step's flat sample arrays, and passive filtering.

Every estimator takes the rewards of all samples drawn this step (the prompts' whole pools), the
group (prompt) each sample belongs to and which samples were kept for the update, and returns one
advantage per sample (0 for samples that were not kept). Everything is vectorised with
``np.bincount`` so that a 512 x 32 step costs well under a millisecond.

Standard deviations are the unbiased (ddof=1) estimate, as verl's ``compute_grpo_outcome_advantage``
uses (``torch.std``); a group of one has std 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

EPS = 1e-6

AdvantageEstimator = Callable[..., np.ndarray]


def _group_mean_std(values: np.ndarray, groups: np.ndarray, num_groups: int,
                    weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group mean, unbiased std and count of ``values`` (only where ``weights`` is 1)."""
    w = np.ones_like(values) if weights is None else weights.astype(np.float64)
    count = np.bincount(groups, weights=w, minlength=num_groups)
    total = np.bincount(groups, weights=values * w, minlength=num_groups)
    mean = np.divide(total, count, out=np.zeros(num_groups), where=count > 0)
    sq = np.bincount(groups, weights=(values - mean[groups]) ** 2 * w, minlength=num_groups)
    std = np.sqrt(np.divide(sq, count - 1, out=np.zeros(num_groups), where=count > 1))
    return mean, std, count


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    # An all-equal group has numerator 0 and, with eps=0, denominator 0: its advantage is 0.
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def global_baseline_advantages(rewards: np.ndarray, groups: np.ndarray, kept: np.ndarray,
                               num_groups: int, *, std_normalize: bool = False,
                               eps: float = EPS) -> np.ndarray:
    """Reinforce-Ada's "global statistics": the baseline is the mean of the prompt's whole pool.

        A_i = (r_i - mean(pool)) / (std(pool) + eps)   with std normalisation
        A_i =  r_i - mean(pool)                        without (the Reinforce-Ada default)

    The pool is every response drawn for the prompt this step, not just the kept group: the kept
    group is a biased (balanced) down-sample, the pool is an i.i.d. estimate of the prompt's value.
    """
    mean, std, _ = _group_mean_std(rewards, groups, num_groups)
    adv = rewards - mean[groups]
    if std_normalize:
        adv = _safe_div(adv, std[groups] + eps)
    return np.where(kept, adv, 0.0)


def group_advantages(rewards: np.ndarray, groups: np.ndarray, kept: np.ndarray, num_groups: int,
                     *, std_normalize: bool = True, eps: float = EPS) -> np.ndarray:
    """GRPO: statistics of the kept group itself.

        A_i = (r_i - mean(group)) / (std(group) + eps)   (GRPO)
        A_i =  r_i - mean(group)                         (Dr.GRPO: std normalisation off)
    """
    mean, std, _ = _group_mean_std(rewards, groups, num_groups, weights=kept)
    adv = rewards - mean[groups]
    if std_normalize:
        adv = _safe_div(adv, std[groups] + eps)
    return np.where(kept, adv, 0.0)


def hybrid_advantages(rewards: np.ndarray, groups: np.ndarray, kept: np.ndarray,
                      num_groups: int, *, std_normalize: bool = False,
                      eps: float = EPS) -> np.ndarray:
    """Reinforce-Ada-Est (v3): the global baseline times the hybrid's residual weight.

        A_i = (r_i - rbar_x) / sqrt(rbar_x + eps)

    rbar_x is the mean reward of the prompt's pool this step (Est keeps the whole pool). The log
    objective weighs a prompt by 1/p; Est realises 1/sqrt(p) of it through the samples it
    allocates (``trainer.allocation``) and the other 1/sqrt(p) here, with the step's own pass
    rate in place of p. A prompt whose samples all agree has A = 0 whatever the weight. With
    std normalisation the centred reward is divided by (std + 1e-6) before the weight.
    """
    mean, std, _ = _group_mean_std(rewards, groups, num_groups)
    adv = rewards - mean[groups]
    if std_normalize:
        adv = _safe_div(adv, std[groups] + EPS)
    # Rewards are pass/fail in [0, 1]; the clamp only keeps a custom reward below 0 from a NaN.
    # An all-wrong group with eps = 0 is 0 / 0: its advantage is 0.
    adv = _safe_div(adv, np.sqrt(np.maximum(mean[groups], 0.0) + eps))
    return np.where(kept, adv, 0.0)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "global": global_baseline_advantages,
    "group": group_advantages,
    "hybrid": hybrid_advantages,
}
# Each algorithm names its estimator in its record (``trainer.algorithms``, ``advantage``).


def signal_values(rewards: np.ndarray, scores: np.ndarray, metric: str,
                  threshold: float, final_rewards: np.ndarray | None = None) -> np.ndarray:
    """Each response's value of ``metric`` (verl's ``filter_groups.metric``; the choices are
    ``trainer.config.SIGNAL_METRICS``), from its reward (every shaping applied), the
    verifier's own score and the reward the advantages use (``final_rewards``: the reward less
    ``use_kl_in_reward``'s penalty, ``SamplerResult.final_rewards``; without it, the reward):

        acc               1 where score > threshold, else 0 (the DAPO recipe's accuracy)
        score             the verifier's score
        seq_reward        the reward (overlong shaping included)
        seq_final_reward  the reward the advantages use (with the KL in the reward, less its
                          penalty, as verl's token_level_rewards summed)
    """
    if metric == "acc":
        return (np.asarray(scores, dtype=np.float64) > threshold).astype(np.float64)
    if metric == "score":
        return np.asarray(scores, dtype=np.float64)
    if metric == "seq_final_reward" and final_rewards is not None:
        return np.asarray(final_rewards, dtype=np.float64)
    if metric in ("seq_reward", "seq_final_reward"):
        return np.asarray(rewards, dtype=np.float64)
    raise ValueError(f"unknown signal metric {metric!r}: one of acc, score, seq_reward, "
                     f"seq_final_reward")


def positives_by(rewards: np.ndarray, scores: np.ndarray, metric: str,
                 threshold: float) -> np.ndarray:
    """Which responses are positive under ``positive_metric``: the verifier's score exceeds
    ``threshold`` (acc, score) or the shaped reward does (seq_reward, seq_final_reward)."""
    values = scores if metric in ("acc", "score") else \
        signal_values(rewards, scores, metric, threshold)
    return np.asarray(values, dtype=np.float64) > threshold


def signal_groups(res: Any, values: np.ndarray | None = None) -> np.ndarray:
    """Per prompt of a ``SamplerResult``: whether its ``values`` (one per sample; default its
    rewards) are not all equal (DAPO's filter keeps a group whose metric's std is > 0; with
    pass/fail rewards that is "at least one right and one wrong")."""
    v = res.rewards if values is None else values
    lo = np.full(res.num_prompts, np.inf)
    hi = np.full(res.num_prompts, -np.inf)
    np.minimum.at(lo, res.sample_prompt, v)
    np.maximum.at(hi, res.sample_prompt, v)
    return hi > lo


def zero_advantage_groups(advantages: np.ndarray, groups: np.ndarray, kept: np.ndarray,
                          num_groups: int, tol: float = 1e-12) -> np.ndarray:
    """Boolean per group: True where every kept response has |A| <= tol (no gradient signal).

    Groups with nothing kept count as zero-advantage too."""
    nonzero = kept & (np.abs(advantages) > tol)
    return np.bincount(groups, weights=nonzero.astype(np.float64), minlength=num_groups) == 0


def passive_filter(advantages: np.ndarray, groups: np.ndarray, kept: np.ndarray,
                   num_groups: int) -> np.ndarray:
    """Passive filtering: the kept mask with all-zero-advantage groups dropped.

    Such groups add no policy gradient, but they do count in the token-mean's denominator and so
    shrink every other group's step; dropping them is the DAPO-style "dynamic sampling" filter
    applied after the fact."""
    zero = zero_advantage_groups(advantages, groups, kept, num_groups)
    return kept & ~zero[groups]


def drop_unresolved(kept: np.ndarray, groups: np.ndarray, resolved: np.ndarray) -> np.ndarray:
    """The kept mask without the prompts still unresolved after the last round (the paper's
    text: such prompts "revert to passive filtering", i.e. leave the update). Unlike
    ``passive_filter`` this also drops unresolved groups whose advantages are not zero: with
    the global baseline an unresolved ada-balance prompt with 1 negative among 32 still gives
    its kept group non-zero advantages. The authors' code keeps them (down-sampled)."""
    return kept & np.asarray(resolved, dtype=bool)[groups]
