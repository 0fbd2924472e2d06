"""PODS (arXiv 2504.13818; trainer/algorithms/pods.py): the max-variance subset against a brute
force over every subset, on random pass/fail, graded and real rewards; the sampler's keep rule
and GRPO advantages over the kept subset with the authors' 1e-4; training through
``trainer.train`` on the simulated backend; its option's validation and documentation. The
tiny model's steps are in tests/trainer/test_e2e_hf.py (``test_pods_trains_on_the_hf_backend``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from trainer import train
from trainer.algorithms import get_algorithm
from trainer.algorithms.pods import PODS_EPS, max_variance_subset
from trainer.backends.simulated import SimulatedBackend
from trainer.cli import simulate
from trainer.config import TrainConfig
from trainer.config_docs import config_reference
from trainer.recorders import ListRecorder
from trainer.sampler import make_sampler
from trainer.types import Prompt


def brute_force_max_variance(rewards: np.ndarray, m: int) -> float:
    """The definition itself: the largest population variance of any m of the rewards."""
    return max(float(np.var(rewards[list(s)]))
               for s in itertools.combinations(range(len(rewards)), min(m, len(rewards))))


def random_rewards(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    if kind == 0:   # pass/fail, the verifiers'
        return rng.integers(0, 2, n).astype(np.float64)
    if kind == 1:   # graded with many ties (accuracy + format, the authors' summed rewards)
        return rng.integers(0, 4, n) / 2.0
    return rng.normal(size=n) * rng.uniform(0.1, 10)   # real-valued


def test_max_variance_subset_is_the_brute_force_optimum_on_random_rewards() -> None:
    rng = np.random.default_rng(2504)
    for trial in range(600):
        n = int(rng.integers(1, 10))
        m = int(rng.integers(1, n + 2))          # m > n too: the whole pool
        rewards = random_rewards(rng, trial % 3, n)
        chosen = max_variance_subset(rewards, m, np.random.default_rng(trial))
        assert len(chosen) == min(m, n) == len(set(chosen.tolist())), (rewards, m, chosen)
        assert np.var(rewards[chosen]) == pytest.approx(
            brute_force_max_variance(rewards, m), rel=1e-9, abs=1e-12), (rewards, m, chosen)


def test_pass_fail_pools_keep_as_balanced_as_the_pool_allows_and_ties_are_seeded() -> None:
    rewards = np.array([1.0] * 3 + [0.0] * 13)
    for m, positives in ((4, 2), (8, 3), (2, 1), (5, 3)):
        assert rewards[max_variance_subset(rewards, m)].sum() == positives
    # The authors' order among equal variances: m = 5 of 3 right keeps 3 right and 2 wrong
    # (the top m, tried first) rather than 2 and 3; 5 right, 5 wrong, m = 3 keeps 1 right
    # (k = 1 comes before k = 2).
    assert rewards[max_variance_subset(np.array([1.0] * 5 + [0.0] * 5), 3)].sum() == 1
    # Which of equal rewards are kept: a function of the seed, and not always the same ones.
    picks = {tuple(max_variance_subset(rewards, 4, np.random.default_rng(s))) for s in range(20)}
    assert len(picks) > 1
    assert tuple(max_variance_subset(rewards, 4, np.random.default_rng(7))) == \
        tuple(max_variance_subset(rewards, 4, np.random.default_rng(7)))


def test_the_sampler_keeps_the_subset_and_centres_it_with_grpo_over_the_kept() -> None:
    """Real-valued rewards through PODS' sampler (one round of pods_rollouts): each pool keeps
    its max-variance m and the kept advantages are (r - mean) / (std + 1e-4) of the kept,
    std unbiased (the authors' maxvargrpo_trainer.py)."""
    config = TrainConfig(algorithm="pods", group_size=4, pods_rollouts=7).validate()
    rng = np.random.default_rng(5)
    pools = [rng.normal(size=7) for _ in range(6)]
    sampler = make_sampler(config, len(pools), seed=11)
    for i, rewards in enumerate(pools):
        for r in rewards:
            sampler.observe(i, float(r))
    sampler.end_round()
    res = sampler.finalize()
    for i, rewards in enumerate(pools):
        lo, hi = int(res.offsets[i]), int(res.offsets[i + 1])
        kept = res.kept[lo:hi]
        r = res.rewards[lo:hi]
        assert sorted(r.tolist()) == sorted(rewards.tolist()) and kept.sum() == 4
        assert np.var(r[kept]) == pytest.approx(brute_force_max_variance(r, 4), rel=1e-9)
        expected = (r[kept] - r[kept].mean()) / (r[kept].std(ddof=1) + PODS_EPS)
        np.testing.assert_allclose(res.advantages[lo:hi][kept], expected, rtol=1e-12)
        assert not res.advantages[lo:hi][~kept].any()


def balanced(positives: int, negatives: int, m: int) -> set[int]:
    """The kept positives of the most varied m pass/fail rewards: as near m/2 as the pool has
    (m odd: either side of it)."""
    return {int(np.clip(k, m - negatives, positives)) for k in (m // 2, (m + 1) // 2)}


def test_pods_trains_through_train_on_the_simulated_backend(tmp_path: Path) -> None:
    prompts = [Prompt(id=f"p{i}", text=f"{i}+1=", answer="x", metadata={"pass_rate": r})
               for i, r in enumerate([0.05, 0.2, 0.5, 0.8, 0.95, 0.0, 1.0, 0.4])]
    cfg = TrainConfig.from_dict({"algorithm": "pods", "backend": "simulated",
                                 "verifier": "exact", "batch_size": 8, "group_size": 4,
                                 "pods_rollouts": 12, "total_steps": 2, "save_every": 0,
                                 "eval_every": 0})
    rec = ListRecorder()
    result = train(cfg, prompts, SimulatedBackend(cfg), rec, out_dir=tmp_path)
    assert result.status == "completed" and len(rec.steps) == 2
    for step in rec.steps:
        assert step.metrics["samples"] == 8 * 12 and step.metrics["kept_samples"] == 8 * 4
        # Its own metrics: the mean per-prompt reward std of what was drawn and what was kept;
        # with pass/fail rewards the kept are at least as spread as the pool.
        drawn = {p.prompt_id: [s.reward for s in step.samples if s.prompt_id == p.prompt_id]
                 for p in step.prompts}
        kept_r = {k: [s.reward for s in step.samples if s.prompt_id == k and s.kept]
                  for k in drawn}
        assert step.metrics["drawn_reward_std"] == pytest.approx(
            np.mean([np.std(v) for v in drawn.values()]))
        assert step.metrics["kept_reward_std"] == pytest.approx(
            np.mean([np.std(v) for v in kept_r.values()]))
        assert step.metrics["kept_reward_std"] >= step.metrics["drawn_reward_std"] - 1e-12
        for p in step.prompts:
            assert (p.samples, p.kept_positives + p.kept_negatives) == (12, 4)
            assert p.kept_positives in balanced(p.positives, p.negatives, 4), p
            mine = [s for s in step.samples if s.prompt_id == p.prompt_id]
            assert all((s.advantage is None) != s.kept for s in mine)  # recorded either way
            kept = np.array([s.reward for s in mine if s.kept])
            expected = (kept - kept.mean()) / (kept.std(ddof=1) + PODS_EPS)
            np.testing.assert_allclose([s.advantage for s in mine if s.kept], expected,
                                       atol=1e-9)
    # The simulator (and so the preflight) draws n and keeps m the same way.
    rows = simulate("pods", [0.2, 0.5, 0.9], overrides={"pods_rollouts": 10})["prompts"]
    for row in rows:
        assert row["samples"] == 10 and row["kept_positives"] + row["kept_negatives"] == 4
        assert row["kept_positives"] in balanced(row["positives"], row["negatives"], 4)


def test_pods_option_is_validated_naming_it_and_documented() -> None:
    c = TrainConfig(algorithm="pods").validate()
    assert (c.pods_rollouts, c.group_size, c.max_samples_per_step) == (16, 4, c.batch_size * 16)
    errors = TrainConfig.dict_errors({"algorithm": "pods", "group_size": 8, "pods_rollouts": 6})
    assert [(e.field, e.reason) for e in errors] == [(
        "pods_rollouts", "must be >= group_size (8, the paper's m: the rollouts the update "
        "keeps), got 6")]
    assert [e.field for e in TrainConfig.dict_errors({"algorithm": "pods",
                                                      "pods_rollouts": 1})] == ["pods_rollouts"]
    assert not TrainConfig.dict_errors({"algorithm": "pods", "group_size": 8,
                                        "pods_rollouts": 8})
    # Another algorithm's run is not checked against PODS' option.
    assert not TrainConfig.dict_errors({"algorithm": "grpo", "group_size": 32})
    record = get_algorithm("pods")
    reference = config_reference()
    assert f"## {record.label} (`{record.name}`)" in reference
    assert "| `pods_rollouts` | `16` | [2, 32,767] | responses | PODS: n, " in reference
