"""The KL to the frozen initial policy in the reward (verl's ``algorithm.use_kl_in_reward``):
each response's reward less the coefficient times its KL summed over its tokens, and the
controllers that move the coefficient from step to step. Pure numpy; the per-token estimates
come from ``trainer.update.sequence_kl`` (``trainer.loss.kl_estimate``).

verl (``verl/trainer/ppo/ray_trainer.py: apply_kl_penalty``) subtracts ``beta x kl_t`` from
every token's reward, so an outcome estimator (GRPO's, which reads ``token_level_rewards``
summed over the response) sees ``r - beta x sum_t kl_t``; the KL it reports and feeds its
controller is the mean over the responses of each response's token-mean KL.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# verl's AdaptiveKLController clips the proportional error to this band.
ADAPTIVE_ERROR_BOUND = 0.2


def penalised_rewards(rewards: np.ndarray, kl_sums: np.ndarray, coef: float) -> np.ndarray:
    """``r_i - coef x sum_t kl_{i,t}``: the reward the advantages use with the KL in it."""
    return np.asarray(rewards, dtype=np.float64) - coef * np.asarray(kl_sums, dtype=np.float64)


def current_kl(kl_means: np.ndarray) -> float:
    """The step's KL: the mean over responses of each response's token-mean KL (0 with no
    response), what verl logs as ``actor/reward_kl_penalty`` and gives its controller."""
    means = np.asarray(kl_means, dtype=np.float64)
    return float(means.mean()) if means.size else 0.0


def adaptive_kl_coef(coef: float, kl: float, target: float, horizon: int,
                     responses: int) -> float:
    """Ziegler et al. (2019), as verl's ``AdaptiveKLController.update``: the coefficient times
    ``1 + e x responses / horizon``, ``e = clip(kl / target - 1, -0.2, 0.2)``: up while the KL
    is above the target, down below it."""
    error = float(np.clip(kl / target - 1.0, -ADAPTIVE_ERROR_BOUND, ADAPTIVE_ERROR_BOUND))
    return coef * (1.0 + error * responses / horizon)


def next_kl_coef(config: Any, coef: float, kl: float, responses: int) -> float:
    """The coefficient of the next step after one at ``coef`` measured ``kl`` over
    ``responses`` responses: the same (``kl_ctrl_type = fixed``) or ``adaptive_kl_coef``."""
    if config.kl_ctrl_type == "fixed":
        return coef
    return adaptive_kl_coef(coef, kl, config.kl_ctrl_target, config.kl_ctrl_horizon, responses)
