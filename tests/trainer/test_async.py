"""Asynchronous training with a bounded policy lag (trainer.asyncloop) and the off-policy
corrections (trainer.offpolicy): issue 29, the trainer's side."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer import train
from trainer.algorithms import ALGORITHM_NAMES, get_algorithm
from trainer.asyncloop import Producer
from trainer.backends.simulated import SimulatedBackend
from trainer.config import TrainConfig
from trainer.loop import make_scorer
from trainer.offpolicy import (
    decoupled_weights,
    effective_sample_size,
    ess_lr_scale,
    min_variance_baseline,
    sequence_ratios,
    tis_weights,
)
from trainer.recorders import ListRecorder, event
from trainer.types import Prompt

# Every registered algorithm runs asynchronously (a new one is pinned here without an edit).
ALGORITHMS = tuple(ALGORITHM_NAMES)


def prompts(n: int = 20, rates: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
            ) -> list[Prompt]:
    return [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": rates[i % len(rates)]})
            for i in range(n)]


def sim_run(tmp_path: Path, **kw) -> ListRecorder:
    base = dict(backend="simulated", batch_size=4, total_steps=5, save_every=0, eval_every=0,
                seed=1, verifier="exact")
    rec = ListRecorder()
    result = train(TrainConfig(**{**base, **kw}), prompts(), SimulatedBackend(), rec,
                   out_dir=tmp_path)
    assert result.status == "completed"
    return rec


def dumped(rec: ListRecorder) -> list[dict]:
    """Every step's record as the JSONL line, wall-clock metrics aside."""
    out = [event("step", s) for s in rec.steps]
    for e in out:
        e["metrics"] = {k: v for k, v in e["metrics"].items() if not k.startswith("time_")}
    return out


# --- k = 0 is today's loop ---------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_lag_zero_records_equal_the_default_configs(tmp_path, algorithm) -> None:
    default = dumped(sim_run(tmp_path / "a", algorithm=algorithm))
    explicit = dumped(sim_run(tmp_path / "b", algorithm=algorithm, max_policy_lag=0,
                              off_policy_correction="tis"))
    assert default == explicit
    # Synchronous records carry no version and none of the asynchronous metrics.
    assert all("policy_version" not in x for s in default for x in s["samples"])
    assert all("policy_lag_max" not in s["metrics"] for s in default)


# --- the lag bound -----------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_kept_sample_is_ever_past_the_bound(tmp_path, algorithm) -> None:
    rng = np.random.default_rng(29)
    for trial in range(4):
        k = int(rng.integers(1, 4))
        seed = int(rng.integers(0, 10_000))
        rec = sim_run(tmp_path / str(trial), algorithm=algorithm, max_policy_lag=k, seed=seed,
                      total_steps=6, batch_size=int(rng.integers(2, 6)))
        lags = []
        for s in rec.steps:
            for x in s.samples:
                assert x.policy_version is not None and x.policy_version <= s.step - 1
                if x.kept:
                    lag = (s.step - 1) - x.policy_version
                    assert 0 <= lag <= k, (algorithm, k, s.step, x)
                    lags.append(lag)
            kept_lags = [(s.step - 1) - x.policy_version for x in s.samples if x.kept]
            assert s.metrics["policy_lag_max"] == max(kept_lags)
            assert s.metrics["policy_lag_mean"] == pytest.approx(np.mean(kept_lags))
        assert max(lags) >= 1  # generation did run ahead


def test_a_ready_prompt_past_the_bound_is_dropped_and_counted_never_taken() -> None:
    config = TrainConfig(backend="simulated", algorithm="ada-balance", batch_size=2, seed=3,
                         verifier="exact", max_policy_lag=1)
    producer = Producer(config, prompts(), SimulatedBackend(), make_scorer(config),
                        version=5)
    while len(producer.ready) < 3:
        producer.tick()
    # As if the first ready prompt had waited through two updates (version 3 < 5 - 1).
    stale = producer.ready[0]
    stale.versions = [3] * len(stale.versions)
    taken = producer.take()
    assert stale not in taken and stale not in producer.ready
    assert producer.stale_dropped == len(stale.rewards) > 0
    assert all(f.oldest >= 4 for f in taken) and len(taken) == 2


