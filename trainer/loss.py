"""Policy-gradient loss terms as small pure tensor functions (in the manner of verl's core_algos).

All per-token tensors are ``[batch, max_response_len]`` with a 0/1 ``mask`` of valid tokens.
The default aggregation is the token-mean over every valid token of the (mini-)batch (DAPO /
Reinforce-Ada):

    token_mean(x) = sum_{i,t} x_{i,t} m_{i,t} / sum_{i,t} m_{i,t}

so long responses weigh in proportion to their length and a batch with no valid token gives 0.
``denominator`` lets a caller that splits a mini-batch into micro-batches divide by the whole
mini-batch's token count, so gradient accumulation gives the same gradient as one big batch.
``agg_loss`` offers verl's other ``loss_agg_mode`` choices, each over the whole mini-batch
(``Aggregation``) whatever its micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config import KL_ESTIMATORS, KL_TYPES, LOSS_AGG_MODES


def token_mean(x: torch.Tensor, mask: torch.Tensor, denominator: float | None = None
               ) -> torch.Tensor:
    """sum(x * mask) / sum(mask) (or / ``denominator``); 0 when there is no valid token."""
    total = (x * mask).sum()
    den = mask.sum() if denominator is None else torch.as_tensor(denominator, dtype=x.dtype)
    return total / torch.clamp(den, min=1.0)


@dataclass(frozen=True)
class Aggregation:
    """How a mini-batch's per-token losses become one number (``agg_loss``): the mode and the
    whole mini-batch's figures, so that every micro-batch divides by the same ones and
    gradient accumulation equals one pass over the mini-batch. ``num_tokens`` / ``num_sequences``
    default to those of the tensor at hand; ``norm_length`` is seq-mean-token-sum-norm's
    constant L (the run's max_new_tokens)."""

    mode: str = "token-mean"
    num_tokens: float | None = None
    num_sequences: float | None = None
    norm_length: float = 1.0


def agg_loss(x: torch.Tensor, mask: torch.Tensor, agg: Aggregation) -> torch.Tensor:
    """verl's ``loss_agg_mode`` choices over a mini-batch of N responses o_1..o_N holding T valid
    tokens in all (``agg.num_sequences``, ``agg.num_tokens``), with m the mask:

        token-mean               sum_{i,t} x m / T             every token weighs the same
        seq-mean-token-sum       sum_{i,t} x m / N             a response weighs its length
        seq-mean-token-mean      sum_i (sum_t x m / |o_i|) / N  every response weighs the same
        seq-mean-token-sum-norm  sum_{i,t} x m / (N L)         Dr.GRPO: L a constant
                                                                (``agg.norm_length``)

    With micro-batches, N and T are the mini-batch's, so summing the micro-batches' values
    gives the mini-batch's (verl's legacy actor divides each micro-batch by its own figures and
    weighs it by its share of the responses, its engine workers by the mini-batch's figures; how
    each mode then compares: docs/paper-fidelity.md, "Loss aggregation"). Rows of ``x`` that are
    all padding (a rank with no work) add 0."""
    if agg.mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {', '.join(LOSS_AGG_MODES)}, "
                         f"got {agg.mode!r}")
    if agg.mode == "token-mean":
        return token_mean(x, mask, agg.num_tokens)
    n = float(mask.shape[0]) if agg.num_sequences is None else float(agg.num_sequences)
    per_seq = (x * mask).sum(-1)
    if agg.mode == "seq-mean-token-mean":
        per_seq = per_seq / torch.clamp(mask.sum(-1), min=1.0)
    total = per_seq.sum() / max(n, 1.0)
    if agg.mode == "seq-mean-token-sum-norm":
        total = total / float(agg.norm_length)
    return total


