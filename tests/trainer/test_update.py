"""One policy update on a tiny random Qwen2 moves log-probs in the advantages' direction."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.update import UpdateBatch, make_optimizer, update_policy, warmup_factor

pytestmark = pytest.mark.slow
policy = pytest.importorskip("trainer.policy")
response_logprobs = policy.response_logprobs


def tiny_qwen2(seed: int = 0) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, pad_token_id=0)
    return Qwen2ForCausalLM(cfg).eval()


def batch() -> UpdateBatch:
    # Two prompts of different lengths (left padding), ragged responses; +1 / -1 advantages.
    return UpdateBatch(prompt_ids=[[3, 4, 5], [3, 4, 5], [6, 7], [6, 7]],
                       response_ids=[[8, 9, 2], [10, 11], [12, 2], [13, 14, 15, 2]],
                       advantages=[1.0, -1.0, 1.0, -1.0], groups=[0, 0, 1, 1],
                       old_logprobs=[None] * 4)


def seq_logprob(model: torch.nn.Module, b: UpdateBatch) -> torch.Tensor:
    with torch.no_grad():
        lp, _, mask = response_logprobs(model, b.prompt_ids, b.response_ids, 0, 1.0)
    return (lp * mask).sum(-1)


def trained_logprobs(config: TrainConfig, micro_batch_size: int | None) -> torch.Tensor:
    """``seq_logprob`` of ``batch()`` after one update of a fresh ``tiny_qwen2()``."""
    model = tiny_qwen2()
    opt, sched = make_optimizer(model, config)
    update_policy(model, opt, sched, batch(), config, pad_token_id=0,
                  micro_batch_size=micro_batch_size)
    return seq_logprob(model, batch())


@pytest.mark.parametrize("mini_batch", [0, 1])
def test_update_raises_positive_and_lowers_negative(mini_batch: int) -> None:
    model = tiny_qwen2()
    config = TrainConfig(lr=2e-3, batch_size=2, ppo_mini_batch_size=mini_batch, ppo_epochs=2,
                         entropy_coef=1e-4, kl_coef=0.0, weight_decay=0.0)
    opt, sched = make_optimizer(model, config)
    b = batch()
    before = seq_logprob(model, b)
    metrics = update_policy(model, opt, sched, b, config, pad_token_id=0, seed=0)
    after = seq_logprob(model, b)
    delta = after - before
    assert delta[0] > 0 and delta[2] > 0
    assert delta[1] < 0 and delta[3] < 0
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0
    assert metrics["lr"] == pytest.approx(2e-3)
    assert 0 <= metrics["clip_frac_high"] <= 1 and metrics["kl"] == 0.0
    # First mini-batch starts at the old policy: ratio 1, loss = -token-mean(A) (+ small bonus).
    assert abs(metrics["policy_loss"]) < 1.0


def test_kl_term_against_a_reference_and_recorded_old_logprobs() -> None:
    model, ref = tiny_qwen2(0), tiny_qwen2(1)
    config = TrainConfig(lr=1e-3, kl_coef=0.1, entropy_coef=0.0, batch_size=2)
    opt, sched = make_optimizer(model, config)
    b = batch()
    with torch.no_grad():
        lp, _, _ = response_logprobs(model, b.prompt_ids, b.response_ids, 0, 1.0)
    b.old_logprobs = [lp[i, :len(r)].tolist() for i, r in enumerate(b.response_ids)]
    metrics = update_policy(model, opt, sched, b, config, pad_token_id=0, ref_model=ref)
    assert metrics["kl"] > 0
    assert metrics["clip_frac_low"] == 0 and metrics["clip_frac_high"] == 0


def test_micro_batches_give_the_same_gradient_step() -> None:
    config = TrainConfig(lr=1e-2, batch_size=2, entropy_coef=1e-3, weight_decay=0.0)
    results = [trained_logprobs(config, micro) for micro in (None, 1)]
    assert torch.allclose(results[0], results[1], atol=1e-5)


def test_warmup_is_verls_constant_with_warmup_and_empty_batch() -> None:
    # lr x k/W at scheduler step k, 0 at the first: W = 4 gives 0, 1/4, 1/2, 3/4, then 1.
    assert [warmup_factor(s, 4) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert warmup_factor(0, 0) == 1.0 and warmup_factor(7, 0) == 1.0
    model = tiny_qwen2()
    config = TrainConfig(lr=1e-3, warmup_steps=2)
    opt, sched = make_optimizer(model, config)
    m = update_policy(model, opt, sched, UpdateBatch([], [], [], []), config, pad_token_id=0)
    # An empty step still advances the schedule: step 1 used 0, step 2 uses 1e-3 x 1/2.
    assert m["lr"] == 0.0 and m["policy_loss"] == 0.0 and m["optimizer_steps"] == 0
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_warmup_lr_is_shared_by_every_mini_batch_of_a_step() -> None:
    # Two mini-batches of one prompt each: two optimiser steps at the same lr, and the scheduler
    # moves once per training step. The first step (lr 0) leaves the weights unchanged.
    model = tiny_qwen2()
    config = TrainConfig(lr=1e-3, warmup_steps=4, batch_size=2, ppo_mini_batch_size=1,
                         weight_decay=0.0)
    opt, sched = make_optimizer(model, config)
    before = [p.detach().clone() for p in model.parameters()]
    lrs = []
    for step in range(3):
        m = update_policy(model, opt, sched, batch(), config, pad_token_id=0, seed=step)
        assert m["optimizer_steps"] == 2
        lrs.append(m["lr"])
        if step == 0:
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert lrs == pytest.approx([0.0, 2.5e-4, 5e-4])


def test_truncated_importance_sampling_reweights_the_update() -> None:
    """With tis_cap, each token's loss is weighted by min(exp(old - rollout), C): a rollout whose
    log-probs sit log(4) below the policy's gets weight 2 (capped) on every token, so the first
    mini-batch's loss (ratio 1: -A * w) doubles; without rollout log-probs nothing changes."""
    import math

    config = TrainConfig(lr=1e-3, batch_size=2, entropy_coef=0.0, kl_coef=0.0, weight_decay=0.0,
                         tis_cap=2.0)
    plain = TrainConfig(**{**config.to_dict(), "tis_cap": 0.0})
    b = batch()
    with torch.no_grad():
        lp, _, mask = response_logprobs(tiny_qwen2(), b.prompt_ids, b.response_ids, 0, 1.0)
    b.old_logprobs = [row[:len(r)] for row, r in zip(lp.tolist(), b.response_ids, strict=True)]
    b.rollout_logprobs = [[x - math.log(4.0) for x in row] for row in b.old_logprobs]
    model = tiny_qwen2()
    opt, sched = make_optimizer(model, config)
    weighted = update_policy(model, opt, sched, b, config, pad_token_id=0, seed=0)
    assert weighted["tis_weight_mean"] == pytest.approx(2.0)
    assert weighted["tis_truncated_frac"] == pytest.approx(1.0)
    model = tiny_qwen2()
    opt, sched = make_optimizer(model, plain)
    unweighted = update_policy(model, opt, sched, b, plain, pad_token_id=0, seed=0)
    assert "tis_weight_mean" not in unweighted
    assert weighted["policy_loss"] == pytest.approx(2.0 * unweighted["policy_loss"], rel=1e-5)