def test_lag_one_grpo_is_one_step_off_policy(tmp_path) -> None:
    rec = sim_run(tmp_path, algorithm="grpo", max_policy_lag=1, total_steps=4)
    assert [s.metrics["policy_lag_max"] for s in rec.steps] == [0, 1, 1, 1]
    assert all(len(s.prompts) == 4 for s in rec.steps)


# --- the algorithms stay themselves ------------------------------------------------------------

def test_async_seq_balance_keeps_its_invariants(tmp_path) -> None:
    rec = sim_run(tmp_path, algorithm="ada-balance", max_policy_lag=2, total_steps=6)
    n = 4
    for s in rec.steps:
        assert len(s.prompts) == 4
        for p in s.prompts:
            pool = [x for x in s.samples if x.prompt_id == p.prompt_id]
            kept = [x for x in pool if x.kept]
            assert len(pool) == p.samples >= n and len(kept) == n  # M = 8 >= n per round
            # The global baseline is the mean of the prompt's whole pool.
            assert p.baseline == pytest.approx(np.mean([x.reward for x in pool]))
            for x in kept:
                assert x.advantage == pytest.approx(x.reward - p.baseline)
            # The balanced split: up to n//2 of each side, the rest from the side with more.
            take_pos = min(n // 2, p.positives)
            take_neg = min(n - n // 2, p.negatives)
            free = n - take_pos - take_neg
            left_pos, left_neg = p.positives - take_pos, p.negatives - take_neg
            extra_pos = min(free, left_pos) if left_pos >= left_neg else free - min(free,
                                                                                    left_neg)
            assert (p.kept_positives, p.kept_negatives) == (take_pos + extra_pos,
                                                            take_neg + free - extra_pos)
            # Ready at its exit rule or after N rounds.
            assert p.exit_round is not None or p.rounds == 4


def test_async_dapo_trains_b_signal_groups_and_counts_the_refills() -> None:
    config = TrainConfig(backend="simulated", algorithm="dapo", batch_size=4, seed=2,
                         verifier="exact", max_policy_lag=1)
    producer = Producer(config, prompts(), SimulatedBackend(), make_scorer(config))
    trained = filtered = 0
    for _ in range(6):
        flights = producer.take()
        assert len(flights) == 4
        for f in flights:
            rewards = np.asarray(f.rewards)
            assert len(rewards) == config.group_size and rewards.min() < rewards.max()
        trained += len(flights)
        producer.overlap()
        filtered += producer.filtered
        producer.applied()
    # Every admitted prompt is trained, filtered (all-equal group, refilled) or still held.
    assert filtered > 0
    assert producer.serial == trained + filtered + producer.filtered + len(producer.ready) \
        + len(producer.sampling)


def test_async_dapo_run_records_only_groups_with_signal(tmp_path) -> None:
    rec = sim_run(tmp_path, algorithm="dapo", max_policy_lag=1)
    for s in rec.steps:
        assert len(s.prompts) == 4 and all(p.positives and p.negatives for p in s.prompts)
    assert sum(s.metrics["prompts_filtered"] for s in rec.steps) > 0


def test_async_est_allocates_at_admission_and_learns_when_trained(tmp_path) -> None:
    rec = sim_run(tmp_path, algorithm="ada-est", max_policy_lag=1, budget_per_prompt=6,
                  total_steps=8)
    prior = 1.0 / 17.0  # Beta(1, 16)'s mean: a prompt the estimator has not trained on
    trained: set[str] = set()
    for s in rec.steps:
        assert all(p.allocated == p.samples for p in s.prompts)
        assert sum(p.allocated for p in s.prompts) == 6 * 4  # the budget, per admission
        for p in s.prompts:
            if p.prompt_id not in trained:  # admitted before any update trained it
                assert p.p_hat == pytest.approx(prior)
        trained |= {p.prompt_id for p in s.prompts}
    # The second epoch's prompts were admitted after their first update: estimated anew.
    assert any(abs(p.p_hat - prior) > 1e-6 for s in rec.steps[5:] for p in s.prompts)


def test_a_cancel_while_the_producer_samples_stops_at_the_last_completed_step(tmp_path) -> None:
    calls = {"n": 0}

    def should_stop() -> bool:  # polled before every tick the producer waits for
        calls["n"] += 1
        return calls["n"] > 4

    config = TrainConfig(backend="simulated", algorithm="ada-balance", batch_size=4,
                         total_steps=8, save_every=0, eval_every=0, seed=1, verifier="exact",
                         max_policy_lag=1)
    rec = ListRecorder()
    result = train(config, prompts(), SimulatedBackend(), rec, should_stop, out_dir=tmp_path)
    assert result.status == "cancelled"
    done = [s.step for s in rec.steps]
    assert done == list(range(1, result.last_step + 1)) and 0 < result.last_step < 8
    assert result.checkpoint is not None and result.checkpoint.endswith(
        f"{result.last_step:06d}")


def test_a_resumed_run_keeps_the_bound_from_the_checkpoints_version(tmp_path) -> None:
    from trainer.checkpoint import latest_checkpoint

    base = dict(backend="simulated", algorithm="ada-pos", batch_size=4, save_every=3,
                eval_every=0, seed=4, verifier="exact", max_policy_lag=2)
    train(TrainConfig(**base, total_steps=3), prompts(), SimulatedBackend(), ListRecorder(),
          out_dir=tmp_path)
    rec = ListRecorder()
    result = train(TrainConfig(**base, total_steps=7), prompts(), SimulatedBackend(), rec,
                   out_dir=tmp_path, resume_from=latest_checkpoint(tmp_path))
    assert result.status == "completed" and [s.step for s in rec.steps] == [4, 5, 6, 7]
    # The producer starts empty at version 3: nothing generated before the checkpoint is
    # trained after it, and the bound holds from there.
    for s in rec.steps:
        assert all(3 <= x.policy_version <= s.step - 1 for x in s.samples)
        assert all(s.step - 1 - x.policy_version <= 2 for x in s.samples if x.kept)


# --- stops and recovery (issue 29 item 5) ------------------------------------------------------

def held_at(rec: ListRecorder, ckpt_step: int) -> tuple[int, int]:
    """From an uninterrupted run's records alone: the samples drawn before the checkpoint of
    step ``ckpt_step`` (version < ckpt_step) that a later step trained, and their prompts: what
    the checkpoint held in flight, where the run dropped and filtered nothing after it."""
    samples = prompts_ = 0
    for s in rec.steps:
        if s.step > ckpt_step:
            old = [x for x in s.samples if x.policy_version < ckpt_step]
            samples += len(old)
            prompts_ += len({x.prompt_id for x in old})
            assert s.metrics["samples_stale_dropped"] == s.metrics["samples_filtered"] == 0
    return samples, prompts_


@pytest.mark.parametrize("algorithm,k", [("grpo", 1), ("ada-balance", 1), ("ada-est", 2)])
def test_a_resume_discards_and_counts_what_the_checkpoint_held_in_flight(tmp_path, algorithm,
                                                                        k) -> None:
    from trainer.asyncloop import ASYNC_STATE
    from trainer.checkpoint import checkpoint_dir, read_state

    base = dict(backend="simulated", algorithm=algorithm, batch_size=4, save_every=3,
                eval_every=0, seed=4, verifier="exact", max_policy_lag=k, total_steps=8)
    whole = ListRecorder()
    train(TrainConfig(**base), prompts(), SimulatedBackend(), whole, out_dir=tmp_path / "a")
    ckpt = checkpoint_dir(tmp_path / "a", 3)
    state = read_state(ckpt)[ASYNC_STATE]
    rec = ListRecorder()
    result = train(TrainConfig(**base), prompts(), SimulatedBackend(), rec,
                   out_dir=tmp_path / "b", resume_from=ckpt)
    assert result.status == "completed" and [s.step for s in rec.steps] == [4, 5, 6, 7, 8]
    # What the checkpoint held: counted there, equal to what the uninterrupted run went on to
    # train of it, reported on the first step after the resume and on no other.
    held = (state["inflight_samples"], state["inflight_prompts"])
    assert held == held_at(whole, 3) and held[0] > 0
    discarded = [(s.metrics["samples_inflight_discarded"], s.metrics["prompts_inflight_discarded"])
                 for s in rec.steps]
    assert discarded == [held] + [(0, 0)] * 4
    assert all(s.metrics["samples_inflight_discarded"] == 0 for s in whole.steps)
    # Never trained or recorded again: every sample after the resume is drawn anew, at the
    # checkpoint's version or later, and the bound holds.
    for s in rec.steps:
        assert all(3 <= x.policy_version and s.step - 1 - x.policy_version <= k
                   for x in s.samples if x.kept)
        assert all(x.policy_version >= 3 for x in s.samples)
    # Their prompts are admitted again, first: each prompt the checkpoint held is trained
    # after the resume (by the update the bound forces at the latest), as it was in the
    # uninterrupted run.
    again = Counter(p.prompt_id for s in whole.steps if s.step > 3 for p in s.prompts
                    if any(x.prompt_id == p.prompt_id and x.policy_version < 3
                           for x in s.samples))
    assert sum(again.values()) == held[1]
    resumed = Counter(p.prompt_id for s in rec.steps[:k + 1] for p in s.prompts)
    assert not again - resumed
    if algorithm == "grpo":  # one round each, B per update in admission order: the same steps
        assert [[p.prompt_id for p in s.prompts] for s in rec.steps] \
            == [[p.prompt_id for p in s.prompts] for s in whole.steps[3:]]
        assert rec.steps[0].metrics["policy_lag_max"] == 0  # drawn anew on version 3


def test_a_cancelled_async_run_checkpoints_what_it_held_and_resumes_counting_it(tmp_path
                                                                                ) -> None:
    """Cancelled while the update waits for prompts: the stop's checkpoint holds what the
    producer drew since the last update too; the resume discards and counts exactly that."""
    from trainer.asyncloop import ASYNC_STATE
    from trainer.checkpoint import read_state

    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 6

    base = dict(backend="simulated", algorithm="ada-balance", batch_size=4, total_steps=8,
                save_every=0, eval_every=0, seed=1, verifier="exact", max_policy_lag=1)
    first = ListRecorder()
    stopped = train(TrainConfig(**base), prompts(), SimulatedBackend(), first, should_stop,
                    out_dir=tmp_path)
    assert stopped.status == "cancelled" and 0 < stopped.last_step < 8
    state = read_state(stopped.checkpoint)
    assert state["step"] == stopped.last_step
    held = state[ASYNC_STATE]
    assert held["version"] == stopped.last_step and held["inflight_samples"] > 0
    rec = ListRecorder()
    result = train(TrainConfig(**base), prompts(), SimulatedBackend(), rec, out_dir=tmp_path,
                   resume_from=stopped.checkpoint)
    assert result.status == "completed"
    assert [s.step for s in first.steps + rec.steps] == list(range(1, 9))
    assert rec.steps[0].metrics["samples_inflight_discarded"] == held["inflight_samples"]
    assert rec.steps[0].metrics["prompts_inflight_discarded"] == held["inflight_prompts"]
    assert all(x.policy_version >= stopped.last_step for s in rec.steps for x in s.samples)


def test_an_update_a_stop_interrupted_leaves_its_prompts_in_flight() -> None:
    """A stop inside an update (before its first optimiser step) saves the last completed
    step: the prompts that update took are held in flight, counted and admitted again."""
    config = TrainConfig(backend="simulated", algorithm="ada-balance", batch_size=3, seed=5,
                         verifier="exact", max_policy_lag=1)
    producer = Producer(config, prompts(), SimulatedBackend(), make_scorer(config), version=2)
    taken = producer.take()
    producer.overlap()  # the update's tick, then the stop: no applied()
    held = producer.sampling + producer.ready + taken
    state = producer.state_dict()
    assert state["version"] == 2 and state["inflight_prompts"] == len(held) > len(taken)
    assert state["inflight_samples"] == sum(len(f.rewards) for f in held)
    assert sorted(i for g in state["pending"] for i in g) == sorted(f.index for f in held)
    resumed = Producer(config, prompts(), SimulatedBackend(), make_scorer(config), version=2)
    resumed.load_state_dict(state)
    resumed.tick()
    first = sorted(resumed.sampling + resumed.ready, key=lambda f: f.serial)[:len(held)]
    assert [f.index for f in first] == [f.index for f in sorted(held, key=lambda f: f.serial)]
    assert all(v == 2 for f in first for v in f.versions)
    assert min(f.serial for f in first) == state["serial"]  # fresh seeds: the counters go on
    with pytest.raises(ValueError, match="version"):
        Producer(config, prompts(), SimulatedBackend(), make_scorer(config),
                 version=3).load_state_dict(state)


class SlowSimulated(SimulatedBackend):
    """The simulated backend taking its time, so that a wall-time limit falls mid-run."""

    def generate(self, *args, **kwargs):
        time.sleep(0.02)
        return super().generate(*args, **kwargs)


@pytest.mark.parametrize("k", [0, 1])
def test_the_wall_time_limit_ends_an_async_run_as_a_synchronous_one(tmp_path, k) -> None:
    from trainer.checkpoint import read_state

    config = TrainConfig(backend="simulated", algorithm="ada-balance", batch_size=4,
                         total_steps=500, save_every=0, eval_every=0, seed=1,
                         verifier="exact", max_policy_lag=k, max_wall_seconds=0.5)
    rec = ListRecorder()
    result = train(config, prompts(), SlowSimulated(), rec, out_dir=tmp_path)
    assert result.status == "time_limit" and 0 < result.last_step < 500
    assert [s.step for s in rec.steps] == list(range(1, result.last_step + 1))
    assert result.checkpoint is not None
    state = read_state(result.checkpoint)
    assert state["step"] == result.last_step and state["elapsed_seconds"] > 0.5
    assert ("async_producer" in state) == (k > 0)


class TrainedLog:
    """A toy's persistent state: the prompts its updates trained, in order."""

    def __init__(self, config: TrainConfig) -> None:
        self.trained: list[str] = []

    def state_dict(self) -> dict:
        return {"trained": list(self.trained)}

    def load_state_dict(self, state: dict) -> None:
        self.trained = list(state["trained"])


def test_the_async_hooks_are_the_algorithms_only_part(tmp_path) -> None:
    """A toy defined here alone: ready only when its group's mean reward is at least 1/2, and
    it logs what each update trained. The machinery consults its record's hooks, nothing else."""
    from trainer.algorithms import Algorithm, register_algorithm, unregister_algorithm
    from trainer.algorithms.sampling import sample_batch

    def mostly_right(config: TrainConfig, result) -> bool:
        return bool(result.rewards.mean() >= 0.5)

    def log(config: TrainConfig, state: TrainedLog, trained, result) -> None:
        state.trained.extend(p.id for p in trained)

    toy = Algorithm(name="toy-async", label="Toy: async hooks", help="toy", sampling="group",
                    sample_step=sample_batch, advantage="group",
                    max_samples_per_prompt=lambda c: c.group_size,
                    max_samples_per_step=lambda c: c.batch_size * c.group_size,
                    step_shape="batch_size x group_size", make_state=TrainedLog,
                    state_key="toy_trained", async_ready=mostly_right, async_trained=log)
    register_algorithm(toy)
    try:
        rec = sim_run(tmp_path, algorithm="toy-async", max_policy_lag=1, total_steps=4)
        from trainer.checkpoint import latest_checkpoint, read_state

        state = read_state(latest_checkpoint(tmp_path))["toy_trained"]
    finally:
        unregister_algorithm(toy.name)
    assert state["trained"] == [p.prompt_id for s in rec.steps for p in s.prompts]
    for s in rec.steps:
        assert len(s.prompts) == 4
        assert all(p.positives >= p.negatives for p in s.prompts)  # mean reward >= 1/2
    assert sum(s.metrics["prompts_filtered"] for s in rec.steps) > 0


# --- the corrections, each against its formula written out independently ------------------------

def _random_logprobs(seed: int, shape: tuple[int, int] = (5, 7)
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    prox = -torch.rand(shape, generator=g) * 3
    behav = prox + torch.randn(shape, generator=g) * 0.8
    mask = (torch.rand(shape, generator=g) > 0.2).float()
    return prox, behav, mask


@pytest.mark.parametrize("seed", range(3))
def test_tis_and_decoupled_weights_by_their_formulas(seed: int) -> None:
    prox, behav, _ = _random_logprobs(seed)
    cap = 1.5
    w, cut = tis_weights(prox, behav, cap)
    w_dec, dropped = decoupled_weights(prox, behav, cap)
    w_free, none = decoupled_weights(prox, behav, 0.0)
    for i in range(prox.shape[0]):
        for t in range(prox.shape[1]):
            ratio = math.exp(float(prox[i, t]) - float(behav[i, t]))
            assert float(w[i, t]) == pytest.approx(min(ratio, cap), rel=1e-5)
            assert bool(cut[i, t]) == (ratio >= cap * (1 - 1e-6)) or abs(ratio - cap) < 1e-5
            assert float(w_dec[i, t]) == pytest.approx(0.0 if ratio > cap else ratio, rel=1e-5)
            assert bool(dropped[i, t]) == (ratio > cap) or abs(ratio - cap) < 1e-5
            assert float(w_free[i, t]) == pytest.approx(ratio, rel=1e-5)
    assert not none.any()


@pytest.mark.parametrize("seed", range(3))
def test_vcpo_ess_lr_and_baseline_by_their_formulas(seed: int) -> None:
    prox, behav, mask = _random_logprobs(seed)
    ratios = sequence_ratios(prox, behav, mask)
    for i in range(prox.shape[0]):
        total = sum((float(prox[i, t]) - float(behav[i, t])) * float(mask[i, t])
                    for t in range(prox.shape[1]))
        assert float(ratios[i]) == pytest.approx(math.exp(total), rel=1e-4)
    w = ratios.tolist()
    ess = sum(w) ** 2 / (len(w) * sum(x * x for x in w))
    assert effective_sample_size(ratios) == pytest.approx(ess)
    assert 0 < effective_sample_size(ratios) <= 1
    assert effective_sample_size(torch.ones(6)) == pytest.approx(1.0)
    assert effective_sample_size(torch.tensor([1.0, 0, 0, 0])) == pytest.approx(0.25)
    assert ess_lr_scale(ess) == pytest.approx(math.sqrt(ess))
    assert ess_lr_scale(1.0) == 1.0
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(6, generator=g) > 0.5).float()
    grad_sq = torch.rand(6, generator=g) + 0.1
    seq = torch.rand(6, generator=g) * 2
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    b = min_variance_baseline(rewards, seq, grad_sq, groups)
    for i in range(6):
        members = [j for j in range(6) if int(groups[j]) == int(groups[i])]
        W = [float(grad_sq[j]) * float(seq[j]) ** 2 for j in members]
        expect = sum(Wj * float(rewards[j]) for Wj, j in zip(W, members, strict=True)) / sum(W)
        assert float(b[i]) == pytest.approx(expect, rel=1e-5)


def test_min_variance_baseline_minimises_the_estimators_variance() -> None:
    # Over one group, Var_b[sum_i w_i (R_i - b) g_i] (scalar g_i) is least at the closed form.
    g = torch.Generator().manual_seed(5)
    R, w, gi = torch.rand(8, generator=g), torch.rand(8, generator=g) * 2, torch.randn(
        8, generator=g)
    b_star = float(min_variance_baseline(R, w, gi ** 2, torch.zeros(8, dtype=torch.long))[0])

    def second_moment(b: float) -> float:
        return float(((w * (R - b) * gi) ** 2).sum())

    assert second_moment(b_star) <= min(second_moment(b_star + d) for d in (-0.1, 0.1, 0.3))


@pytest.mark.slow
def test_vcpo_batch_swaps_each_groups_baseline_for_the_minimum_variance_one() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.update import UpdateBatch, score_grad_sq_norms, vcpo_batch

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, pad_token_id=0)).eval()
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    groups = [0, 0, 0, 1, 1, 1]
    # GRPO's advantages for group 0 (scale 1/(std + eps)); group 1 has no signal.
    mean0, std0 = 1 / 3, float(np.std([1.0, 0.0, 0.0]))
    adv = [(r - mean0) / (std0 + 1e-6) for r in rewards[:3]] + [0.0] * 3
    batch = UpdateBatch(prompt_ids=[[3, 4]] * 3 + [[5, 6, 7]] * 3,
                        response_ids=[[8, 9], [10], [11, 12, 2], [13, 2], [14], [9, 9, 2]],
                        advantages=adv, groups=groups, old_logprobs=[None] * 6,
                        rewards=rewards)
    ratios = {0: 0.5, 1: 1.5, 2: 1.0, 3: 1.0, 4: 2.0, 5: 0.7}
    out, shift = vcpo_batch(model, batch, ratios, 0, 1.0)
    sq = score_grad_sq_norms(model, batch, 0, 1.0)
    assert out.advantages[3:] == [0.0, 0.0, 0.0]
    # The algorithm's scale stays: differences of advantages within a group are unchanged.
    assert out.advantages[0] - out.advantages[1] == pytest.approx(adv[0] - adv[1])
    assert out.advantages[1] == pytest.approx(out.advantages[2])
    # The baseline zeroes the W-weighted advantages, W_i = ||grad log pi(y_i)||^2 w_i^2.
    W = [sq[i] * ratios[i] ** 2 for i in range(3)]
    assert sum(W[i] * out.advantages[i] for i in range(3)) == pytest.approx(0.0, abs=1e-6)
    assert shift > 0


