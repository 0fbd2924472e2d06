"""DPPO (arXiv 2603.04135; trainer/algorithms/dppo.py): the pruning probabilities, draws and
importance weights against a plain re-implementation on random inputs (the keep rule through the
sampler, the prompt pruning through whole simulated runs), unbiasedness of the weighted gradient
by simulation on a softmax toy problem (and the bias without the weights), the history in
checkpoints, the options' validation. The tiny model's steps are in tests/trainer/test_e2e_hf.py
(``test_dppo_trains_on_the_hf_backend``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer import seeds, train
from trainer.algorithms.dppo import (
    DPPO_STATE,
    PROMPT_PRUNE,
    completion_keep,
    prompt_prune_probabilities,
    prune,
)
from trainer.backends.simulated import SimulatedBackend
from trainer.checkpoint import checkpoint_dir, read_state
from trainer.config import TrainConfig
from trainer.recorders import ListRecorder
from trainer.sampler import make_sampler
from trainer.types import Prompt

EPS = 1e-6  # the global estimator's epsilon in (r - mean) / (std + eps)


# --- the paper's rules, written plainly (loops, no vectorisation) -----------------------------

def plain_group_advantages(rewards: list[float]) -> list[float]:
    """GRPO over the whole group: (r - mean) / (unbiased std + eps)."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    return [(r - mean) / (std + EPS) for r in rewards]


def below(x: float, mean: float) -> bool:
    """Below the mean, a value equal to it up to rounding not counting (|A| of a half-right
    group all equal their mean, whatever order the sums took)."""
    return x < mean and not math.isclose(x, mean, rel_tol=1e-9, abs_tol=1e-12)


def plain_completion_probabilities(groups: list[list[float]], rate: float) -> list[float]:
    out = []
    for rewards in groups:
        a = [abs(x) for x in plain_group_advantages(rewards)]
        mean = sum(a) / len(a)
        out += [rate if below(x, mean) else 0.0 for x in a]
    return out


def plain_prompt_probabilities(scores: list[float | None], rate: float) -> list[float]:
    seen = [s for s in scores if s is not None]
    if not seen:
        return [0.0] * len(scores)
    mean = sum(seen) / len(seen)
    return [rate if s is not None and below(s, mean) else 0.0 for s in scores]


def plain_keep(probabilities: list[float], seed: int) -> list[bool]:
    """One uniform draw per term, in order: kept when it is at least the pruning probability."""
    rng = np.random.default_rng(seed)
    return [float(rng.random()) >= p for p in probabilities]


def pools_of(groups: list[list[float]], rate: float = 0.5, seed: int = 0):
    config = TrainConfig(algorithm="dppo", group_size=len(groups[0]),
                         dppo_completion_prune_rate=rate).validate()
    sampler = make_sampler(config, len(groups), seed=seed)
    for i, rewards in enumerate(groups):
        for r in rewards:
            sampler.observe(i, float(r))
    sampler.end_round()
    return sampler.finalize()


def test_completion_pruning_matches_the_plain_rule_on_random_rewards() -> None:
    rng = np.random.default_rng(2603)
    for trial in range(60):
        n, B = int(rng.integers(2, 9)), int(rng.integers(1, 6))
        rate = float(rng.uniform(0, 0.9))
        groups = [(rng.normal(size=n) if trial % 2 else rng.integers(0, 3, n) / 2.0).tolist()
                  for _ in range(B)]
        res = pools_of(groups, rate, seed=trial)
        p = plain_completion_probabilities(groups, rate)
        assert res.kept.tolist() == plain_keep(p, trial)
        assert res.weights == pytest.approx([1 / (1 - x) for x in p], rel=1e-12)
        # Advantages are the whole group's, pruned completions or not (0 where pruned).
        full = [a for g in groups for a in plain_group_advantages(g)]
        assert res.advantages == pytest.approx(np.where(res.kept, full, 0.0), abs=1e-9)


def test_equal_magnitudes_prune_nothing_whatever_the_rounding() -> None:
    # Half right: every |A| equals the mean; all equal: every A is 0. Nothing is below its mean.
    res = pools_of([[1, 0, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1]], rate=0.9, seed=3)
    assert res.kept.all() and (res.weights == 1).all()


