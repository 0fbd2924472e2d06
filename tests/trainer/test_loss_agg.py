"""loss_agg_mode (issue 21): verl's four aggregations, each against its formula on hand-made
tensors; each over the whole mini-batch whatever its micro-batches; and how the project's
token-mean differs from verl's per-micro-batch weighting (the toy of docs/paper-fidelity.md)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import LOSS_AGG_MODES, ConfigError, TrainConfig
from trainer.loss import Aggregation, agg_loss, ppo_clip_loss, token_mean

# Two responses of 1 and 3 tokens (the second row padded by one junk value).
X = torch.tensor([[2.0, 99.0, 99.0, 99.0], [1.0, 3.0, 5.0, 99.0]])
M = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", (2 + 1 + 3 + 5) / 4),                       # sum / T, T = 4 tokens
    ("seq-mean-token-sum", (2 + (1 + 3 + 5)) / 2),             # sum / N, N = 2 responses
    ("seq-mean-token-mean", (2 / 1 + (1 + 3 + 5) / 3) / 2),    # mean of per-response means
    ("seq-mean-token-sum-norm", (2 + 9) / (2 * 8)),            # sum / (N L), L = 8
])
def test_each_mode_is_its_formula(mode: str, expected: float) -> None:
    got = agg_loss(X, M, Aggregation(mode, norm_length=8))
    assert got.item() == pytest.approx(expected)


def test_modes_over_micro_batches_sum_to_the_mini_batch() -> None:
    """Each micro-batch divides by the mini-batch's N and T: the parts add up to the whole."""
    for mode in LOSS_AGG_MODES:
        agg = Aggregation(mode, num_tokens=4, num_sequences=2, norm_length=8)
        whole = agg_loss(X, M, Aggregation(mode, norm_length=8))
        parts = agg_loss(X[:1], M[:1], agg) + agg_loss(X[1:], M[1:], agg)
        assert parts.item() == pytest.approx(whole.item()), mode


def test_token_mean_mode_is_the_token_mean_exactly() -> None:
    agg = Aggregation("token-mean", num_tokens=7.0)
    assert torch.equal(agg_loss(X, M, agg), token_mean(X, M, 7.0))
    lp = torch.log(torch.tensor([[0.5, 0.2, 0.9, 0.1], [0.3, 0.3, 0.3, 0.3]]))
    adv = torch.tensor([1.0, -0.5])
    a, _ = ppo_clip_loss(lp, lp.detach() - 0.1, adv, M, denominator=4.0)
    b, _ = ppo_clip_loss(lp, lp.detach() - 0.1, adv, M, agg=Aggregation("token-mean", 4.0))
    assert torch.equal(a, b)


def test_verls_token_mean_weighs_micro_batches_by_sequence_count() -> None:
    """The toy figure: micro-batches of one response each. verl's token-mean is a mean of the
    micro-batches' own token-means weighted by sequences (n_mb / N): (2 + 3) / 2 = 2.5; the
    project's, the mini-batch's token-mean: (2 + 9) / 4 = 2.75."""
    verl = sum((1 / 2) * token_mean(X[i:i + 1], M[i:i + 1]) for i in range(2))
    ours = sum(agg_loss(X[i:i + 1], M[i:i + 1], Aggregation("token-mean", num_tokens=4))
               for i in range(2))
    assert verl.item() == pytest.approx(2.5) and ours.item() == pytest.approx(2.75)


def test_an_unknown_mode_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        TrainConfig(loss_agg_mode="sum").validate()
    assert err.value.field == "loss_agg_mode"
    with pytest.raises(ValueError, match="loss_agg_mode must be one of"):
        agg_loss(X, M, Aggregation("sum"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_each_mode_trains_the_same_with_micro_batches(mode: str) -> None:
    from tests.trainer.test_update import batch, seq_logprob, tiny_qwen2, trained_logprobs

    config = TrainConfig(lr=1e-2, batch_size=2, entropy_coef=1e-3, weight_decay=0.0,
                         loss_agg_mode=mode, max_new_tokens=8)
    results = [trained_logprobs(config, micro) for micro in (None, 1)]
    assert torch.allclose(results[0], results[1], atol=1e-5)
    assert not torch.allclose(results[0], seq_logprob(tiny_qwen2(), batch()))  # it trained


@pytest.mark.slow
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_entropy_is_logged_as_token_mean_and_as_the_modes_aggregate(mode: str) -> None:
    """Issue 34 item 7: ``entropy`` is the token-mean whatever the mode, ``entropy_agg`` the
    mode's aggregate (verl's actor/entropy), each against its formula written here over the
    per-token entropies at the sampling weights (one mini-batch: the update's only forward
    passes are at those weights), with micro-batches of one response."""
    from tests.trainer.test_update import batch, response_logprobs, tiny_qwen2
    from trainer.update import make_optimizer, update_policy

    model, b = tiny_qwen2(), batch()
    with torch.no_grad():
        _, ent, mask = response_logprobs(model, b.prompt_ids, b.response_ids, 0, 1.0)
    rows = [[float(h) for h, m in zip(r, mr, strict=True) if m] for r, mr in zip(ent, mask,
                                                                                  strict=True)]
    n, tokens, L = len(rows), sum(len(r) for r in rows), 8
    expected = {"token-mean": sum(map(sum, rows)) / tokens,
                "seq-mean-token-sum": sum(map(sum, rows)) / n,
                "seq-mean-token-mean": sum(sum(r) / len(r) for r in rows) / n,
                "seq-mean-token-sum-norm": sum(map(sum, rows)) / (n * L)}
    config = TrainConfig(lr=1e-3, batch_size=2, entropy_coef=1e-3, loss_agg_mode=mode,
                         max_new_tokens=L)
    opt, sched = make_optimizer(model, config)
    metrics = update_policy(model, opt, sched, b, config, pad_token_id=0, micro_batch_size=1)
    assert metrics["entropy"] == pytest.approx(expected["token-mean"], rel=1e-5)
    assert metrics["entropy_agg"] == pytest.approx(expected[mode], rel=1e-5)
    if mode != "token-mean":
        # Not the same figure (a random model's entropies are near uniform: close, not equal).
        assert metrics["entropy_agg"] != pytest.approx(metrics["entropy"], rel=1e-6)
