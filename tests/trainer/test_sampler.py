"""The adaptive sampler on scripted reward streams: every branch of the algorithm
(docs/architecture.md, "The algorithm")."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.sampler import AdaptiveSampler, positive_target
from trainer.seeds import derive_seed, prompt_key, request_seed


def drive(rule: str, streams: list[list[list[float]]], *, n: int = 4, m: int = 8,
          rounds: int = 4, seed: int = 0) -> AdaptiveSampler:
    """Feed streams[prompt][round] (rewards of that round) to active prompts, round by round."""
    s = AdaptiveSampler(len(streams), algorithm=rule, group_size=n, samples_per_round=m,
                        max_rounds=rounds, seed=seed)
    while not s.done:
        for i in s.active_indices():
            s.observe_many([i] * m, streams[i][s.round - 1])
        s.end_round()
    return s


ONES, ZEROS = [1.0] * 8, [0.0] * 8
MIXED = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]  # 3 positives, 5 negatives


def test_exit_in_round_one_and_balanced_downsample() -> None:
    res = drive("ada-balance", [[MIXED]]).finalize().prompt(0)
    assert res.exit_round == 1 and res.rounds_used == 1 and res.resolved
    assert (res.positives, res.negatives) == (3, 5)
    assert (res.kept_positives, res.kept_negatives) == (2, 2)
    kept = [res.rewards[i] for i in res.kept_indices]
    assert sorted(kept) == [0.0, 0.0, 1.0, 1.0]
    # Global baseline: mean of the whole pool (3/8), not of the kept group.
    assert res.baseline == pytest.approx(3 / 8)
    for i, (r, k, a) in enumerate(zip(res.rewards, res.kept, res.advantages, strict=True)):
        assert a == pytest.approx(r - 3 / 8 if k else 0.0), i


def test_exit_in_last_round() -> None:
    stream = [ZEROS, ZEROS, ZEROS, [1.0, 1.0] + [0.0] * 6]
    s = drive("ada-balance", [stream])
    res = s.finalize().prompt(0)
    assert res.exit_round == 4 and res.rounds_used == 4
    assert (res.positives, res.negatives) == (2, 30)
    assert (res.kept_positives, res.kept_negatives) == (2, 2)
    assert [st.active_prompts for st in s.round_stats] == [1, 1, 1, 1]
    assert [st.finished for st in s.round_stats] == [0, 0, 0, 1]
    assert res.rounds == [1] * 8 + [2] * 8 + [3] * 8 + [4] * 8


def test_prompts_leave_at_different_rounds() -> None:
    s = drive("ada-pos", [[MIXED], [ZEROS, ONES], [ZEROS] * 4])
    stats = [(st.round, st.active_prompts, st.samples, st.positives, st.finished)
             for st in s.round_stats]
    assert stats == [(1, 3, 24, 3, 1), (2, 2, 16, 8, 1), (3, 1, 8, 0, 0), (4, 1, 8, 0, 0)]
    out = s.finalize()
    assert out.samples.tolist() == [8, 16, 32]
    assert out.exit_round.tolist() == [1, 2, 0]


def test_unresolved_ada_balance_missing_negatives_fills_from_positives() -> None:
    stream = [ONES, ONES, [1.0] * 7 + [0.0], ONES]  # one negative only
    res = drive("ada-balance", [stream]).finalize().prompt(0)
    assert res.exit_round is None and res.missing == "negatives"
    assert (res.kept_positives, res.kept_negatives) == (3, 1)  # filled from the positive side
    assert res.baseline == pytest.approx(31 / 32)


def test_unresolved_ada_balance_missing_positives() -> None:
    stream = [ZEROS, ZEROS, ZEROS, [1.0] + [0.0] * 7]
    res = drive("ada-balance", [stream]).finalize().prompt(0)
    assert res.exit_round is None and res.missing == "positives"
    assert (res.kept_positives, res.kept_negatives) == (1, 3)


def test_unresolved_ada_pos_keeps_negatives_with_zero_advantage() -> None:
    res = drive("ada-pos", [[ZEROS] * 4]).finalize().prompt(0)
    assert res.exit_round is None and res.missing == "positives"
    assert (res.kept_positives, res.kept_negatives) == (0, 4)
    assert res.advantages == [0.0] * 32


def test_unresolved_ada_pos_positive_target() -> None:
    resolved = np.array([False, False, False, False, True])
    pos = np.array([0, 3, 7, 1, 7])
    pool = np.array([32, 8, 8, 32, 8])
    # ceil(0)=0 -> 1; ceil(1.5)=2; ceil(3.5)=4 -> n-1=3; ceil(0.125)=1; resolved: n//2.
    assert positive_target("ada-pos", resolved, pos, pool, 4).tolist() == [1, 2, 3, 1, 2]
    assert positive_target("ada-balance", resolved, pos, pool, 4).tolist() == [2] * 5


def test_ada_pos_resolved_fill_from_negatives() -> None:
    one_pos = [1.0] + [0.0] * 7
    res = drive("ada-pos", [[one_pos]]).finalize().prompt(0)
    assert res.exit_round == 1
    assert (res.kept_positives, res.kept_negatives) == (1, 3)


def test_pool_smaller_than_group_size() -> None:
    s = AdaptiveSampler(2, algorithm="ada-balance", group_size=4, samples_per_round=2,
                        max_rounds=1, seed=0)
    s.observe_many([0, 0, 1, 1], [1.0, 0.0, 1.0, 1.0])
    s.end_round()
    out = s.finalize()
    a, b = out.prompt(0), out.prompt(1)
    assert a.kept == [True, True] and b.kept == [True, True]
    assert (b.kept_positives, b.kept_negatives) == (2, 0)
    assert a.missing == "positives" and b.missing == "negatives"


def test_grpo_is_one_round_of_n_all_kept_with_group_std() -> None:
    s = AdaptiveSampler(2, algorithm="grpo", group_size=4, samples_per_round=8, max_rounds=4)
    assert (s.samples_per_round, s.max_rounds) == (4, 1)
    s.observe_many([0] * 4 + [1] * 4, [1, 0, 0, 0, 1, 1, 1, 1])
    s.end_round()
    assert s.done
    out = s.finalize()
    assert out.kept.all() and out.exit_round.tolist() == [1, 1]
    std = np.std([1, 0, 0, 0], ddof=1)
    expect = [(r - 0.25) / (std + 1e-6) for r in (1, 0, 0, 0)]
    assert out.prompt(0).advantages == pytest.approx(expect)
    assert out.prompt(1).advantages == [0.0] * 4


def test_scalar_observe_matches_vectorised_and_is_seeded() -> None:
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]

    def run(seed: int, scalar: bool) -> list[bool]:
        s = AdaptiveSampler(1, algorithm="ada-balance", group_size=4, samples_per_round=8,
                            max_rounds=1, seed=seed)
        if scalar:
            for r in rewards:
                s.observe(0, r)
        else:
            s.observe_many([0] * 8, rewards)
        assert s.rule_met(0)
        s.end_round()
        return s.finalize().prompt(0).kept

    assert run(3, True) == run(3, False)
    picks = {tuple(run(seed, False)) for seed in range(20)}
    assert len(picks) > 1  # the choice within a side is random across seeds
    for kept in picks:
        assert sum(k for k, r in zip(kept, rewards, strict=True) if r) == 2


def test_observing_an_inactive_prompt_fails() -> None:
    s = drive("ada-pos", [[ONES], [ZEROS] * 4], rounds=1)
    with pytest.raises(RuntimeError):
        s.finalize() and s.observe(0, 1.0)
    s2 = AdaptiveSampler(1, algorithm="ada-pos", group_size=4, samples_per_round=8, max_rounds=2)
    s2.observe_many([0] * 8, ONES)
    s2.end_round()
    assert not s2.is_active(0)
    with pytest.raises(ValueError):
        s2.observe(0, 1.0)


def test_unknown_rule() -> None:
    with pytest.raises(ValueError, match="unknown exit rule"):
        AdaptiveSampler(1, algorithm="nope", group_size=4, samples_per_round=8, max_rounds=1)


def test_derive_seed_is_deterministic_and_distinct() -> None:
    assert derive_seed(0, 1, 2) == derive_seed(0, 1, 2)
    assert len({derive_seed(0, s, r) for s in range(10) for r in range(4)}) == 40


def test_request_seed_fits_torch_and_depends_on_each_part() -> None:
    base = derive_seed(7, 3, 0, 2)
    seeds = {request_seed(base, pid, j) for pid in ("a", "b", "arith-1+2") for j in range(50)}
    assert len(seeds) == 150
    assert all(0 <= s < 2**63 for s in seeds)  # torch generators take signed 64-bit seeds
    assert request_seed(base, "a", 3) == request_seed(base, "a", 3)
    assert request_seed(base, "a", 3) != request_seed(derive_seed(7, 3, 0, 3), "a", 3)
    # Ids are hashed, not parsed: ids that differ in any character differ.
    assert prompt_key("12") != prompt_key("21") and prompt_key("") != prompt_key(" ")


# --- v3: Seq exit counts and Est --------------------------------------------------------------

def drive_counts(rule: str, streams: list[list[list[float]]], k_pos: int | None,
                 k_neg: int | None, *, n: int = 4, m: int = 8, rounds: int = 4) -> AdaptiveSampler:
    s = AdaptiveSampler(len(streams), algorithm=rule, group_size=n, samples_per_round=m,
                        max_rounds=rounds, k_pos=k_pos, k_neg=k_neg)
    while not s.done:
        for i in s.active_indices():
            s.observe_many([i] * m, streams[i][s.round - 1])
        s.end_round()
    return s


ONE_POS = [1.0] + [0.0] * 7


def test_seq_pos_with_k_pos_three_waits_for_three_positives() -> None:
    # MIXED has 3 positives: out after round 1. One positive a round: out after round 3.
    s = drive_counts("ada-pos", [[MIXED], [ONE_POS] * 4, [ZEROS, ONE_POS, ZEROS, ZEROS]], 3,
                     None)
    out = s.finalize()
    assert out.exit_round.tolist() == [1, 3, 0]
    assert out.missing == [None, None, "positives"]
    # The default rule (K_pos = 1) would have let all three go after their first positive.
    default = drive_counts("ada-pos", [[MIXED], [ONE_POS] * 4, [ZEROS, ONE_POS, ZEROS, ZEROS]],
                           None, None).finalize()
    assert default.exit_round.tolist() == [1, 1, 2]


def test_seq_balance_with_other_counts() -> None:
    # K_pos = 1, K_neg = 6: MIXED (3+, 5-) misses one negative in round 1, has 10 after round 2.
    out = drive_counts("ada-balance", [[MIXED, MIXED], [ONES] * 4], 1, 6).finalize()
    assert out.exit_round.tolist() == [2, 0]
    assert out.missing == [None, "negatives"]
    # Seq-balance with 8 of each (the paper's example) and n = 16: 8 positives and 8 negatives
    # needed; MIXED supplies 3 and 5 per round, so round 3 (9+, 15-) is the first that has both.
    s = drive_counts("ada-balance", [[MIXED] * 4], 8, 8, n=16, m=8)
    res = s.finalize().prompt(0)
    assert res.exit_round == 3 and (res.positives, res.negatives) == (9, 15)
    assert (res.kept_positives, res.kept_negatives) == (8, 8)


def test_default_exit_counts_reproduce_v1_rules() -> None:
    for n in (2, 4, 5, 8):
        s = AdaptiveSampler(1, algorithm="ada-balance", group_size=n, samples_per_round=8,
                            max_rounds=1)
        assert (s.k_pos, s.k_neg) == (n // 2, n - n // 2)
    s = AdaptiveSampler(1, algorithm="ada-pos", group_size=4, samples_per_round=8, max_rounds=1)
    assert (s.k_pos, s.k_neg) == (1, 0)


def test_est_is_one_round_of_the_allocation_all_kept_with_hybrid_advantages() -> None:
    s = AdaptiveSampler(3, algorithm="ada-est", group_size=4, samples_per_round=8, max_rounds=4,
                        allocation=[2, 5, 3], eps=1e-6)
    assert s.max_rounds == 1 and s.round_counts([0, 1, 2]) == [2, 5, 3]
    assert s.round_counts([2, 0]) == [3, 2]
    s.observe_many([0, 0] + [1] * 5 + [2] * 3, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    s.end_round()
    assert s.done
    out = s.finalize()
    assert out.kept.all() and out.exit_round.tolist() == [1, 1, 1]
    assert out.samples.tolist() == [2, 5, 3]
    assert out.kept_positives.tolist() == [2, 1, 0]
    assert out.kept_negatives.tolist() == [0, 4, 3]
    assert out.missing == [None, None, None]
    # Prompt 1: mean 0.2, so A = (r - 0.2) / sqrt(0.2 + 1e-6); prompts 0 and 2 agree: A = 0.
    w = 1 / np.sqrt(0.2 + 1e-6)
    assert out.prompt(1).advantages == pytest.approx([0.8 * w] + [-0.2 * w] * 4)
    assert out.prompt(0).advantages == [0.0, 0.0] and out.prompt(2).advantages == [0.0] * 3


def test_est_without_residual_weight_is_the_plain_global_baseline() -> None:
    s = AdaptiveSampler(1, algorithm="ada-est", group_size=4, samples_per_round=8, max_rounds=1,
                        allocation=[4], advantage_estimator="global")
    s.observe_many([0] * 4, [1, 0, 0, 0])
    s.end_round()
    assert s.finalize().prompt(0).advantages == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_est_needs_an_allocation() -> None:
    with pytest.raises(ValueError, match="allocation"):
        AdaptiveSampler(2, algorithm="ada-est", group_size=4, samples_per_round=8, max_rounds=1)
    with pytest.raises(ValueError, match="allocation"):
        AdaptiveSampler(2, algorithm="ada-est", group_size=4, samples_per_round=8, max_rounds=1,
                        allocation=[4])
    with pytest.raises(ValueError, match="at least one"):
        AdaptiveSampler(2, algorithm="ada-est", group_size=4, samples_per_round=8, max_rounds=1,
                        allocation=[4, 0])
