"""One budget for everyone (issue 31): each algorithm's ``match_budget`` puts it at b responses
per prompt of a step's batch, and the preflight predicts what each spends there. Pure
functions and the simulator; no backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from trainer.algorithms import GRPO, Algorithm, algorithms, register_algorithm, unregister_algorithm
from trainer.budget import budget_overrides, budget_refusal, check_budget, matched_config
from trainer.config import ConfigError, TrainConfig
from trainer.preflight import predict_at_budget

B = 4


def at_budget(name: str, budget: int, **base: object) -> TrainConfig:
    """The config ``name`` runs at ``budget``, validated as a launch would."""
    return TrainConfig.from_dict(matched_config({"algorithm": name, "batch_size": B, **base},
                                                budget))


@pytest.mark.parametrize("budget", [4, 8, 12, 16, 24, 64])
def test_every_built_in_algorithm_draws_the_budget(budget: int) -> None:
    """Exactly B x b for the exact ones; at most B x b, as close as M x N can come, for the
    capped ones (Seq); b per prompt of each generation batch for DAPO."""
    for record in algorithms():
        cfg = at_budget(record.name, budget)
        per_batch = B * budget
        if record.budget_match == "exact":
            assert cfg.max_samples_per_step == per_batch, record.name
        elif record.budget_match == "cap":
            # Seq: M x N <= b, with n <= M <= the base M; here b is a multiple of a usable M.
            # DPPO: n = b for every prompt its history does not prune.
            assert cfg.max_samples_per_step == per_batch, record.name
            if record.sampling == "rounds":
                assert cfg.group_size <= cfg.samples_per_round <= 8, record.name
        else:
            assert record.budget_match == "batch", record.name
            assert cfg.max_samples_per_step == per_batch * cfg.max_num_gen_batches, record.name
        # The keys set are the algorithm's own: the base's n stays unless n is the budget.
        assert cfg.group_size in (4, budget), record.name


def test_the_keys_each_algorithm_sets() -> None:
    assert budget_overrides({"algorithm": "grpo"}, 16) == {"group_size": 16}
    assert budget_overrides({"algorithm": "vade"}, 16) == {"group_size": 16}
    assert budget_overrides({"algorithm": "dapo"}, 16) == {"group_size": 16}
    assert budget_overrides({"algorithm": "pods"}, 16) == {"pods_rollouts": 16}
    assert budget_overrides({"algorithm": "dppo"}, 16) == {"group_size": 16}
    # GVM-RAFT: both stages; the first keeps its 8 while it leaves the second something, else
    # takes half; the one-prompt cap rises to the second stage's mean where it is below it.
    assert budget_overrides({"algorithm": "gvm-raft"}, 16) == {"gvm_budget": 16,
                                                               "gvm_stage1": 8}
    assert budget_overrides({"algorithm": "gvm-raft"}, 5) == {"gvm_budget": 5, "gvm_stage1": 2}
    assert budget_overrides({"algorithm": "gvm-raft"}, 64) == {
        "gvm_budget": 64, "gvm_stage1": 8, "gvm_max_samples": 56}
    assert budget_overrides({"algorithm": "ada-est"}, 16) == {"budget_per_prompt": 16}
    # Est's [N_min, N_max] must hold the budget: its near end moves to it.
    assert budget_overrides({"algorithm": "ada-est"}, 64) == {"budget_per_prompt": 64,
                                                              "est_max_samples": 64}
    assert budget_overrides({"algorithm": "ada-est", "est_min_samples": 4}, 3) == {
        "budget_per_prompt": 3, "est_min_samples": 3}
    assert budget_overrides({"algorithm": "ada-balance"}, 16) == {"samples_per_round": 8,
                                                                   "max_rounds": 2}
    # Without a divisor in [n, M], the cap closest to the budget: 13 at n=4, M=8 is 6 x 2.
    assert budget_overrides({"algorithm": "ada-pos"}, 13) == {"samples_per_round": 6,
                                                               "max_rounds": 2}
    # The base's M bounds M from above, n from below.
    assert budget_overrides({"algorithm": "ada-pos", "samples_per_round": 4}, 16) == {
        "samples_per_round": 4, "max_rounds": 4}
    # The default algorithm when the config names none.
    assert budget_overrides({}, 8) == budget_overrides({"algorithm": TrainConfig().algorithm}, 8)


def test_seq_cap_on_random_shapes() -> None:
    """M x N is the largest cap under the budget any M in [n, base M] gives."""
    rng = np.random.default_rng(31)
    for _ in range(200):
        n = int(rng.integers(2, 9))
        m_base = int(rng.integers(n, 33))
        budget = int(rng.integers(n, 200))
        keys = budget_overrides({"algorithm": "ada-balance", "group_size": n,
                                 "samples_per_round": m_base}, budget)
        m, rounds = keys["samples_per_round"], keys["max_rounds"]
        assert n <= m <= max(n, min(m_base, budget)) and rounds == budget // m
        best = max(d * (budget // d) for d in range(n, max(n, min(m_base, budget)) + 1))
        assert m * rounds == best <= budget


@pytest.mark.parametrize("name, budget, base, words", [
    ("ada-balance", 3, {}, "3 is below group_size (4)"),
    ("pods", 2, {}, "the budget must be >= 4"),
    ("grpo", 0, {}, "must be within [1, 32,767]"),
    ("grpo", 40_000, {}, "must be within [1, 32,767]"),
    ("grpo", "16", {}, "expected a whole number"),
    ("grpo", True, {}, "expected a whole number"),
])
def test_a_budget_an_algorithm_cannot_take_names_the_budget(
        name: str, budget: object, base: dict, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        budget_overrides({"algorithm": name, **base}, budget)
    assert info.value.field == "budget" and words in info.value.reason


@pytest.fixture
def no_budget() -> Iterator[Algorithm]:
    """An algorithm whose record has no ``match_budget`` (a deployment's own may have none)."""
    record = dataclasses.replace(GRPO, name="toy-unmatched", label="Toy", baseline=False,
                                 match_budget=None, budget_match="",
                                 budget_note="its sample count is chosen per step by the "
                                             "variance bound")
    register_algorithm(record)
    yield record
    unregister_algorithm(record.name)


def test_an_algorithm_without_match_budget_is_refused_by_name(no_budget: Algorithm) -> None:
    assert budget_refusal("grpo") is None
    refusal = budget_refusal(no_budget.name)
    assert refusal == ("toy-unmatched (Toy) cannot be run at a matched budget: its sample "
                       "count is chosen per step by the variance bound")
    with pytest.raises(ConfigError) as info:
        budget_overrides({"algorithm": no_budget.name}, 8)
    assert info.value.field == "budget" and info.value.reason == refusal
    # The preflight keeps its row, saying why.
    rows = {r["algorithm"]: r for r in predict_at_budget([0.5] * 4, budget=8, batch_size=4,
                                                         draws=4)}
    assert rows[no_budget.name]["error"] == refusal


def test_a_budget_match_must_be_named() -> None:
    with pytest.raises(ValueError, match="budget_match must be one of exact, cap, batch"):
        dataclasses.replace(GRPO, name="toy-bad", budget_match="roughly")


def test_check_budget_takes_whole_numbers() -> None:
    assert check_budget(16) == 16


def test_preflight_predicts_every_algorithm_at_the_budget() -> None:
    """The preflight's rows at budget 16: the exact ones spend B x 16 every step; Seq at most
    that, less where prompts resolve early; DAPO at least that, more where groups lack signal
    (here a quarter of the prompts are never or always solved)."""
    rates = [0.0, 0.1, 0.3, 0.5, 0.6, 0.8, 0.95, 1.0]
    rows = predict_at_budget(rates, budget=16, batch_size=B, draws=16, seed=3)
    assert [r["algorithm"] for r in rows] == [a.name for a in algorithms()]
    for row in rows:
        record = next(a for a in algorithms() if a.name == row["algorithm"])
        assert row["error"] is None, row
        assert row["budget"] == 16 and row["budget_match"] == record.budget_match
        assert row["matched"] == budget_overrides({"algorithm": record.name}, 16)
        spent = row["samples_per_step"]
        assert row["multiple_of_grpo"] == pytest.approx(spent / (B * 16))
        if record.budget_match == "exact":
            assert spent == B * 16 and row["spend_fixed"], record.name
            assert row["max_samples_per_step"] == B * 16
        elif record.budget_match == "cap":
            assert row["max_samples_per_step"] == B * 16
            assert spent < B * 16, record.name  # the always-solved prompts stop at round 1
            assert row["samples_per_step_low"] <= spent <= row["samples_per_step_high"]
        else:
            assert B * 16 < spent <= row["max_samples_per_step"], record.name