def agg_rows(x: torch.Tensor, mask: torch.Tensor, agg: Aggregation) -> torch.Tensor:
    """Each row's (response's) term of ``agg_loss(x, mask, agg)``: the terms sum to it (up to
    rounding), so a prompt's part of a mini-batch's loss is the sum of its responses' rows.
    Every mode is a sum over rows with the mini-batch's denominators, so the split is exact:

        token-mean               sum_t x m / T
        seq-mean-token-sum       sum_t x m / N
        seq-mean-token-mean      (sum_t x m / |o_i|) / N
        seq-mean-token-sum-norm  sum_t x m / (N L)
    """
    if agg.mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {', '.join(LOSS_AGG_MODES)}, "
                         f"got {agg.mode!r}")
    per_seq = (x * mask).sum(-1)
    if agg.mode == "token-mean":
        den = mask.sum() if agg.num_tokens is None else torch.as_tensor(agg.num_tokens,
                                                                         dtype=x.dtype)
        return per_seq / torch.clamp(den, min=1.0)
    n = float(mask.shape[0]) if agg.num_sequences is None else float(agg.num_sequences)
    if agg.mode == "seq-mean-token-mean":
        per_seq = per_seq / torch.clamp(mask.sum(-1), min=1.0)
    per_seq = per_seq / max(n, 1.0)
    if agg.mode == "seq-mean-token-sum-norm":
        per_seq = per_seq / float(agg.norm_length)
    return per_seq


# Bound of the log-ratio before ``exp`` (verl's compute_policy_loss_vanilla clamps the same way):
# exp(20) ~ 4.9e8 is finite in float32, exp(100) overflows to inf and inf * 0 gives NaN.
LOG_RATIO_BOUND = 20.0


