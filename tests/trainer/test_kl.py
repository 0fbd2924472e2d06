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


# --- the KL in the reward -------------------------------------------------------------------

def _adaptive_by_hand(coef: float, kl: float, target: float, horizon: int, n: int) -> float:
    """Ziegler et al.'s rule in its cases: a KL more than 20% off the target moves the
    coefficient by 20% x n / horizon; nearer, by its relative error x n / horizon."""
    rel = (kl - target) / target
    if rel > 0.2:
        rel = 0.2
    elif rel < -0.2:
        rel = -0.2
    return coef + coef * rel * n / horizon


def test_controllers_follow_the_rule() -> None:
    import random

    from trainer.config import TrainConfig
    from trainer.kl import adaptive_kl_coef, next_kl_coef

    rng = random.Random(4)
    for _ in range(200):
        coef, kl = rng.uniform(1e-4, 1.0), rng.uniform(0.0, 0.5)
        target, horizon, n = rng.uniform(0.01, 0.3), rng.randint(1, 20_000), rng.randint(1, 512)
        want = _adaptive_by_hand(coef, kl, target, horizon, n)
        assert adaptive_kl_coef(coef, kl, target, horizon, n) == pytest.approx(want, rel=1e-12)
        adaptive = TrainConfig(use_kl_in_reward=True, kl_ctrl_type="adaptive",
                               kl_ctrl_target=target, kl_ctrl_horizon=horizon)
        assert next_kl_coef(adaptive, coef, kl, n) == pytest.approx(want, rel=1e-12)
        assert next_kl_coef(TrainConfig(kl_ctrl_type="fixed"), coef, kl, n) == coef
    # Above the target the coefficient grows, below it shrinks, at it stays.
    assert adaptive_kl_coef(0.1, 0.2, 0.1, 100, 10) == pytest.approx(0.1 * 1.02)
    assert adaptive_kl_coef(0.1, 0.0, 0.1, 100, 10) == pytest.approx(0.1 * 0.98)
    assert adaptive_kl_coef(0.1, 0.1, 0.1, 100, 10) == 0.1


def _result(rewards: list[float], groups: list[int], kept: list[bool]):
    import numpy as np

    from trainer.advantages import group_advantages
    from trainer.result import SamplerResult

    n = len(rewards)
    P = max(groups) + 1
    return SamplerResult.of_pools(
        num_prompts=P, sample_prompt=np.array(groups), sample_pool_index=np.arange(n),
        sample_round=np.ones(n, dtype=np.int64), sample_order=np.arange(n),
        rewards=np.array(rewards), positive=np.array(rewards) > 0.5,
        rounds_used=np.ones(P, dtype=np.int64), exit_round=np.ones(P, dtype=np.int64),
        missing=[None] * P, first_round_positives=np.zeros(P, dtype=np.int64),
        first_round_samples=np.zeros(P, dtype=np.int64), kept=np.array(kept),
        estimator=lambda r, g, k, p: group_advantages(r, g, k, p, std_normalize=True))


def test_kl_in_the_reward_moves_the_advantages_and_the_final_reward() -> None:
    import numpy as np

    from trainer.advantages import signal_values
    from trainer.kl import current_kl, penalised_rewards

    res = _result([1.0, 0.0, 1.0, 1.0, 1.0, 0.0], [0, 0, 0, 1, 1, 1],
                  [True, True, True, True, True, False])
    sums = np.array([3.0, 0.0, 1.0, 2.0, 0.5, 4.0])
    coef = 0.1
    out = res.with_kl_penalty(coef * sums)
    # GRPO by hand over each prompt's kept samples: mean and unbiased std of r - 0.1 x kl.
    final = [0.7, 0.0, 0.9, 0.8, 0.95, -0.4]
    want = []
    for i, g in enumerate([0, 0, 0, 1, 1, 1]):
        members = [final[j] for j in ({0: [0, 1, 2], 1: [3, 4]}[g])]
        mu = sum(members) / len(members)
        sd = math.sqrt(sum((x - mu) ** 2 for x in members) / (len(members) - 1))
        want.append(0.0 if i == 5 else (final[i] - mu) / (sd + 1e-6))
    assert out.advantages.tolist() == pytest.approx(want, rel=1e-9)
    assert out.rewards.tolist() == res.rewards.tolist()  # the recorded reward stays the reward
    assert out.final_rewards.tolist() == pytest.approx(final)
    assert penalised_rewards(res.rewards, sums, coef).tolist() == pytest.approx(final)
    # Group 1's rewards are all 1 (no signal by seq_reward), its final rewards differ.
    by = {m: signal_values(out.rewards, out.scores, m, 0.5, out.final_rewards)
          for m in ("seq_reward", "seq_final_reward")}
    assert by["seq_reward"].tolist() == res.rewards.tolist()
    assert by["seq_final_reward"].tolist() == pytest.approx(final)
    # Without the KL the final reward is the reward, bit for bit.
    assert res.final_rewards is res.rewards
    assert current_kl(np.array([0.5, 0.1, 0.3])) == pytest.approx(0.3)
    assert current_kl(np.array([])) == 0.0