# --- the tiny model ----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("correction", ["tis", "vcpo"])
def test_tiny_model_trains_with_lag_one(builtin_model: Path, tmp_path: Path,
                                        correction: str) -> None:
    from trainer.backends import make_backend
    from trainer.tasks import arithmetic_prompts

    config = TrainConfig(backend="hf", device="cpu", algorithm="grpo", batch_size=4,
                         total_steps=3, save_every=0, eval_every=0, max_new_tokens=8,
                         max_policy_lag=1, tis_cap=2.0, off_policy_correction=correction)
    data = arithmetic_prompts(16, 1, 2, seed=0)
    backend = make_backend(config, data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    before = [p.detach().clone() for p in backend.model.parameters()]
    try:
        rec = ListRecorder()
        result = train(config, data, backend, rec, None, out_dir=tmp_path)
    finally:
        torch.set_num_threads(threads)
        backend.close()
    assert result.status == "completed"
    steps = rec.steps
    assert [s.metrics["policy_lag_max"] for s in steps] == [0, 1, 1]
    for s in steps:
        assert 0 < s.metrics["ess"] <= 1 and 0 <= s.metrics["is_truncated_frac"] <= 1
        assert math.isfinite(s.metrics["policy_loss"]) and s.metrics["optimizer_steps"] >= 1
        assert ("baseline_shift" in s.metrics) == (correction == "vcpo")
        if correction == "tis":
            assert s.metrics["lr_applied"] == pytest.approx(s.metrics["lr"])
        else:
            assert s.metrics["lr_applied"] == pytest.approx(
                s.metrics["lr"] * math.sqrt(s.metrics["ess"]), rel=0.2)
    # Stale samples: the second step's ESS is measured against weights one update newer.
    assert steps[0].metrics["ess"] == pytest.approx(1.0, abs=1e-3)
    after = list(backend.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_async_configs_are_checked_across_fields() -> None:
    # vLLM runs asynchronously in one process (its engine thread) and across split ranks (the
    # rollout ranks generate while the train ranks update); colocated ranks cannot.
    assert {e.field for e in TrainConfig(max_policy_lag=1, backend="vllm",
                                         tis_cap=2.0).errors()} == set()
    errors = TrainConfig(max_policy_lag=1, backend="vllm", tis_cap=2.0, world_size=2).errors()
    assert [e.field for e in errors] == ["max_policy_lag"]
    assert "world_size 2" in errors[0].reason and "colocated ranks" in errors[0].reason
    assert "set rollout_ranks >= 1" in errors[0].reason
    assert not TrainConfig(max_policy_lag=1, backend="vllm", tis_cap=2.0, world_size=2,
                           rollout_ranks=1).errors()
    assert {e.field for e in TrainConfig(max_policy_lag=1, backend="hf").errors()} \
        == {"tis_cap"}
    assert not TrainConfig(max_policy_lag=1, backend="hf", tis_cap=2.0).errors()
    assert not TrainConfig(max_policy_lag=1, backend="hf",
                           off_policy_correction="decoupled").errors()
    assert {e.field for e in TrainConfig(max_policy_lag=9).errors()} == {"max_policy_lag"}
    assert {e.field for e in TrainConfig(off_policy_correction="x").errors()} \
        == {"off_policy_correction"}
    assert dataclasses.fields(TrainConfig)  # the fields exist on the one config dataclass
    assert get_algorithm("dapo").async_ready is not get_algorithm("grpo").async_ready
