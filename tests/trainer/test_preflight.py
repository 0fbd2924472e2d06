"""The launch preflight's pure parts: sampling pass rates from a backend, predictions through the
simulator, warnings."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from trainer import preflight
from trainer.algorithms import algorithms, get_algorithm
from trainer.backends.simulated import SimulatedBackend
from trainer.cli import simulate
from trainer.config import TrainConfig
from trainer.loop import make_scorer
from trainer.types import Prompt

SHAPE = {"batch_size": 32, "group_size": 4, "samples_per_round": 8, "max_rounds": 4}


def _prompts(rates: list[float]) -> list[Prompt]:
    return [Prompt(id=str(i), text=f"{i}+1=", answer=str(i + 1), metadata={"pass_rate": r})
            for i, r in enumerate(rates)]


def test_sample_pass_rates_measures_the_true_rates_and_reports_progress() -> None:
    rates = [0.0, 1.0, 0.25, 0.5, 0.75] * 4
    config = TrainConfig(backend="simulated", verifier="exact")
    progress: list[int] = []
    sample = preflight.sample_pass_rates(
        SimulatedBackend(config), _prompts(rates), 400, make_scorer(config), seed=1,
        chunk_size=3, on_progress=lambda done, s: progress.append(done))
    assert progress == [3, 6, 9, 12, 15, 18, 20]
    assert sample.prompt_ids == [str(i) for i in range(20)] and sample.samples == 8000
    measured = preflight.pass_rates(sample.rewards)
    assert measured[:2] == [0.0, 1.0]
    assert np.allclose(measured, rates, atol=0.1)
    assert sample.errors == [0] * 20 and not sample.cancelled
    # Seeded: the same call draws the same rewards.
    again = preflight.sample_pass_rates(SimulatedBackend(config), _prompts(rates), 400,
                                        make_scorer(config), seed=1, chunk_size=3)
    assert again.rewards == sample.rewards


def test_sample_pass_rates_stops_between_chunks() -> None:
    config = TrainConfig(backend="simulated", verifier="exact")
    polls = iter([False, False, True])
    sample = preflight.sample_pass_rates(SimulatedBackend(config), _prompts([0.5] * 10), 4,
                                         make_scorer(config), seed=0, chunk_size=3,
                                         should_stop=lambda: next(polls))
    assert sample.cancelled and len(sample.rewards) == 6


RATES_40 = list(np.random.default_rng(3).random(40))


@functools.cache
def predicted_40() -> dict[tuple[str, int], dict[str, Any]]:
    """The predictions for 40 prompts of uniform pass rates (two tests read them: made once)."""
    return {(r["algorithm"], r["group_size"]): r
            for r in preflight.predict(RATES_40, seconds_per_sample=0.01, **SHAPE)}


def test_predictions_are_the_simulators_figures() -> None:
    rates = RATES_40
    rows = predicted_40()
    # Every registered algorithm at the run's n, and at the sizes its record names.
    assert set(rows) == {(a.name, n) for a in algorithms()
                         for n in {SHAPE["group_size"], *a.preflight_group_sizes}}
    # Est spends exactly B x budget_per_prompt (8 by default: GRPO n=8's budget).
    assert rows["ada-est", 4]["samples_per_step"] == rows["grpo", 8]["samples_per_step"] == 256
    assert rows["ada-est", 4]["error"] is None and rows["ada-est", 4]["unresolved_frac"] == 0
    for n in (4, 8, 16):  # GRPO spends exactly B x n, whatever the pass rates
        assert rows["grpo", n]["samples_per_step"] == 32 * n
        assert rows["grpo", n]["multiple_of_grpo"] == n / 4
        assert rows["grpo", n]["unresolved_frac"] == 0.0
    balance = rows["ada-balance", 4]
    # The same code as `python -m trainer simulate`, averaged over seeds.
    direct = [simulate("ada-balance", rates, seed=s)["total_samples"] for s in range(200)]
    assert balance["samples_per_step"] == pytest.approx(32 * np.mean(direct) / 40, rel=0.05)
    assert balance["step_seconds"] == pytest.approx(balance["samples_per_step"] * 0.01)
    assert balance["unresolved_frac"] == pytest.approx(
        balance["missing_pos_frac"] + balance["missing_neg_frac"])
    # More samples for more signal: the ordering the paper reports.
    assert rows["grpo", 4]["zero_adv_frac"] > rows["ada-pos", 4]["zero_adv_frac"]
    assert rows["grpo", 4]["zero_adv_frac"] > balance["zero_adv_frac"]
    assert rows["grpo", 4]["samples_per_step"] < rows["ada-pos", 4]["samples_per_step"]
    # DAPO: B x n at least, more batches while fewer than B groups carry signal.
    dapo = rows["dapo", 4]
    assert dapo["error"] is None and dapo["unresolved_frac"] == 0
    assert 32 * 4 < dapo["samples_per_step"] <= 32 * 4 * 10
    # Its groups without signal are discarded, not kept: the kept ones all carry signal. What
    # it keeps is B groups of n (the rest of what it drew, discarded, is at least about GRPO's
    # share of zero-advantage groups).
    assert dapo["zero_adv_frac"] == 0.0
    assert dapo["samples_per_step"] * (1 - dapo["discarded_frac"]) == pytest.approx(32 * 4)
    assert dapo["discarded_frac"] >= rows["grpo", 4]["zero_adv_frac"] - 0.1
    # Only an algorithm that drops groups it drew (DAPO's batches) discards any, and GVM-RAFT,
    # whose prompts that accept nothing in its first stage get no second stage to train on.
    assert all(r["discarded_frac"] == 0.0 for k, r in rows.items()
               if not get_algorithm(k[0]).draws_batches and k[0] != "gvm-raft")
    # How sure: a fixed budget (GRPO's B x n, Est's B x budget_per_prompt) is exact; what
    # depends on the prompts has its interval over them around the figure, within its maximum.
    for key in (("grpo", 4), ("grpo", 8), ("grpo", 16), ("ada-est", 4)):
        assert rows[key]["spend_fixed"], key
        assert rows[key]["samples_per_step_low"] == rows[key]["samples_per_step_high"] == (
            rows[key]["samples_per_step"])
    for algorithm, most in (("ada-pos", 32 * 32), ("ada-balance", 32 * 32),
                            ("dapo", 32 * 4 * 10)):
        row = rows[algorithm, 4]
        assert not row["spend_fixed"], algorithm
        assert row["samples_per_step_low"] < row["samples_per_step"] < (
            row["samples_per_step_high"]) <= most, algorithm


def test_never_solved_prompts_predict_no_signal_and_warn() -> None:
    rows = {r["algorithm"]: r for r in preflight.predict([0.0] * 16, **SHAPE)
            if r["group_size"] == 4}
    assert rows["ada-pos"]["unresolved_frac"] == rows["ada-pos"]["missing_pos_frac"] == 1.0
    assert rows["ada-pos"]["samples_per_step"] == 32 * 32  # every prompt draws M x N
    # A large M x N is simulated with fewer draws (bounded work), the same figures.
    large = {r["algorithm"]: r for r in preflight.predict(
        [0.0] * 16, batch_size=32, group_size=4, samples_per_round=256, max_rounds=64)}
    assert large["ada-balance"]["samples_per_prompt"] == 256 * 64
    assert large["ada-balance"]["unresolved_frac"] == 1.0
    assert all(r["zero_adv_frac"] == 1.0 for a, r in rows.items()
               if not get_algorithm(a).draws_batches)
    # DAPO keeps no group without signal: it discards every group it drew.
    assert rows["dapo"]["zero_adv_frac"] is None and rows["dapo"]["discarded_frac"] == 1.0
    # DAPO draws max_num_gen_batches = 10 batches of n = 4 per prompt and finds no signal.
    assert rows["dapo"]["samples_per_step"] == 32 * 4 * 10
    warnings = preflight.preflight_warnings([[0.0] * 16] * 10, [0] * 10)
    assert len(warnings) == 1 and "no signal" in warnings[0] and "10 were never solved" in (
        warnings[0])
    # 9 of 10 prompts never or always solved is still no signal; 8 of 10 is not.
    mixed = [[0.0] * 16] * 5 + [[1.0] * 16] * 4 + [[0.0, 1.0] * 8]
    assert preflight.preflight_warnings(mixed, [0] * 10)
    assert not preflight.preflight_warnings(mixed[:8] + [[0.0, 1.0] * 8] * 2, [0] * 10)


def test_verifier_errors_warn_from_ten_percent() -> None:
    rewards = [[0.0, 1.0] * 5] * 10  # 100 responses
    assert not preflight.preflight_warnings(rewards, [0] * 9 + [9])
    warning = preflight.preflight_warnings(rewards, [1] * 10)
    assert len(warning) == 1 and "10 of 100 responses" in warning[0]


def test_an_algorithm_the_simulator_rejects_is_reported_not_raised() -> None:
    # What a new algorithm looks like before its simulator support lands: listed, not predicted.
    import dataclasses

    from trainer.algorithms import GRPO, register_algorithm, unregister_algorithm

    def unsupported(ctx: object) -> None:
        raise ValueError("future-algo: the simulated backend cannot sample it yet")

    register_algorithm(dataclasses.replace(GRPO, name="future-algo", label="Future",
                                           sample_step=unsupported, baseline=False,
                                           preflight_group_sizes=(), label_shows_group_size=False))
    try:
        rows = preflight.predict([0.5] * 8, **SHAPE)
    finally:
        unregister_algorithm("future-algo")
    future = [r for r in rows if r["algorithm"] == "future-algo"]
    assert len(future) == 1 and future[0]["error"]
    assert all(r["error"] is None for r in rows if r["algorithm"] != "future-algo")


def test_choose_prompts_is_a_seeded_subset() -> None:
    chosen = preflight.choose_prompts(100, 10, seed=4)
    assert len(set(chosen)) == 10 and all(0 <= i < 100 for i in chosen)
    assert chosen == preflight.choose_prompts(100, 10, seed=4) != preflight.choose_prompts(
        100, 10, seed=5)
    assert preflight.choose_prompts(5, 10, seed=0) == [0, 1, 2, 3, 4]


def test_the_spend_interval_is_a_bootstrap_over_the_prompts() -> None:
    # Half the prompts cost 8 samples, half 32: a resample's mean is 8 + 24 x (share of the
    # costly ones), whose spread over resamples of 64 prompts is about 12 / sqrt(64) = 1.5.
    costs = [8.0] * 32 + [32.0] * 32
    low, high = preflight.spend_interval(costs, [1] * 64, seed=3)
    assert low < 20 < high
    assert (low, high) == pytest.approx((20 - 1.96 * 1.5, 20 + 1.96 * 1.5), abs=0.5)
    assert preflight.spend_interval(costs, [1] * 64, seed=3) == (low, high)  # seeded
    spread = list(np.linspace(4, 36, 64))  # costs all different: each seed its own resamples
    assert preflight.spend_interval(spread, [1] * 64, seed=3) != (
        preflight.spend_interval(spread, [1] * 64, seed=4))
    # Fewer prompts of the same mix: a wider interval (about twice as wide for a quarter).
    few = preflight.spend_interval(costs[::4], [1] * 16, seed=3)
    assert few[1] - few[0] > 1.6 * (high - low)
    # Per group kept: a prompt whose groups were never kept costs, alone, infinitely much.
    assert preflight.spend_interval([4.0, 4.0], [1, 0], seed=0)[1] == float("inf")
    assert preflight.spend_interval([], [], seed=0) is None


def test_samples_per_step_comes_with_its_interval_over_the_sampled_prompts() -> None:
    # Prompts always or never solved: Seq-pos spends 8 (one round) or 32 (four) on each, so a
    # resample of 16 spends 32 x (8 + 24 X / 16) per step, X ~ Binomial(16, 1/2) the never
    # solved ones drawn; its 2.5% and 97.5% points are X = 4 and X = 12 (to a resample or so).
    def predict(rates: list[float]) -> dict[tuple[str, int], dict[str, Any]]:
        return {(r["algorithm"], r["group_size"]): r
                for r in preflight.predict(rates, draws=64, **SHAPE)}

    two = predict([0.0, 1.0] * 8)
    pos = two["ada-pos", 4]
    assert pos["samples_per_step"] == 32 * 20 and not pos["spend_fixed"]
    assert 32 * (8 + 24 * 4 / 16) <= pos["samples_per_step_low"] <= 32 * (8 + 24 * 5 / 16)
    assert 32 * (8 + 24 * 11 / 16) <= pos["samples_per_step_high"] <= 32 * (8 + 24 * 12 / 16)
    # Seq-balance spends all 4 rounds on both kinds (no negatives, or no positives): exact.
    assert two["ada-balance", 4]["spend_fixed"]
    assert predict([0.0, 1.0] * 8) == two  # deterministic
    # A quarter of the prompts (the same spread of pass rates): wider, for every row whose spend
    # depends on the prompts. (The rows of 40 prompts: test_predictions_are_the_simulators_...)
    many, few = predicted_40(), predict(RATES_40[::4])
    for algorithm in ("ada-pos", "ada-balance", "dapo"):
        wide, narrow = few[algorithm, 4], many[algorithm, 4]
        assert (wide["samples_per_step_high"] - wide["samples_per_step_low"]
                > narrow["samples_per_step_high"] - narrow["samples_per_step_low"]), algorithm


def test_async_prediction_is_the_lag_studys_rows_for_the_chosen_lag() -> None:
    """An async config's preflight: the synchronous colocated step, the split at k = 0 and the
    split at the chosen k, each the lag study's own figures (the same study as the command it
    prints), the chosen lag's samples at most k versions old."""
    from trainer.asynctime import Split, lag_study
    from trainer.clustertime import MODELS, ClusterModel

    rng = np.random.default_rng(7)
    measured = rng.uniform(0.05, 0.95, size=int(rng.integers(5, 12))).tolist()
    lag = int(rng.integers(1, 3))
    shape = {**SHAPE, "batch_size": 12}
    out = preflight.predict_async(measured, algorithm="grpo", max_policy_lag=lag,
                                  max_tokens=512, world_size=4, seed=3, **shape)
    assert out["error"] is None and (out["split"], out["gpus"]) == ("3+1", 4)
    assert [(r["split"], r["max_policy_lag"]) for r in out["rows"]] == [
        ("colocated", 0), ("3+1", 0), ("3+1", lag)]
    batch = [measured[i % len(measured)] for i in range(12)]
    want = lag_study(batch, algorithms=["grpo"], lags=[0, lag], splits=[Split(0, 0), Split(3, 1)],
                     steps=preflight.ASYNC_MEASURED_UPDATES, progress=False, group_size=4,
                     samples_per_round=8, max_rounds=4, max_tokens=512, seed=3,
                     cluster=ClusterModel(gpus=4), model=MODELS["1.5b"])
    for row, r in zip(out["rows"], want, strict=True):
        assert row["step_s"] == pytest.approx(r.step_s) and row["step_s"] > 0
        assert (row["engine_idle"], row["trainer_idle"]) == (r.engine_idle, r.trainer_idle)
        assert 0 <= row["engine_idle"] <= 1 and 0 <= row["trainer_idle"] <= 1
    assert out["rows"][0]["ratio_to_sync"] == 1.0
    assert out["rows"][1]["mean_lag"] == 0 and 0 < out["rows"][2]["mean_lag"] <= lag
    assert f"--max-policy-lag 0,{lag} --split colocated,3+1 --gpus 4" in out["command"]
    # A run that sets its split (rollout_ranks) is predicted on it, not on async_split's.
    own = preflight.predict_async(measured, algorithm="grpo", max_policy_lag=lag,
                                  max_tokens=512, world_size=4, rollout_ranks=2, seed=3, **shape)
    assert own["error"] is None and (own["split"], own["gpus"]) == ("2+2", 4)
    assert [(r["split"], r["max_policy_lag"]) for r in own["rows"]] == [
        ("colocated", 0), ("2+2", 0), ("2+2", lag)]
    want = lag_study(batch, algorithms=["grpo"], lags=[0, lag], splits=[Split(0, 0), Split(2, 2)],
                     steps=preflight.ASYNC_MEASURED_UPDATES, progress=False, group_size=4,
                     samples_per_round=8, max_rounds=4, max_tokens=512, seed=3,
                     cluster=ClusterModel(gpus=4), model=MODELS["1.5b"])
    assert [row["step_s"] for row in own["rows"]] == pytest.approx([r.step_s for r in want])
    assert "--split colocated,2+2 --gpus 4" in own["command"]
    # One GPU still predicts the scheme on the smallest split; a 7B's name picks its shape.
    assert preflight.async_split(1).label == "1+1" and preflight.async_split(8).label == "6+2"
    assert preflight.async_model("Qwen/Qwen2.5-Math-7B") == "7b"
    assert preflight.async_model("sshleifer/tiny-gpt2") == "1.5b"
    # Not predicted, with the reason: a synchronous config, a batch past the panel's bound.
    assert preflight.predict_async(measured, algorithm="grpo", max_policy_lag=0,
                                   max_tokens=512, **shape)["error"].startswith("synchronous")
    big = preflight.predict_async(measured, algorithm="grpo", max_policy_lag=1, max_tokens=512,
                                  **{**shape, "batch_size": preflight.ASYNC_MAX_BATCH + 1})
    assert not big["rows"] and "batch_size" in big["error"]
