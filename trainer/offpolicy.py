"""Off-policy corrections (``off_policy_correction``): how the update treats samples that older
weights (``max_policy_lag``, ``trainer.asyncloop``) or another engine (vllm) generated.

Three log-probabilities of a sampled token meet here: the behaviour policy's ``logp_behav``
(the weights that generated it, recorded at generation), the proximal policy's ``logp_prox``
(the weights at the start of the step's update, recomputed before its first mini-batch) and
the policy being trained, ``logp``. PPO's ratio is always ``exp(logp - logp_prox)``, clipped as
configured (``trainer.loss.ppo_clip_loss``); the corrections differ in the weight each token's
loss carries and in the learning rate:

- ``tis``: truncated importance sampling, today's ``tis_cap``;
- ``decoupled``: AReaL's decoupled PPO (Fu et al., 2025, "AReaL"; inclusionAI/AReaL,
  areal/utils/functional.py
  ``ppo_actor_loss_fn`` with ``proximal_logprobs`` and ``behav_imp_weight_cap``);
- ``vcpo``: VCPO (arXiv 2602.17616; mit-han-lab/vcpo, recipe/fully_async_policy/
  staleness_utils.py ``compute_ess_info`` and ``compute_opob_baseline``, and the ESS scaling of
  verl/workers/actor/megatron_actor.py ``_optimizer_step_with_buffer``): the learning rate
  scaled by the effective sample size, and the minimum-variance off-policy baseline.

Pure functions over tensors, no gradient through any weight.
"""

from __future__ import annotations

import torch

# The log-ratio is clamped before ``exp`` (as trainer.loss does) so a degenerate token or a
# long sequence cannot overflow.
LOG_RATIO_BOUND = 20.0
EPS = 1e-8


def _log_ratio(prox: torch.Tensor, behav: torch.Tensor) -> torch.Tensor:
    return torch.clamp(prox - behav, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)


@torch.no_grad()
def tis_weights(logp_prox: torch.Tensor, logp_behav: torch.Tensor, cap: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance sampling (Yao et al., 2025), per token::

        w_t = min(exp(logp_prox_t - logp_behav_t), C)

    Returns (w, truncated): ``truncated`` marks the tokens whose weight the cap C cut
    (``w_t == C`` exactly where the ratio reached it)."""
    ratio = torch.exp(_log_ratio(logp_prox, logp_behav))
    return torch.clamp(ratio, max=cap), ratio >= cap


@torch.no_grad()
def decoupled_weights(logp_prox: torch.Tensor, logp_behav: torch.Tensor, cap: float = 0.0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """AReaL's decoupled PPO: the loss clips against the proximal policy and each token is
    weighted by the behaviour importance ratio, left out where it exceeds the cap C (AReaL's
    ``behav_imp_weight_cap``; C = 0: no cap)::

        w_t = exp(logp_prox_t - logp_behav_t)   if C == 0 or that is <= C
        w_t = 0                                  otherwise

    Returns (w, dropped): the tokens the cap left out."""
    ratio = torch.exp(_log_ratio(logp_prox, logp_behav))
    dropped = ratio > cap if cap > 0 else torch.zeros_like(ratio, dtype=torch.bool)
    return torch.where(dropped, torch.zeros_like(ratio), ratio), dropped


@torch.no_grad()
def sequence_ratios(logp_prox: torch.Tensor, logp_behav: torch.Tensor, mask: torch.Tensor
                    ) -> torch.Tensor:
    """Each response's sequence-level importance ratio (VCPO's ``rollout_seq_is``)::

        w_i = exp(sum_t mask_it (logp_prox_it - logp_behav_it))

    with the summed log-ratio clamped to [-20, 20]."""
    total = ((logp_prox - logp_behav) * mask).sum(dim=-1)
    return torch.exp(torch.clamp(total, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))


@torch.no_grad()
def effective_sample_size(weights: torch.Tensor) -> float:
    """The normalised effective sample size of importance weights w_1..w_n, in (0, 1]::

        ESS = (sum_i w_i)^2 / (n * sum_i w_i^2)

    1 when every weight is equal (on-policy), 1/n when one weight carries everything. An
    empty set counts as on-policy (1)."""
    w = weights.double().flatten()
    if w.numel() == 0:
        return 1.0
    sq = float((w * w).sum())
    if sq <= 0.0:
        return 1.0
    return min(1.0, float(w.sum()) ** 2 / (w.numel() * sq))


def ess_lr_scale(ess: float, base: float = 1.0) -> float:
    """VCPO's learning-rate multiplier (its default ``scaling_rule: sqrt``, ``base_ess_ratio``
    1)::

        lr_applied = lr * sqrt(min(1, ESS / base))"""
    return min(1.0, max(ess, 0.0) / max(base, EPS)) ** 0.5


@torch.no_grad()
def min_variance_baseline(rewards: torch.Tensor, seq_ratios: torch.Tensor,
                          grad_sq_norms: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """VCPO's closed-form minimum-variance off-policy baseline, per group (prompt) g, returned
    per response::

        b_g = sum_{i in g} W_i R_i / (sum_{i in g} W_i + eps),   W_i = ||grad log pi(y_i)||^2 w_i^2

    the baseline minimising the variance of ``sum_i w_i (R_i - b) grad log pi(y_i)``
    (setting its derivative in b to zero). ``groups`` holds each response's group id."""
    W = grad_sq_norms.double() * seq_ratios.double() ** 2
    g = groups.long()
    size = int(g.max()) + 1 if g.numel() else 0
    num = torch.zeros(size, dtype=torch.float64).index_add_(0, g, W * rewards.double())
    den = torch.zeros(size, dtype=torch.float64).index_add_(0, g, W)
    return (num / (den + EPS))[g].to(rewards.dtype)