def test_prompt_probabilities_match_the_plain_rule_on_random_histories() -> None:
    rng = np.random.default_rng(4135)
    for _ in range(200):
        B = int(rng.integers(1, 9))
        scores = [None if rng.random() < 0.3 else float(rng.exponential()) for _ in range(B)]
        rate = float(rng.uniform(0, 0.9))
        got = prompt_prune_probabilities(
            np.array([np.nan if s is None else s for s in scores]), rate)
        assert got.tolist() == plain_prompt_probabilities(scores, rate)
        assert prune(got, np.random.default_rng(B)).tolist() == plain_keep(got.tolist(), B)


def prompts(n: int = 10) -> list[Prompt]:
    rates = (0.0, 0.2, 0.5, 0.8, 1.0)
    return [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": rates[i % len(rates)]})
            for i in range(n)]


def dppo_config(**kw) -> TrainConfig:
    base = dict(backend="simulated", algorithm="dppo", batch_size=4, group_size=6,
                total_steps=10, save_every=0, eval_every=0, seed=7, verifier="exact",
                dppo_prompt_prune_rate=0.6, dppo_completion_prune_rate=0.5)
    return TrainConfig(**{**base, **kw})


def test_simulated_run_prunes_prompts_by_their_history_as_the_plain_rule_does(tmp_path) -> None:
    """Whole runs re-derived from their records: each step's batch (the epoch permutation),
    the history (each prompt's mean |A| over its whole group when last sampled), which
    prompts survive (the step's own stream), which completions, and every recorded weight
    w_q * w_o."""
    config = dppo_config()
    rec = ListRecorder()
    assert train(config, prompts(), SimulatedBackend(), rec, out_dir=tmp_path).status == \
        "completed"
    history: dict[str, float] = {}
    pruned_prompts = 0
    weights: set[float] = set()
    for s in rec.steps:
        batch = [f"p{i}" for i in seeds.batch_indices(10, 4, config.seed, s.step)]
        p_q = plain_prompt_probabilities([history.get(x) for x in batch], 0.6)
        kept_q = plain_keep(p_q, seeds.derive_seed(config.seed, s.step, PROMPT_PRUNE))
        survivors = [x for x, k in zip(batch, kept_q, strict=True) if k]
        assert [p.prompt_id for p in s.prompts] == survivors
        w_q = {x: 1 / (1 - p) for x, p, k in zip(batch, p_q, kept_q, strict=True) if k}
        groups = [[x.reward for x in s.samples if x.prompt_id == pid] for pid in survivors]
        p_o = plain_completion_probabilities(groups, 0.5)
        kept_o = plain_keep(p_o, seeds.derive_seed(config.seed, s.step, seeds.DOWNSAMPLE))
        assert [x.kept for x in s.samples] == kept_o
        expected = [w_q[x.prompt_id] / (1 - p) for x, p in zip(s.samples, p_o, strict=True)]
        assert [x.weight for x in s.samples] == pytest.approx(expected, rel=1e-12)
        assert s.metrics["prompts_pruned"] == 4 - len(survivors)
        assert s.metrics["samples_pruned"] == kept_o.count(False)
        kept_w = [w for w, k in zip(expected, kept_o, strict=True) if k]
        assert s.metrics["loss_weight_max"] == pytest.approx(max(kept_w))
        pruned_prompts += 4 - len(survivors)
        weights |= {round(w, 9) for w in kept_w}
        for pid, g in zip(survivors, groups, strict=True):
            history[pid] = sum(abs(a) for a in plain_group_advantages(g)) / len(g)
    # Both levels pruned and reweighted: w_q = 1 / (1 - 0.6), w_o = 1 / (1 - 0.5).
    assert pruned_prompts > 0 and {2.5, 2.0} <= weights


