"""Reinforce-Ada-Est (arXiv 2510.04996v3): a persistent per-prompt pass-rate estimate, and the
allocation of a step's sampling budget in proportion to the objective's gradient weight.

The v3 paper optimises a concave objective of each prompt's pass rate p, for instance
J = E_x[log p(x)]. Its gradient weighs prompt x by w(p) = f'(p) (1/p for the log), and Est realises
that weight through the number of samples the prompt gets, in one sampling round per step:

    (a) estimate   p̂_x = (pos_x + α) / (total_x + α + β)          Beta(α, β) prior, decayed counts
    (b) allocate   N_x = clip(c · w(p̂_x), N_min, N_max),  Σ_x N_x = budget_per_prompt · B
    (c) sample N_x responses of every prompt in a single round
    (d) train on every sample: A_i = (r_i − r̄_x) / sqrt(r̄_x + ε)    (``trainer.advantages``)
    (e) update     pos_x ← λ · pos_x + pos_x(step),  total_x ← λ · total_x + N_x

The default w(p̂) = 1/sqrt(p̂ + ε) is the paper's hybrid for the log objective: half of 1/p is
realised by sampling and the other half, 1/sqrt(r̄_x + ε), by the advantage's residual weight.
w(p̂) = 1/(p̂ + ε) (all of it by sampling) is the paper's ablation and what the authors'
experimental code does. docs/reinforce-ada-est.md gives the source of every default.

Pure numpy; ``PassRateEstimator`` holds the counts between steps and is saved in checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WeightFunction = Callable[[np.ndarray, float], np.ndarray]


def pass_rate_estimate(positives: np.ndarray, samples: np.ndarray, alpha: float,
                       beta: float) -> np.ndarray:
    """p̂ = (pos + α) / (total + α + β): the mean of the Beta(α + pos, β + total − pos) posterior.

    A prompt never sampled gets the prior mean α / (α + β) (1/17 at the defaults α=1, β=16: a
    prompt is presumed hard until it has been seen, so it is sampled generously)."""
    pos = np.asarray(positives, dtype=np.float64)
    total = np.asarray(samples, dtype=np.float64)
    return (pos + alpha) / (total + alpha + beta)


def decayed_counts(positives: np.ndarray, samples: np.ndarray, new_positives: np.ndarray,
                   new_samples: np.ndarray, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """pos ← λ · pos + pos(step),  total ← λ · total + total(step).

    Both counts decay by λ before the step's counts are added, so an observation made k updates
    ago weighs λ^k: the estimate follows a policy that changes while it trains (λ = 1 never
    forgets; λ = 0 keeps only the last step)."""
    pos = decay * np.asarray(positives, dtype=np.float64) + np.asarray(new_positives,
                                                                          dtype=np.float64)
    total = decay * np.asarray(samples, dtype=np.float64) + np.asarray(new_samples,
                                                                          dtype=np.float64)
    return pos, total


def _inv_sqrt(p_hat: np.ndarray, eps: float) -> np.ndarray:
    return 1.0 / np.sqrt(p_hat + eps)


def _inv(p_hat: np.ndarray, eps: float) -> np.ndarray:
    return 1.0 / (p_hat + eps)


# w(p̂) of the allocation (``TrainConfig.est_weight``).
ALLOCATION_WEIGHTS: dict[str, WeightFunction] = {
    "inv-sqrt": _inv_sqrt,   # the hybrid for the log objective (default)
    "inv": _inv,             # the log objective's whole weight 1/p by sampling (ablation)
}


def allocation_scale(weights: np.ndarray, total: int, n_min: int, n_max: int) -> float:
    """The proportionality constant c of the clipped allocation: Σ_x clip(c · w_x, N_min, N_max)
    equals ``total``.

    The sum is continuous and non-decreasing in c, and linear between the breakpoints N_min / w_x
    and N_max / w_x: bisection finds the piece the solution lies on, and the piece's linear
    equation gives c exactly. Needs B · N_min <= total <= B · N_max (checked by the config)."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) == 0:
        return 0.0
    if np.any(w <= 0) or not np.all(np.isfinite(w)):
        raise ValueError("allocation weights must be positive and finite")
    if not len(w) * n_min <= total <= len(w) * n_max:
        raise ValueError(f"no allocation within [{n_min}, {n_max}] per prompt sums to {total} "
                         f"over {len(w)} prompts")

    def clipped_sum(c: float) -> float:
        return float(np.clip(c * w, n_min, n_max).sum())

    lo, hi = float((n_min / w).min()), float((n_max / w).max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if clipped_sum(mid) < total:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    c = hi
    at_min, at_max = c * w <= n_min, c * w >= n_max
    free = ~(at_min | at_max)
    if free.any():
        c = (total - n_min * int(at_min.sum()) - n_max * int(at_max.sum())) / float(w[free].sum())
    return float(c)


def allocate(weights: np.ndarray, total: int, n_min: int, n_max: int) -> tuple[np.ndarray, float]:
    """Integer samples per prompt: N_x ∝ w_x, clipped to [N_min, N_max], summing to ``total``.

    The real-valued allocation x_x = clip(c · w_x, N_min, N_max) (``allocation_scale``) is rounded
    by the largest-remainder (Hamilton) rule: every prompt gets floor(x_x), and the samples still
    missing from ``total`` go one each to the prompts with the largest fractional parts; ties go
    to the larger weight (the harder prompt), then to the earlier prompt in the batch. Every
    N_x is floor(x_x) or ceil(x_x), so the bounds hold and the sum is exact.

    Returns (N, c)."""
    w = np.asarray(weights, dtype=np.float64)
    c = allocation_scale(w, total, n_min, n_max)
    x = np.clip(c * w, n_min, n_max)
    # floor(2.9999999999) of a value that is 3 up to rounding would hand out a sample twice.
    counts = np.clip(np.floor(x + 1e-9), n_min, n_max).astype(np.int64)
    remainder = x - counts
    index = np.arange(len(w))
    short = int(total - counts.sum())
    if short > 0:
        order = np.lexsort((index, -w, -remainder))
        order = order[counts[order] < n_max][:short]
        counts[order] += 1
    elif short < 0:  # float rounding pushed a floor one over: take back the smallest remainders
        order = np.lexsort((index, w, remainder))
        order = order[counts[order] > n_min][:-short]
        counts[order] -= 1
    if int(counts.sum()) != total:  # pragma: no cover - the arithmetic above guarantees it
        raise AssertionError(f"allocation sums to {int(counts.sum())}, not {total}")
    return counts, c


@dataclass
class Allocation:
    """One step's plan for a batch: p̂ before sampling, weights, samples per prompt, and c.
    ``counts`` None: an estimate without an allocation (VADE's posterior means; its records
    carry ``p_hat`` and no ``allocated``)."""

    p_hat: np.ndarray
    weights: np.ndarray
    counts: np.ndarray | None
    scale: float


@dataclass
class PassRateEstimator:
    """Decayed positive and sample counts per prompt id, kept across steps (run state: saved in
    checkpoints with ``state_dict`` and restored with ``load_state_dict``).

    Only the prompts of a step are decayed and updated, as in the authors' code: a prompt's
    counts age with its own visits, so a prompt seen once an epoch keeps its last estimate
    instead of drifting back to the prior."""

    alpha: float = 1.0
    beta: float = 16.0
    decay: float = 0.9
    positives: dict[str, float] = field(default_factory=dict)
    samples: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Any) -> PassRateEstimator:
        return cls(alpha=config.est_alpha, beta=config.est_beta, decay=config.est_lambda)

    def counts(self, prompt_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        pos = np.array([self.positives.get(i, 0.0) for i in prompt_ids], dtype=np.float64)
        total = np.array([self.samples.get(i, 0.0) for i in prompt_ids], dtype=np.float64)
        return pos, total

    def estimate(self, prompt_ids: Sequence[str]) -> np.ndarray:
        pos, total = self.counts(prompt_ids)
        return pass_rate_estimate(pos, total, self.alpha, self.beta)

    def update(self, prompt_ids: Sequence[str], positives: np.ndarray,
               samples: np.ndarray) -> None:
        if len(set(prompt_ids)) != len(prompt_ids):
            raise ValueError("a prompt appears twice in one update")
        pos, total = decayed_counts(*self.counts(prompt_ids), positives, samples, self.decay)
        for pid, p, t in zip(prompt_ids, pos.tolist(), total.tolist(), strict=True):
            self.positives[pid] = p
            self.samples[pid] = t

    def state_dict(self) -> dict[str, Any]:
        """JSON-able: floats round-trip exactly through JSON, so a resumed run allocates as the
        uninterrupted one did."""
        return {"positives": dict(self.positives), "samples": dict(self.samples)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.positives = {str(k): float(v) for k, v in state["positives"].items()}
        self.samples = {str(k): float(v) for k, v in state["samples"].items()}


def plan_allocation(estimator: PassRateEstimator, prompt_ids: Sequence[str],
                    config: Any) -> Allocation:
    """Steps (a) and (b) for one batch, from a ``TrainConfig``."""
    p_hat = estimator.estimate(prompt_ids)
    weights = ALLOCATION_WEIGHTS[config.est_weight](p_hat, config.est_eps)
    counts, scale = allocate(weights, config.budget_per_prompt * len(prompt_ids),
                             config.est_min_samples, config.est_max_samples)
    return Allocation(p_hat=p_hat, weights=weights, counts=counts, scale=scale)
