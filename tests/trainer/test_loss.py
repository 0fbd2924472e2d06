"""Loss terms on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.loss import (
    entropy_bonus,
    kl_k3,
    kl_penalty,
    ppo_clip_loss,
    token_mean,
    truncated_is_weights,
)


def test_token_mean_over_ragged_lengths() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [10.0, 99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # 4 valid tokens: (1+2+3+10)/4, not the mean of per-sequence means ((2 + 10) / 2).
    assert token_mean(x, mask).item() == pytest.approx(4.0)
    assert token_mean(x, mask, denominator=8).item() == pytest.approx(2.0)
    assert token_mean(x, torch.zeros_like(mask)).item() == 0.0


def _lp(ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    old = torch.zeros(1, len(ratios))
    return torch.log(torch.tensor([ratios])), old


def test_unclipped_ratio_one_is_minus_advantage() -> None:
    lp, old = _lp([1.0, 1.0])
    loss, m = ppo_clip_loss(lp, old, torch.tensor([2.0]), torch.ones(1, 2))
    assert loss.item() == pytest.approx(-2.0)
    assert m["clip_frac_high"].item() == 0 and m["clip_frac_low"].item() == 0


def test_clip_high_side_for_positive_advantage() -> None:
    # ratio 1.5 > 1.28: the objective is capped at 1.28*A and the gradient is zero there.
    lp, old = _lp([1.5, 1.1])
    lp.requires_grad_(True)
    loss, m = ppo_clip_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.28)
    assert loss.item() == pytest.approx(-(1.28 + 1.1) / 2)
    assert m["clip_frac_high"].item() == pytest.approx(0.5)
    assert m["clip_frac_low"].item() == 0
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(-1.1 / 2)  # d(-A*rho/2)/dlogp = -A*rho/2


def test_clip_low_side_for_negative_advantage() -> None:
    # ratio 0.5 < 0.8 with A < 0: objective uses 0.8, no gradient; 0.9 is inside the range.
    lp, old = _lp([0.5, 0.9])
    lp.requires_grad_(True)
    loss, m = ppo_clip_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 2), 0.2, 0.28)
    assert loss.item() == pytest.approx((0.8 + 0.9) / 2)
    assert m["clip_frac_low"].item() == pytest.approx(0.5)
    assert m["clip_frac_high"].item() == 0
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 1].item() != 0.0


def test_no_clipping_on_the_side_that_lowers_the_objective() -> None:
    # A > 0 and ratio 0.5: max(-0.5, -0.8) = -0.5 -> the unclipped term, not counted as clipped.
    lp, old = _lp([0.5])
    loss, m = ppo_clip_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-0.5)
    assert m["clip_frac_low"].item() == 0 and m["clip_frac_high"].item() == 0


def test_ppo_loss_token_mean_ignores_padding() -> None:
    lp = torch.tensor([[0.0, 0.0, 0.0], [0.0, 50.0, -50.0]])  # junk in the padding
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, m = ppo_clip_loss(lp, torch.zeros_like(lp), torch.tensor([1.0, -3.0]), mask)
    assert loss.item() == pytest.approx((-1 * 3 + 3 * 1) / 4)
    assert m["ratio_mean"].item() == pytest.approx(1.0)


def test_entropy_bonus() -> None:
    h = torch.tensor([[1.0, 3.0], [2.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    term, mean_h = entropy_bonus(h, mask, 0.1)
    assert mean_h.item() == pytest.approx(2.0)
    assert term.item() == pytest.approx(-0.2)


def test_kl_k3_values_and_penalty() -> None:
    lp = torch.tensor([[math.log(0.5), math.log(0.25)]])
    ref = torch.tensor([[math.log(0.5), math.log(0.5)]])
    k = kl_k3(lp, ref)
    assert k[0, 0].item() == pytest.approx(0.0)
    assert k[0, 1].item() == pytest.approx(2.0 - math.log(2.0) - 1.0)
    term, kl = kl_penalty(lp, ref, torch.ones(1, 2), coef=0.5)
    assert kl.item() == pytest.approx((1.0 - math.log(2.0)) / 2)
    assert term.item() == pytest.approx(0.5 * kl.item())
    assert (kl_k3(torch.randn(50), torch.randn(50)) >= 0).all()


def test_truncated_is_weights_by_hand() -> None:
    # old - rollout = log 0.5, 0, log 3, log 10, +100 (degenerate: clamped before exp), -100.
    old = torch.tensor([[math.log(0.5), 0.0, math.log(3.0), math.log(10.0), 50.0, -50.0]])
    rollout = torch.tensor([[0.0, 0.0, 0.0, 0.0, -50.0, 50.0]])
    w = truncated_is_weights(old, rollout, cap=2.0)
    assert w.tolist()[0] == pytest.approx([0.5, 1.0, 2.0, 2.0, 2.0, math.exp(-20.0)])
    assert not w.requires_grad and torch.isfinite(w).all()


def test_token_weights_scale_each_tokens_loss_without_gradient() -> None:
    lp = torch.zeros(1, 3, requires_grad=True)
    old = torch.zeros(1, 3)
    mask = torch.ones(1, 3)
    weights = torch.tensor([[0.5, 1.0, 2.0]], requires_grad=True)
    loss, _ = ppo_clip_loss(lp, old, torch.tensor([1.0]), mask, token_weights=weights)
    # ratio 1 everywhere: L_t = -A * w_t, token-mean = -(0.5 + 1 + 2) / 3.
    assert loss.item() == pytest.approx(-3.5 / 3)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([-0.5 / 3, -1.0 / 3, -2.0 / 3])
    assert weights.grad is None


def test_dual_clip_caps_a_negative_advantage_token_at_c() -> None:
    # A = -1: ratio 20 would contribute -A * 20 = 20 without the dual clip; with c = 10 it is
    # min(max(20, 1.28), 10) = 10 and its gradient is cut. Ratio 2 stays below c: 2.
    lp, old = _lp([20.0, 2.0])
    lp.requires_grad_(True)
    loss, m = ppo_clip_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 2), 0.2, 0.28,
                            clip_ratio_c=10.0)
    assert loss.item() == pytest.approx((10.0 + 2.0) / 2)
    assert m["dual_clip_frac"].item() == pytest.approx(0.5)
    assert m["clip_frac_low"].item() == 0 and m["clip_frac_high"].item() == 0
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(2.0 / 2)  # d(-A*rho/2)/dlogp = rho/2
    # The default c = 3: the same token gives 3.
    loss3, _ = ppo_clip_loss(lp.detach(), old, torch.tensor([-1.0]), torch.ones(1, 2))
    assert loss3.item() == pytest.approx((3.0 + 2.0) / 2)


def test_dual_clip_leaves_positive_advantages_alone() -> None:
    # A = +1 and ratio 20: the clip-higher branch (-1.28) is taken, never the dual clip.
    lp, old = _lp([20.0])
    loss, m = ppo_clip_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 1), clip_ratio_c=10.0)
    assert loss.item() == pytest.approx(-1.28)
    assert m["dual_clip_frac"].item() == 0 and m["clip_frac_high"].item() == 1.0


def test_log_ratio_is_clamped_before_exp() -> None:
    # A log-ratio of 100 overflows exp in float32 (inf; inf * 0 is NaN). Clamped to 20 it stays
    # finite: A = -1 is capped by the dual clip at c, A = +1 by clip-higher at 1.28, and the
    # ratio itself is exp(20).
    lp = torch.tensor([[100.0], [100.0]], requires_grad=True)
    old = torch.zeros(2, 1)
    loss, m = ppo_clip_loss(lp, old, torch.tensor([-1.0, 1.0]), torch.ones(2, 1))
    assert torch.isfinite(loss) and loss.item() == pytest.approx((3.0 - 1.28) / 2)
    assert m["ratio_mean"].item() == pytest.approx(math.exp(20.0), rel=1e-5)
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    # Towards -100 the ratio is exp(-20) ~ 2e-9: A = +1 is unclipped and finite.
    loss_low, _ = ppo_clip_loss(-lp.detach(), old, torch.tensor([1.0, 1.0]), torch.ones(2, 1))
    assert loss_low.item() == pytest.approx(-math.exp(-20.0))


def test_kl_k3_is_clamped_to_ten_as_verls_low_var_kl() -> None:
    # d = ref - logp = 5: exp(5) - 5 - 1 = 142.4 unclamped; 3: 16.1; 2: 4.39 (below the bound).
    lp = torch.zeros(1, 3, requires_grad=True)
    ref = torch.tensor([[5.0, 3.0, 2.0]])
    k = kl_k3(lp, ref)
    assert k[0, 0].item() == 10.0 and k[0, 1].item() == 10.0
    assert k[0, 2].item() == pytest.approx(math.exp(2.0) - 3.0)
    k.sum().backward()
    # A clamped token passes no gradient; the one below the bound does (d/dlogp = 1 - e^d).
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 1].item() == 0.0
    assert lp.grad[0, 2].item() == pytest.approx(1.0 - math.exp(2.0))
