"""GVM-RAFT (arXiv 2505.02391; trainer/algorithms/gvm_raft.py): its allocation against a plain
reimplementation of the authors' rule (``calc_sample_ratio`` and ``float_to_int_preserve_sum``
in RLHFlow/GVM em/stage_2_calc_sample_size.py, with this platform's floor and cap) on hundreds
of random inputs; both stages through ``trainer.train`` on the simulated backend; its options'
validation and documentation. The tiny model's steps are in tests/trainer/test_e2e_hf.py
(``test_gvm_raft_trains_on_the_hf_backend``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from trainer import train
from trainer.algorithms import get_algorithm
from trainer.algorithms.gvm_raft import GVM_EPS, gvm_allocate, gvm_weights
from trainer.backends.simulated import SimulatedBackend
from trainer.config import TrainConfig
from trainer.config_docs import config_reference
from trainer.recorders import ListRecorder
from trainer.types import Prompt


def reference_sample_sizes(accept_rates: list[float], alpha: float, beta: float,
                           total: int, n_min: int, n_max: int) -> list[int]:
    """The authors' rule, written out: a prompt's share is G / sqrt(p + alpha / p^(beta - 1))
    (G = 1), none where p = 0; the real sample sizes c x share are clipped to [n_min, n_max]
    with c chosen by bisection so that they sum to ``total`` (without the clip this is the
    authors' share x total); prompts without a share get n_min, and what the others cannot
    take under n_max is spread evenly over them. Integers: round each, then correct the sum
    by the residuals (largest first when short, smallest first when over), as the authors'
    float_to_int_preserve_sum does; ties go to the larger share, then the earlier prompt."""
    shares = [0.0 if p == 0 else 1.0 / math.sqrt(p + alpha / p ** (beta - 1))
              for p in accept_rates]
    live = [i for i, s in enumerate(shares) if s > 0]
    dead = [i for i, s in enumerate(shares) if s == 0]
    real = [float(n_min)] * len(shares)
    to_live = min(total - n_min * len(dead), n_max * len(live))
    if live:
        def spent(c: float) -> float:
            return sum(min(max(c * shares[i], n_min), n_max) for i in live)
        lo, hi = 0.0, 1.0
        while spent(hi) < to_live:
            hi *= 2
        for _ in range(64):   # hi is within 2x of c: 64 halvings leave it exact to the bit
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if spent(mid) < to_live else (lo, mid)
        for i in live:
            real[i] = min(max(hi * shares[i], n_min), n_max)
    for i in dead:
        real[i] = (total - to_live) / len(dead)
    counts = [round(x) for x in real]
    error = total - sum(counts)
    residual = [x - n for x, n in zip(real, counts, strict=True)]
    index = range(len(real))
    if error > 0:
        order = sorted(index, key=lambda i: (-residual[i], -shares[i], i))
        for i in [i for i in order if counts[i] < n_max][:error]:
            counts[i] += 1
    elif error < 0:
        order = sorted(index, key=lambda i: (residual[i], shares[i], -i))
        for i in [i for i in order if counts[i] > n_min][:-error]:
            counts[i] -= 1
    return counts


def random_case(rng: np.random.Generator, trial: int) -> tuple[list[float], float, float, int,
                                                               int, int]:
    B = int(rng.integers(1, 25))
    if trial % 2:   # first-stage rates k / n1: many equal, zeros and ones
        n1 = int(rng.integers(1, 17))
        rates = (rng.binomial(n1, rng.uniform(0, 1, B)) / n1).tolist()
    else:           # real-valued rates, some zero
        rates = np.where(rng.uniform(size=B) < 0.2, 0.0, rng.uniform(1e-4, 1, B)).tolist()
    alpha = 1e-3 if trial % 3 else float(10 ** rng.uniform(-5, 0))
    beta = 2.0 if trial % 4 else float(rng.uniform(0.5, 4))
    n_min = int(rng.integers(0, 4))
    n_max = int(rng.integers(max(n_min, 1), 40))
    total = int(rng.integers(B * max(n_min, 1), B * n_max + 1))
    return rates, alpha, beta, total, n_min, n_max


def test_allocation_matches_the_authors_rule_written_plainly_on_random_inputs() -> None:
    rng = np.random.default_rng(2505_02391)
    for trial in range(250):
        rates, alpha, beta, total, n_min, n_max = random_case(rng, trial)
        counts, _ = gvm_allocate(gvm_weights(np.array(rates), alpha, beta), total, n_min, n_max)
        expected = reference_sample_sizes(rates, alpha, beta, total, n_min, n_max)
        case = (rates, alpha, beta, total, n_min, n_max)
        assert counts.tolist() == expected, case
        assert int(counts.sum()) == total and counts.min() >= n_min and counts.max() <= n_max
        if n_min == 0 and any(rates) and total <= n_max * sum(r > 0 for r in rates):
            # The authors' own case: a prompt with nothing accepted draws nothing more.
            assert all(n == 0 for n, r in zip(counts, rates, strict=True) if r == 0), case


def test_the_rule_favours_hard_prompts_with_an_acceptance_and_skips_those_without() -> None:
    # At alpha = 1e-3, beta = 2 the share 1/sqrt(p + alpha/p) peaks at p = sqrt(alpha).
    w = gvm_weights(np.array([0.0, 1 / 32, 1 / 8, 1 / 2, 1.0]), 1e-3, 2.0)
    assert w[0] == 0 and np.all(np.diff(w[1:]) < 0)
    counts, _ = gvm_allocate(w, 40, 0, 32)
    assert counts.tolist() == [0, 18, 12, 6, 4]
    # No prompt accepted anything: the budget is spread evenly (still spent, as a matched
    # budget needs), and a floor gives every prompt some.
    assert gvm_allocate(np.zeros(3), 8, 0, 32)[0].tolist() == [3, 3, 2]
    assert gvm_allocate(w, 40, 4, 32)[0].min() == 4
    with pytest.raises(ValueError, match="sums to 200"):
        gvm_allocate(w, 200, 0, 32)


def test_gvm_raft_trains_both_stages_through_train_on_the_simulated_backend(
        tmp_path: Path) -> None:
    prompts = [Prompt(id=f"p{i}", text=f"{i}+1=", answer="x", metadata={"pass_rate": r})
               for i, r in enumerate([0.05, 0.2, 0.5, 0.8, 0.95, 0.0, 1.0, 0.4])]
    cfg = TrainConfig.from_dict({"algorithm": "gvm-raft", "backend": "simulated",
                                 "verifier": "exact", "batch_size": 8, "gvm_stage1": 4,
                                 "gvm_budget": 10, "total_steps": 2, "save_every": 0,
                                 "eval_every": 0})
    rec = ListRecorder()
    result = train(cfg, prompts, SimulatedBackend(cfg), rec, out_dir=tmp_path)
    assert result.status == "completed" and len(rec.steps) == 2
    for step in rec.steps:
        m = step.metrics
        assert (m["samples"], m["kept_samples"]) == (8 * 10, 8 * 6)
        rates = []
        for p in step.prompts:
            mine = [s for s in step.samples if s.prompt_id == p.prompt_id]
            first, second = mine[:4], mine[4:]
            # Stage 1 estimates and is not trained on; stage 2 is all trained on.
            assert not any(s.kept for s in first) and all(s.kept for s in second)
            assert p.p_hat == sum(s.reward > 0.5 for s in first) / 4
            assert p.allocated == len(second)
            rates.append(p.p_hat)
            if len(second) > 1:   # GRPO's advantage within the second stage's group
                r = np.array([s.reward for s in second])
                expected = (r - r.mean()) / (r.std(ddof=1) + GVM_EPS)
                np.testing.assert_allclose([s.advantage for s in second], expected, atol=1e-9)
        assert [p.allocated for p in step.prompts] == reference_sample_sizes(
            rates, 1e-3, 2.0, 8 * 6, 0, 32)
        shares = [m[k] for k in ("gvm_share_none", "gvm_share_hard", "gvm_share_easy",
                                 "gvm_share_solved")]
        assert sum(shares) == pytest.approx(1.0)
        assert m["gvm_stage1_pass_rate"] == pytest.approx(np.mean(rates))
        assert m["gvm_max_alloc"] == max(p.allocated for p in step.prompts)


def test_gvm_options_are_validated_naming_them_and_documented() -> None:
    c = TrainConfig(algorithm="gvm-raft").validate()
    assert (c.gvm_budget, c.gvm_stage1, c.gvm_alpha, c.gvm_beta) == (16, 8, 1e-3, 2.0)
    assert c.max_samples_per_step == c.batch_size * 16
    errors = TrainConfig.dict_errors({"algorithm": "gvm-raft", "gvm_budget": 8})
    assert [e.field for e in errors] == ["gvm_budget"]
    assert "gvm_budget - gvm_stage1" in errors[0].reason
    assert [e.field for e in TrainConfig.dict_errors({"algorithm": "gvm-raft", "gvm_budget": 60,
                                                      "gvm_max_samples": 40})] == ["gvm_budget"]
    assert [e.field for e in TrainConfig.dict_errors({"algorithm": "gvm-raft",
                                                      "gvm_stage1": 0})] == ["gvm_stage1"]
    assert not TrainConfig.dict_errors({"algorithm": "grpo", "gvm_budget": 8})
    record = get_algorithm("gvm-raft")
    assert f"## {record.label} (`{record.name}`)" in config_reference()
    assert "`gvm_budget`" in config_reference()