def test_rollout_gap_by_hand_and_in_the_update() -> None:
    """Mean and max of |policy old - engine| log-prob over the kept tokens; the update reports
    it where every response carries the engine's log-probs, and not otherwise (hf)."""
    from trainer.update import rollout_gap

    gap = rollout_gap({0: [-1.0, -2.0], 1: [-0.5]}, {0: [-1.1, -1.7], 1: [-0.5]})
    assert gap["rollout_logprob_diff_mean"] == pytest.approx((0.1 + 0.3 + 0.0) / 3)
    assert gap["rollout_logprob_diff_max"] == pytest.approx(0.3)
    assert rollout_gap({}, {}) == {}

    config = TrainConfig(lr=1e-3, batch_size=2, entropy_coef=0.0)
    b = batch()  # old log-probs missing: the update recomputes them for the kept responses
    model = tiny_qwen2()
    with torch.no_grad():
        lp, _, _ = response_logprobs(model, b.prompt_ids, b.response_ids, 0, 1.0)
    exact = [row[:len(r)] for row, r in zip(lp.tolist(), b.response_ids, strict=True)]
    b.rollout_logprobs = [[x + 0.25 for x in row] for row in exact]
    opt, sched = make_optimizer(model, config)
    m = update_policy(model, opt, sched, b, config, pad_token_id=0, seed=0)
    assert m["rollout_logprob_diff_mean"] == pytest.approx(0.25, abs=1e-5)
    assert m["rollout_logprob_diff_max"] == pytest.approx(0.25, abs=1e-5)
    model = tiny_qwen2()
    m = update_policy(model, *make_optimizer(model, config), batch(), config, pad_token_id=0,
                      seed=0)
    assert "rollout_logprob_diff_mean" not in m


def test_should_stop_is_polled_before_every_mini_batch() -> None:
    """ppo_epochs x mini-batches can hold a worker long: the update asks before each one and
    raises StopRequested, clean only when no optimiser step was taken yet."""
    from trainer.types import StopRequested

    config = TrainConfig(lr=2e-3, batch_size=2, ppo_mini_batch_size=1, ppo_epochs=64)
    model = tiny_qwen2()
    opt, sched = make_optimizer(model, config)
    polls = []

    def stop_at_third() -> bool:
        polls.append(1)
        return len(polls) == 3

    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(StopRequested) as exc:
        update_policy(model, opt, sched, batch(), config, pad_token_id=0,
                      should_stop=stop_at_third)
    assert not exc.value.clean and len(polls) == 3  # two mini-batches of 128 were taken
    assert opt.state_dict()["state"][0]["step"] == 2
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    model = tiny_qwen2()
    opt, sched = make_optimizer(model, config)
    with pytest.raises(StopRequested) as exc:
        update_policy(model, opt, sched, batch(), config, pad_token_id=0,
                      should_stop=lambda: True)
    assert exc.value.clean
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
