"""``simulate-time --max-policy-lag``: the asynchronous step-time simulator (trainer/asynctime.py,
issue 29 item 6): k = 0 colocated is the synchronous simulator exactly, the lag bound holds on
every trained sample, k = 0 on a split is synchronous, a lag lets generation overlap the update,
and bad flags are refused naming the flag."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.asynctime import AsyncSim, Split, lag_study, parse_splits
from trainer.cli import main
from trainer.clustertime import ClusterModel
from trainer.steptime import simulate_step_time

RATES = np.random.default_rng(11).beta(0.5, 0.5, 24).tolist()
SMALL = dict(max_tokens=192)


def test_lag_zero_colocated_is_the_synchronous_simulator_exactly(capsys) -> None:
    """The colocated rows at k = 0 are today's step, to the last bit, through the study and
    through the CLI."""
    algorithms = ("grpo", "dapo", "ada-pos", "ada-balance", "ada-est")
    results = lag_study(RATES, algorithms=algorithms, lags=[0, 1], splits=[Split(0, 0)],
                        steps=1, progress=False, cluster=ClusterModel(gpus=4), **SMALL)
    assert [(r.algorithm, r.max_policy_lag) for r in results] == [(a, 0) for a in algorithms]
    for r in results:
        sync = simulate_step_time(r.algorithm, "round", RATES, steps=1,
                                  cluster=ClusterModel(gpus=4), **SMALL)
        assert r.step_s == sync.step_s and r.sync_step_s == sync.step_s
        assert r.trained_per_s == sync.kept_samples / sync.step_s
        assert 0 < r.engine_idle < 1 and 0 < r.trainer_idle < 1
    args = ["simulate-time", "--batch-size", "16", "--max-tokens", "128", "--steps", "1",
            "--no-progress", "--gpus", "4", "--json", "--algorithms", "grpo,ada-balance"]
    assert main([*args, "--schedulers", "round"]) == 0
    plain = {r["algorithm"]: r["step_s"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert main([*args, "--max-policy-lag", "0", "--split", "colocated"]) == 0
    lagged = json.loads(capsys.readouterr().out)["results"]
    assert {r["algorithm"]: r["step_s"] for r in lagged} == plain


@pytest.mark.parametrize("algorithm", ["grpo", "dapo", "ada-balance", "ada-est"])
def test_every_trained_sample_is_within_the_bound(algorithm: str) -> None:
    for lag in (0, 1, 2):
        sim = AsyncSim(algorithm, RATES, lag=lag, split=Split(3, 1), updates=lag + 4,
                       **SMALL)
        updates = sim.run()
        assert len(updates) == lag + 4
        for u, update in enumerate(updates):
            assert update.lags and max(update.lags) <= lag and min(update.lags) >= 0
            assert update.start >= (updates[u - 1].end if u else 0.0)
        if algorithm != "ada-est":  # Est trains every sample it allocated
            assert all(u.kept == 24 * 4 for u in updates)   # B groups of n
        result = sim.result(lag + 1)
        assert 0 <= result.mean_lag <= result.max_lag <= lag
        assert 0 <= result.engine_idle <= 1 and 0 <= result.trainer_idle <= 1


def test_lag_zero_on_a_split_is_synchronous_and_a_lag_overlaps() -> None:
    """k = 0: no response comes back while an update runs, and every sample is of the update's
    own version. k = 1: the engines generate through the updates and the steps shorten."""
    sync = AsyncSim("grpo", RATES, lag=0, split=Split(2, 2), updates=4, **SMALL)
    updates = sync.run()
    assert all(lag == 0 for u in updates for lag in u.lags)
    assert not any(u.start < t < u.end for u in updates for t in sync.completions)
    overlapped = AsyncSim("grpo", RATES, lag=1, split=Split(2, 2), updates=5, **SMALL)
    overlapped.run()
    assert any(u.start < t < u.end for u in overlapped.updates for t in overlapped.completions)
    assert overlapped.result(2).step_s < sync.result(1).step_s


def test_dapo_refills_groups_without_signal_asynchronously() -> None:
    rates = [0.0] * 8 + [1.0] * 8 + [0.5] * 8    # two thirds never carry signal
    sim = AsyncSim("dapo", rates, lag=1, split=Split(2, 2), updates=4, **SMALL)
    sim.run()
    result = sim.result(2)
    assert result.filtered > 0 and all(u.kept == 24 * 4 for u in sim.updates)


def test_lag_study_reports_every_split_and_lag_but_colocated_only_synchronous(capsys) -> None:
    assert main(["simulate-time", "--batch-size", "16", "--max-tokens", "128", "--steps", "2",
                 "--no-progress", "--gpus", "4", "--algorithms", "ada-pos",
                 "--max-policy-lag", "0,1", "--split", "colocated,3+1,2+2"]) == 0
    out = capsys.readouterr().out
    assert "| algorithm | split (rollout + train GPUs) | max_policy_lag |" in out
    for row in ("| grpo | colocated | 0 |", "| ada-pos | 3+1 | 1 |", "| ada-pos | 2+2 | 0 |"):
        assert row in out
    assert "| ada-pos | colocated | 1 |" not in out   # needs GPUs of its own
    assert "engine idle" in out and "mean lag" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--max-policy-lag", "x"], "error: max-policy-lag: expected whole numbers"),
    (["--max-policy-lag", "9"], "error: max-policy-lag: each lag must be within [0, 8]"),
    (["--max-policy-lag", "1", "--split", "3+2"], "error: split: 3+2: needs R >= 1 and T >= 1"),
    (["--max-policy-lag", "1", "--split", "half"], "error: split: expected colocated or R+T"),
    (["--split", "2+2"], "error: split: goes with --max-policy-lag"),
    (["--max-policy-lag", "1", "--preset", "paper"],
     "error: max-policy-lag: models the platform's own loop"),
    (["--max-policy-lag", "1", "--nodes", "2"], "error: max-policy-lag: splits GPUs of one"),
])
def test_lag_flags_name_bad_input(capsys, extra: list[str], message: str) -> None:
    assert main(["simulate-time", "--batch-size", "8", "--max-tokens", "64", "--gpus", "4",
                 "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err


def test_default_splits_follow_the_gpus() -> None:
    from trainer.asynctime import default_splits

    assert default_splits(8) == "colocated,6+2,4+4"
    assert [s.label for s in parse_splits(default_splits(4), 4)] == ["colocated", "3+1", "2+2"]
    assert default_splits(1) == "colocated"