def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28,
                  denominator: float | None = None, token_weights: torch.Tensor | None = None,
                  clip_ratio_c: float = 3.0, agg: Aggregation | None = None,
                  per_token: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dual-clip PPO with clip-higher (DAPO), token-mean aggregated, as verl's vanilla policy
    loss (the one the authors' Reinforce-Ada scripts use):

        rho_t  = exp(clamp(logp_t - logp_old_t, -20, 20))
        L_t    = max(-A * rho_t, -A * clip(rho_t, 1 - eps_low, 1 + eps_high))
        L_t    = min(L_t, -A * c)                        where A < 0 (dual-clip, c = clip_ratio_c)
        loss   = token_mean(L)                           (or agg_loss(L, agg))

    Without the dual clip a token with A < 0 whose ratio has grown large (the policy now likes a
    response that was bad) contributes -A * rho without bound: rho = 20, A = -1 gives 20 instead
    of c = 10. The cap also cuts that token's gradient (Ye et al., 2020, "Mastering complex
    control in MOBA games with deep RL").

    ``advantages`` is per sequence ``[batch]`` (broadcast over tokens) or per token.
    ``token_weights`` (no gradient), where given, multiply each token's ``L_t`` before the mean:
    the truncated importance weights of ``truncated_is_weights``, times each response's loss
    weight (the algorithm's). ``per_token``: the metrics also hold the weighted ``L_t``
    (``"per_token"``, with its gradient), for the per-prompt statistics (``agg_rows``).
    The clip fractions count tokens where a clipped branch is the one taken, i.e. whose
    gradient is cut: ``clip_frac_high`` where A > 0 and rho > 1 + eps_high, ``clip_frac_low``
    where A < 0 and rho < 1 - eps_low, ``dual_clip_frac`` where A < 0 and -A * rho > -A * c,
    i.e. rho > c (token-means too).
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == logprobs.dim() - 1 else advantages
    log_ratio = (logprobs - old_logprobs) * mask  # masked first: padding may hold junk
    ratio = torch.exp(torch.clamp(log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pessimistic = torch.maximum(unclipped, clipped)
    dual = -adv * clip_ratio_c
    terms = torch.where(adv < 0, torch.minimum(pessimistic, dual), pessimistic)
    if token_weights is not None:
        terms = terms * token_weights.detach()
    loss = token_mean(terms, mask, denominator) if agg is None else agg_loss(terms, mask, agg)
    with torch.no_grad():
        high = ((adv > 0) & (ratio > 1.0 + eps_high)).to(logprobs.dtype)
        low = ((adv < 0) & (ratio < 1.0 - eps_low)).to(logprobs.dtype)
        dual_hit = ((adv < 0) & (ratio > clip_ratio_c)).to(logprobs.dtype)
        metrics = {"clip_frac_high": token_mean(high, mask, denominator),
                   "clip_frac_low": token_mean(low, mask, denominator),
                   "dual_clip_frac": token_mean(dual_hit, mask, denominator),
                   "ratio_mean": token_mean(ratio, mask, denominator)}
    if per_token:
        metrics["per_token"] = terms
    return loss, metrics


def truncated_is_weights(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """Truncated importance sampling for a sampler that is not exactly the policy (vLLM's
    kernels, bf16): the rollout drew tokens from pi_rollout, the update's old policy is
    pi_old, so each token's loss is re-weighted by their ratio, truncated at ``cap`` (C) to
    bound the variance (Yao et al., 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"):

        w_t = min(exp(logp_old_t - logp_rollout_t), C)

    The log-ratio is clamped to [-20, 20] before ``exp`` so a degenerate token cannot
    overflow. No gradient flows through the weights.
    """
    log_ratio = torch.clamp(old_logprobs - rollout_logprobs, -20.0, 20.0)
    return torch.clamp(torch.exp(log_ratio), max=cap).detach()


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, coef: float,
                  denominator: float | None = None, agg: Aggregation | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss term ``-coef * token_mean(H)`` (maximising entropy; ``agg_loss(H, agg)`` where
    given, as verl aggregates its entropy loss), and the token-mean entropy."""
    h = token_mean(entropy, mask, denominator)
    term = h if agg is None else agg_loss(entropy, mask, agg)
    return -coef * term, h


# verl's kl_penalty clamps the per-token estimate to [-10, 10] (low_var_kl): one token whose
# reference finds it e^20 times likelier would otherwise add ~4.9e8 to the loss.
KL_BOUND = 10.0


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) by Schulman's k3 estimator (non-negative, unbiased, low variance),
    as verl's ``low_var_kl``:

        d  = clamp(logp_ref - logp, -20, 20)
        k3 = clamp(exp(d) - d - 1, -10, 10)

    The log-ratio clamp keeps exp finite; the final clamp bounds one token's contribution (and
    cuts its gradient past 10). k3 >= 0, so only the upper bound ever acts.
    """
    d = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0)
    return torch.clamp(torch.exp(d) - d - 1.0, -KL_BOUND, KL_BOUND)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the log-probs of the sampled tokens, by
    verl's ``kl_penalty`` names (``verl/trainer/ppo/core_algos.py``: ``kl_penalty``,
    ``kl_penalty_forward``; Schulman, "Approximating KL divergence"), with r = logp - logp_ref:

        k1, kl            r                          unbiased, any sign
        abs               |r|
        k2, mse           r^2 / 2                    its gradient is KL's in expectation
        k3, low_var_kl    e^-r + r - 1, clamped      ``kl_k3``: unbiased, >= 0, low variance

    A ``+`` suffix (``k1+``, ``k3+``...) keeps the named estimate's value and takes k2's
    gradient (straight through: ``k2 - k2.detach() + value.detach()``), because k1's and k3's
    expected gradients are not KL's while k2's is. ``k2+`` / ``mse+`` are k2. verl's own code
    forwarded the suffix to ``kl_penalty_forward`` unstripped, so every ``+`` name raised
    NotImplementedError until verl PR #6058 (opened April 2026, merged) stripped it; this is
    what that fix computes."""
    base = kind.removesuffix("+")
    if base not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; one of {', '.join(KL_TYPES)}")
    r = logprobs - ref_logprobs
    if base in ("k1", "kl"):
        value = r
    elif base == "abs":
        value = r.abs()
    elif base in ("k2", "mse"):
        value = 0.5 * r.square()
    else:
        value = kl_k3(logprobs, ref_logprobs)
    if not kind.endswith("+") or base in ("k2", "mse"):
        return value
    k2 = 0.5 * r.square()
    return k2 - k2.detach() + value.detach()


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
               coef: float, denominator: float | None = None, agg: Aggregation | None = None,
               kind: str = "low_var_kl") -> tuple[torch.Tensor, torch.Tensor]:
    """Loss term ``coef * token_mean(kl)`` (``agg_loss(kl, agg)`` where given, as verl's kl
    loss) and the token-mean KL itself, ``kl`` the per-token ``kl_estimate`` of ``kind``
    (verl's ``actor.kl_loss_type``)."""
    k = kl_estimate(logprobs, ref_logprobs, kind)
    kl = token_mean(k, mask, denominator)
    return coef * (kl if agg is None else agg_loss(k, mask, agg)), kl