def test_kl_in_the_reward_is_refused_where_it_cannot_be_measured() -> None:
    from trainer.config import TrainConfig

    def fields(**kw) -> list[str]:
        return [e.field for e in TrainConfig(**kw).errors()]

    assert fields(use_kl_in_reward=True, backend="simulated") == ["use_kl_in_reward"]
    assert fields(use_kl_in_reward=True, backend="hf",
                  positive_metric="seq_final_reward") == ["positive_metric"]
    assert fields(use_kl_in_reward=True, backend="hf", algorithm="dapo",
                  options={"dapo_filter_metric": "seq_final_reward"}) == ["dapo_filter_metric"]
    assert fields(use_kl_in_reward=True, backend="hf", algorithm="dapo",
                  options={"dapo_filter_metric": "seq_reward"}) == []
    assert fields(kl_loss_type="k5") == ["kl_loss_type"]
    assert fields(kl_ctrl_horizon=0) == ["kl_ctrl_horizon"]


def _token_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """log pi(response_t | prefix) from one unpadded forward pass of the whole sequence, in
    float64 (temperature 1)."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double()
    rows = logits[len(prompt) - 1:len(prompt) - 1 + len(response)]
    return torch.log_softmax(rows, -1).gather(1, torch.tensor(response)[:, None])[:, 0]


@pytest.mark.slow
def test_sequence_kl_sums_each_responses_token_estimates(tiny_model_dir) -> None:
    import copy

    from trainer.model import encode_prompt, load_model_dir
    from trainer.tasks import arithmetic_prompts
    from trainer.update import UpdateBatch, sequence_kl

    model, tokenizer = load_model_dir(tiny_model_dir, "cpu")
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    prompts = arithmetic_prompts(3, max_digits=2, seed=1)
    ub = UpdateBatch([], [], [], [], [], [])
    for k, n in enumerate([5, 1, 3, 0]):
        ub.prompt_ids.append(encode_prompt(tokenizer, prompts[k % 3]))
        ub.response_ids.append(torch.randint(3, 12, (n,), generator=g).tolist())
    # One response's old log-probs recorded (as a backend records them), the others computed.
    recorded = _token_logprobs(model, ub.prompt_ids[2], ub.response_ids[2]).tolist()
    ub.old_logprobs = [None, None, recorded, None]
    for kind in ("k1", "k3"):
        sums, means = sequence_kl(model, ref, ub, kind, pad_token_id=tokenizer.pad_token_id,
                                  temperature=1.0, micro_batch_size=2)
        for i in range(4):
            if not ub.response_ids[i]:
                assert sums[i] == 0.0 and means[i] == 0.0
                continue
            lp = _token_logprobs(model, ub.prompt_ids[i], ub.response_ids[i])
            lr = _token_logprobs(ref, ub.prompt_ids[i], ub.response_ids[i])
            per_token = lp - lr if kind == "k1" else torch.exp(lr - lp) - (lr - lp) - 1
            assert sums[i] == pytest.approx(float(per_token.sum()), abs=1e-5), (kind, i)
            assert means[i] == pytest.approx(float(per_token.mean()), abs=1e-5), (kind, i)
        assert abs(sums).max() > 1e-3  # the reference differs
