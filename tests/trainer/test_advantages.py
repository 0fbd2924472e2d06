"""Advantage estimators against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.advantages import (
    global_baseline_advantages,
    group_advantages,
    passive_filter,
    zero_advantage_groups,
)

# Group 0: pool of 6 with rewards 1,1,0,0,0,0; kept the first four. Group 1: all 1, all kept.
R = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
G = np.array([0, 0, 0, 0, 0, 0, 1, 1])
K = np.array([True, True, True, True, False, False, True, True])


def test_global_baseline_uses_the_whole_pool() -> None:
    adv = global_baseline_advantages(R, G, K, 2)
    # mean(pool 0) = 2/6 = 1/3.
    assert adv.tolist() == pytest.approx([2 / 3, 2 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0])


def test_global_baseline_with_std() -> None:
    adv = global_baseline_advantages(R, G, K, 2, std_normalize=True, eps=0.0)
    std = np.sqrt(((2 / 3) ** 2 * 2 + (1 / 3) ** 2 * 4) / 5)  # unbiased, 0.5164
    assert adv[:4].tolist() == pytest.approx([2 / 3 / std, 2 / 3 / std, -1 / 3 / std,
                                              -1 / 3 / std])
    assert adv[4:].tolist() == [0, 0, 0, 0]


def test_group_statistics_use_the_kept_group() -> None:
    adv = group_advantages(R, G, K, 2, std_normalize=False)
    assert adv.tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5, 0, 0, 0, 0])
    adv = group_advantages(R, G, K, 2, std_normalize=True, eps=1e-6)
    std = np.sqrt(4 * 0.25 / 3)  # 0.57735
    assert adv[:4].tolist() == pytest.approx([0.5 / (std + 1e-6)] * 2 + [-0.5 / (std + 1e-6)] * 2)
    assert adv[6:].tolist() == [0, 0]  # all-equal group: zero advantage, no division blow-up


def test_passive_filtering_drops_zero_groups() -> None:
    adv = group_advantages(R, G, K, 2)
    assert zero_advantage_groups(adv, G, K, 2).tolist() == [False, True]
    assert passive_filter(adv, G, K, 2).tolist() == [True] * 4 + [False] * 4


def test_hybrid_advantage_is_the_centred_reward_over_sqrt_mean() -> None:
    from trainer.advantages import hybrid_advantages

    # Group 0: 1 of 4 right (mean 1/4): (r - 1/4) / sqrt(1/4) = 1.5 and -0.5.
    # Group 1: 3 of 4 right (mean 3/4): 0.25 / sqrt(3/4) and -0.75 / sqrt(3/4).
    # Group 2: all wrong: 0 (not 0/0). Group 3: all right: 0.
    r = np.array([1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1], dtype=np.float64)
    g = np.array([0] * 4 + [1] * 4 + [2] * 2 + [3] * 2)
    adv = hybrid_advantages(r, g, np.ones(12, dtype=bool), 4, eps=0.0)
    s = np.sqrt(0.75)
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5, 0.25 / s, 0.25 / s, 0.25 / s,
                                          -0.75 / s, 0, 0, 0, 0])
    # eps enters under the square root.
    adv = hybrid_advantages(r[:4], g[:4], np.ones(4, dtype=bool), 1, eps=0.25)
    assert adv.tolist() == pytest.approx([0.75 / np.sqrt(0.5)] + [-0.25 / np.sqrt(0.5)] * 3)