def test_resume_keeps_the_history_and_replays_the_same_steps(tmp_path) -> None:
    full = ListRecorder()
    train(dppo_config(total_steps=6, save_every=3), prompts(), SimulatedBackend(), full,
          out_dir=tmp_path / "a")
    state = read_state(checkpoint_dir(tmp_path / "a", 3))[DPPO_STATE]
    assert len(state["ids"]) == len(state["scores"]) > 0
    part = ListRecorder()
    train(dppo_config(total_steps=6, save_every=3), prompts(), SimulatedBackend(), part,
          out_dir=tmp_path / "b", resume_from=checkpoint_dir(tmp_path / "a", 3))
    assert [s.step for s in part.steps] == [4, 5, 6]
    for a, b in zip(full.steps[3:], part.steps, strict=True):
        assert [p.prompt_id for p in a.prompts] == [p.prompt_id for p in b.prompts]
        assert [(x.kept, x.weight) for x in a.samples] == [(x.kept, x.weight) for x in b.samples]
    # Without the history nothing would be pruned at the resumed step's batch.
    assert any(s.metrics["prompts_pruned"] for s in part.steps)


def test_unbiased_with_the_weights_and_biased_without_on_a_softmax_toy() -> None:
    """A softmax policy over K answers, B prompts of n drawn completions each: the policy
    gradient sum_x sum_i A_i grad log pi(a_i) against DPPO's estimate, the kept terms
    weighted w_q * w_o, over many seeded pruning draws (the module's own prompt pruning and
    keep rule). Its mean is the unpruned gradient within 4 standard errors in every
    coordinate; without the weights it is the gradient with each term scaled by its keep
    probability, many standard errors away from the unpruned one."""
    rng = np.random.default_rng(31)
    K, B, n, S = 5, 6, 8, 2000
    theta = rng.normal(size=K)
    pi = np.exp(theta) / np.exp(theta).sum()
    right = rng.random((B, K)) < 0.5
    answers = rng.choice(K, size=(B, n), p=pi)
    groups = [right[x, answers[x]].astype(float).tolist() for x in range(B)]
    res = pools_of(groups, rate=0.6)
    adv = np.array([a for g in groups for a in plain_group_advantages(g)])
    # Each completion's term A_i (e_{a_i} - pi), and the unpruned gradient.
    terms = adv[:, None] * (np.eye(K)[answers.ravel()] - pi)
    full = terms.sum(axis=0)
    history = rng.exponential(size=B)
    history[0] = np.nan                       # never sampled: never pruned
    p_q = prompt_prune_probabilities(history, 0.7)
    keep_rule = completion_keep(0.6)
    weighted = np.empty((S, K))
    plain = np.empty((S, K))
    keep_probability = np.zeros(len(adv))
    for s in range(S):
        kept_q = prune(p_q, np.random.default_rng([s, 0]))
        kept_o, w_o = keep_rule(res, n, seeds.derive_seed(s, 1))
        kept = kept_q[res.sample_prompt] & kept_o
        w = (1 / (1 - p_q))[res.sample_prompt] * w_o
        weighted[s] = (terms * (kept * w)[:, None]).sum(axis=0)
        plain[s] = (terms * kept[:, None]).sum(axis=0)
        keep_probability = 1 / w                # the same every draw
    se = weighted.std(axis=0, ddof=1) / math.sqrt(S)
    assert np.all(np.abs(weighted.mean(axis=0) - full) <= 4 * se + 1e-12), \
        (weighted.mean(axis=0), full, se)
    assert np.all(se > 0)                       # something was pruned in every coordinate
    se_plain = plain.std(axis=0, ddof=1) / math.sqrt(S)
    scaled = (terms * keep_probability[:, None]).sum(axis=0)
    assert np.all(np.abs(plain.mean(axis=0) - scaled) <= 4 * se_plain + 1e-12)
    assert np.max(np.abs(plain.mean(axis=0) - full) / se_plain) > 10


@pytest.mark.parametrize("field", ["dppo_prompt_prune_rate", "dppo_completion_prune_rate"])
def test_a_rate_outside_zero_to_point_nine_is_refused_naming_the_field(field: str) -> None:
    for bad in (-0.1, 0.95, 1.0):
        with pytest.raises(ValueError, match=field):
            TrainConfig(algorithm="dppo", **{field: bad}).validate()
    assert getattr(TrainConfig(algorithm="dppo").validate(), field) == 0.5
