"""Reinforce-Ada's sequential variants (arXiv 2510.04996; v3 "Seq", v1/v2 ``ada-pos`` and
``ada-balance``): sample a prompt in rounds of M until its exit rule holds or N rounds are
used, down-sample the pool to a group of n, baseline from the whole pool:

    exit rule (v3):  positives >= K_pos  and  negatives >= K_neg
    Seq-pos:         (K_pos, K_neg) = (1, 0)             by default
    Seq-balance:     (K_pos, K_neg) = (n//2, n - n//2)   by default
    A_i = r_i - mean(pool)                               (global baseline; std optional)

The down-sample takes up to n//2 positives and n - n//2 negatives, then fills from the side
with more left; an unresolved Seq-pos prompt aims for its pool's own positive share instead
(``proportional_target``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.algorithms.base import Algorithm
from trainer.algorithms.sampling import sample_batch
from trainer.config import MAX_SAMPLES_PER_PROMPT
from trainer.validation import ConfigError, CrossCheck

if TYPE_CHECKING:
    from trainer.config import TrainConfig


def exit_counts_rule(pos: np.ndarray, neg: np.ndarray, k_pos: int, k_neg: int) -> np.ndarray:
    """v3's Seq rule: at least K_pos positives and at least K_neg negatives."""
    return (np.asarray(pos) >= k_pos) & (np.asarray(neg) >= k_neg)


def proportional_target(resolved: np.ndarray, positives: np.ndarray, pool: np.ndarray,
                        n: int) -> np.ndarray:
    """Seq-pos: an unresolved prompt's group mirrors its pool, ``clamp(ceil(pos/pool * n), 1,
    n-1)`` positives, instead of forcing balance; a resolved one aims for n//2. (With the
    round-based rule an unresolved Seq-pos prompt has no positive, so the target cannot be met
    and the fill takes negatives; it matters for schedulers that stop early for other
    reasons.)"""
    target = np.full(np.shape(positives), n // 2, dtype=np.int64)
    pool_safe = np.maximum(pool, 1)
    prop = np.ceil(positives * n / pool_safe - 1e-9).astype(np.int64)
    prop = np.clip(prop, 1, n - 1)
    return np.where(resolved, target, prop)


def samples_cover_group(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.samples_per_round < c.group_size:
        yield "samples_per_round", (f"must be >= group_size ({c.group_size}), got "
                                    f"{c.samples_per_round}")


def pool_fits_columns(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.samples_per_round * c.max_rounds > MAX_SAMPLES_PER_PROMPT:
        yield "max_rounds", (f"samples_per_round x max_rounds = "
                             f"{c.samples_per_round * c.max_rounds:,} responses per prompt; "
                             f"at most {MAX_SAMPLES_PER_PROMPT:,}")


def exit_counts_start(c: TrainConfig) -> Iterator[tuple[str, str]]:
    k_pos, k_neg = c.exit_counts
    if k_pos + k_neg < 1:
        yield "K_pos", ("K_pos + K_neg must be >= 1 (with 0 and 0 every prompt would stop "
                        "before it was sampled)")


def exit_counts_reachable(c: TrainConfig) -> Iterator[tuple[str, str]]:
    k_pos, k_neg = c.exit_counts
    cap = c.samples_per_round * c.max_rounds
    if k_pos + k_neg > cap:
        yield "K_pos", (f"K_pos + K_neg = {k_pos + k_neg} can never be met within "
                        f"samples_per_round x max_rounds = {cap:,} samples")


# Empty exit counts take their values from n (``default_exit_counts``): group_size is an input.
SEQ_CHECKS = (
    CrossCheck(("samples_per_round", "group_size"), samples_cover_group,
               {"samples_per_round": 2}),
    CrossCheck(("samples_per_round", "max_rounds"), pool_fits_columns,
               {"samples_per_round": 4096, "max_rounds": 16}),
    CrossCheck(("K_pos", "K_neg", "group_size"), exit_counts_start, {"K_pos": 0, "K_neg": 0}),
    CrossCheck(("K_pos", "K_neg", "group_size", "samples_per_round", "max_rounds"),
               exit_counts_reachable, {"K_pos": 40}),
)


def seq_budget(c: TrainConfig, budget: int) -> dict[str, Any]:
    """A matched budget caps a prompt's pool: M x N <= budget, with n <= M <= the config's M
    (at most the budget), N = floor(budget / M), M the one whose cap comes closest to the
    budget, the largest of those (a divisor of the budget: M x N = budget exactly; 13 at n=4,
    M=8 is 6 x 2 = 12). What a step spends under the cap depends on how soon prompts meet the
    exit rule: the preflight predicts it from measured pass rates. The exit counts stay (empty
    ones follow n)."""
    n, m_base = c.group_size, c.samples_per_round
    if budget < n:
        raise ConfigError("budget", f"{budget} is below group_size ({n}): a Seq prompt's pool "
                          "must hold its update group of n")
    m = max(range(n, max(n, min(m_base, budget)) + 1), key=lambda d: (d * (budget // d), d))
    return {"samples_per_round": m, "max_rounds": budget // m}


def _seq(name: str, label: str, help: str, default_exit_counts, **extra: object) -> Algorithm:
    return Algorithm(
        name=name, label=label, help=help, sampling="rounds", sample_step=sample_batch,
        exit_rule=exit_counts_rule, default_exit_counts=default_exit_counts,
        advantage="global", std_normalize=False,
        max_samples_per_prompt=lambda c: c.samples_per_round * c.max_rounds,
        max_samples_per_step=lambda c: c.batch_size * c.samples_per_round * c.max_rounds,
        step_shape="batch_size x samples_per_round x max_rounds",
        config_checks=SEQ_CHECKS, aka=f"v1/v2: {name}",
        match_budget=seq_budget, budget_match="cap",
        budget_note="samples_per_round x max_rounds <= budget (M from n to the config's M, "
                    "the cap closest to the budget): a cap; a step spends less as prompts meet "
                    "the exit rule sooner",
        summary_fields=("group_size", "samples_per_round", "max_rounds"), **extra)


SEQ_POS = _seq("ada-pos", "Reinforce-Ada Seq-pos",
               "Seq-pos: sample in rounds until K_pos positives",
               lambda n: (1, 0), positive_target=proportional_target)
SEQ_BALANCE = _seq("ada-balance", "Reinforce-Ada Seq-balance",
                   "Seq-balance: until K_pos positives and K_neg negatives",
                   lambda n: (n // 2, n - n // 2))
