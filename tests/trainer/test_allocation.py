"""Reinforce-Ada-Est's estimator and allocation (trainer/allocation.py) on hand-made vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.algorithms.est import EST_WEIGHTS
from trainer.allocation import (
    ALLOCATION_WEIGHTS,
    PassRateEstimator,
    allocate,
    allocation_scale,
    pass_rate_estimate,
    plan_allocation,
)
from trainer.config import TrainConfig

# --- the estimator ------------------------------------------------------------------------------


def test_estimate_is_the_beta_posterior_mean() -> None:
    # (pos + alpha) / (total + alpha + beta)
    assert pass_rate_estimate(np.array([0.0]), np.array([0.0]), 1.0, 16.0)[0] == 1 / 17
    assert pass_rate_estimate(np.array([3.0]), np.array([8.0]), 1.0, 16.0)[0] == 4 / 25
    assert pass_rate_estimate(np.array([2.0]), np.array([2.0]), 0.5, 0.5)[0] == 2.5 / 3


def test_estimator_update_decays_both_counts_before_adding() -> None:
    est = PassRateEstimator(alpha=1.0, beta=16.0, decay=0.9)
    assert est.estimate(["a", "b"]).tolist() == [1 / 17, 1 / 17]  # never seen: the prior mean
    est.update(["a", "b"], np.array([3, 0]), np.array([8, 4]))
    assert (est.positives, est.samples) == ({"a": 3.0, "b": 0.0}, {"a": 8.0, "b": 4.0})
    assert est.estimate(["a", "b"]) == pytest.approx([4 / 25, 1 / 21])
    est.update(["a"], np.array([1]), np.array([4]))
    # a: pos 0.9 * 3 + 1 = 3.7, total 0.9 * 8 + 4 = 11.2; b was not in the step: untouched.
    assert est.positives["a"] == pytest.approx(3.7) and est.samples["a"] == pytest.approx(11.2)
    assert est.estimate(["a"])[0] == pytest.approx(4.7 / 28.2)
    assert (est.positives["b"], est.samples["b"]) == (0.0, 4.0)
    with pytest.raises(ValueError, match="twice"):
        est.update(["a", "a"], np.array([1, 1]), np.array([2, 2]))


def test_estimator_lambda_one_and_zero() -> None:
    keep = PassRateEstimator(decay=1.0)
    forget = PassRateEstimator(decay=0.0)
    for est in (keep, forget):
        est.update(["x"], np.array([4]), np.array([4]))
        est.update(["x"], np.array([0]), np.array([4]))
    assert (keep.positives["x"], keep.samples["x"]) == (4.0, 8.0)
    assert (forget.positives["x"], forget.samples["x"]) == (0.0, 4.0)


def test_estimator_state_round_trips_through_json_exactly() -> None:
    est = PassRateEstimator(decay=0.9)
    rng = np.random.default_rng(0)
    ids = [f"p{i}" for i in range(20)]
    for _ in range(7):
        n = rng.integers(2, 30, size=20)
        est.update(ids, rng.binomial(n, 0.3), n)
    again = PassRateEstimator(decay=0.9)
    again.load_state_dict(json.loads(json.dumps(est.state_dict())))
    assert again.estimate(ids).tolist() == est.estimate(ids).tolist()  # bit for bit


# --- the weights and the allocation -------------------------------------------------------------

def test_weights() -> None:
    assert tuple(ALLOCATION_WEIGHTS) == EST_WEIGHTS  # the config's choices
    p = np.array([0.25, 1.0, 0.04])
    assert ALLOCATION_WEIGHTS["inv-sqrt"](p, 0.0).tolist() == [2.0, 1.0, 5.0]
    assert ALLOCATION_WEIGHTS["inv"](p, 0.0).tolist() == [4.0, 1.0, 25.0]
    assert ALLOCATION_WEIGHTS["inv-sqrt"](np.array([0.0]), 1e-6)[0] == pytest.approx(1000.0)


def test_allocation_is_proportional_when_no_bound_binds() -> None:
    counts, scale = allocate(np.array([1.0, 2.0, 3.0, 2.0]), 16, 1, 100)
    assert counts.tolist() == [2, 4, 6, 4] and scale == pytest.approx(2.0)


def test_equal_weights_give_everyone_the_budget() -> None:
    counts, _ = allocate(np.full(32, 3.7), 8 * 32, 2, 32)
    assert counts.tolist() == [8] * 32


@pytest.mark.parametrize("weights, total, expected", [
    # x = 10/3 each: floors 3, 3, 3; the one missing sample goes to the earliest prompt.
    ([1.0, 1.0, 1.0], 10, [4, 3, 3]),
    # x = 5, 3.33, 1.67: floors 5, 3, 1; the largest remainder (0.67) gets the missing one.
    ([3.0, 2.0, 1.0], 10, [5, 3, 2]),
    # x = 1.5, 4.5: equal remainders; the larger weight (the harder prompt) wins the tie.
    ([1.0, 3.0], 6, [1, 5]),
    # x = 2.4 x 5 = 12: two samples missing go to the first two of five equal remainders.
    ([2.0] * 5, 12, [3, 3, 2, 2, 2]),
])
def test_rounding_rule_largest_remainder(weights, total, expected) -> None:
    counts, _ = allocate(np.array(weights), total, 1, 100)
    assert counts.tolist() == expected


def test_upper_bound_clips_and_the_rest_is_renormalised() -> None:
    # Without N_max the heavy prompt would take ~12 of 12; at N_max = 6 the other two share 6.
    counts, scale = allocate(np.array([1.0, 1.0, 100.0]), 12, 2, 6)
    assert counts.tolist() == [3, 3, 6] and scale == pytest.approx(3.0)


def test_lower_bound_clips_and_the_rest_is_renormalised() -> None:
    # The light prompt would get 20/201 of a sample; N_min = 2 lifts it, the others share 18.
    counts, scale = allocate(np.array([1.0, 100.0, 100.0]), 20, 2, 32)
    assert counts.tolist() == [2, 9, 9] and scale == pytest.approx(0.09)


def test_both_bounds_bind_at_once() -> None:
    w = np.array([0.01, 1.0, 2.0, 1000.0])
    counts, scale = allocate(w, 4 * 8, 2, 16)
    assert counts.tolist()[0] == 2 and counts.tolist()[-1] == 16
    # The free prompts share the rest in proportion: 14 = c * (1 + 2).
    assert counts.tolist()[1:3] == [5, 9] and scale == pytest.approx(14 / 3)


@pytest.mark.parametrize("seed", range(5))
def test_random_allocations_hit_the_budget_within_bounds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    B, budget, lo, hi = 64, 8, 2, 32
    p_hat = rng.beta(0.5, 2.0, size=B)
    w = ALLOCATION_WEIGHTS["inv-sqrt"](p_hat, 1e-6)
    counts, scale = allocate(w, budget * B, lo, hi)
    assert counts.sum() == budget * B
    assert counts.min() >= lo and counts.max() <= hi
    x = np.clip(scale * w, lo, hi)
    assert x.sum() == pytest.approx(budget * B)
    assert np.all((counts == np.floor(x + 1e-9)) | (counts == np.ceil(x - 1e-9)))
    # A harder prompt (larger weight) never gets fewer samples than an easier one.
    order = np.argsort(w, kind="stable")
    assert np.all(np.diff(counts[order]) >= 0)


def test_infeasible_budget_is_an_error() -> None:
    with pytest.raises(ValueError, match="no allocation within"):
        allocate(np.ones(4), 7, 2, 32)
    with pytest.raises(ValueError, match="no allocation within"):
        allocate(np.ones(4), 129, 2, 32)
    with pytest.raises(ValueError, match="positive"):
        allocation_scale(np.array([1.0, 0.0]), 8, 2, 32)


def test_plan_allocation_from_a_config() -> None:
    config = TrainConfig(algorithm="ada-est", batch_size=4, budget_per_prompt=8,
                         est_min_samples=2, est_max_samples=32).validate()
    est = PassRateEstimator.from_config(config)
    est.update(["easy", "hard"], np.array([30, 0]), np.array([32, 32]))
    plan = plan_allocation(est, ["easy", "hard", "new1", "new2"], config)
    assert plan.p_hat.tolist() == pytest.approx([31 / 49, 1 / 49, 1 / 17, 1 / 17])
    assert plan.counts.sum() == 32
    assert plan.counts[0] == 2  # the easy prompt sits at N_min
    assert plan.counts[1] > plan.counts[2] == plan.counts[3]
    x = np.clip(plan.scale / np.sqrt(plan.p_hat + 1e-6), 2, 32)
    assert np.all((plan.counts == np.floor(x + 1e-9)) | (plan.counts == np.ceil(x - 1e-9)))
