"""A sampled step as flat arrays (``SamplerResult``): every sample of every prompt's pool, what
the update keeps of it, and the per-prompt figures derived from those.

What an algorithm decides is the pool (what was drawn, in which round), which samples are kept
and with what loss weight; everything else is derived: the pool counts, the offsets, the
baseline, the kept counts and the advantages. ``SamplerResult.of_pools`` builds a result from
what is decided and ``with_kept`` changes what is kept; both recompute every derived field, so
no result holds a stale count (DAPO's further batches, an algorithm's own keep rule and the
loop's filters all go through them).

Pure numpy: no torch here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

# (rewards, prompt of each sample, kept mask, number of prompts) -> advantages (0 where not
# kept): an estimator of trainer.advantages with the run's options bound.
Estimator = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


@dataclass
class PromptResult:
    """One prompt's outcome for the step; pool-ordered lists (index = position in the pool)."""

    index: int
    rewards: list[float]
    rounds: list[int]            # round (1-based) each pool sample was drawn in
    kept: list[bool]
    advantages: list[float]      # 0.0 where not kept
    positives: int
    negatives: int
    rounds_used: int
    exit_round: int | None       # None: unresolved
    missing: str | None          # "positives" / "negatives" for unresolved prompts
    baseline: float
    kept_positives: int
    kept_negatives: int
    weights: list[float] = field(default_factory=list)  # the loss weight of each sample

    @property
    def kept_indices(self) -> list[int]:
        return [i for i, k in enumerate(self.kept) if k]

    @property
    def resolved(self) -> bool:
        return self.exit_round is not None


@dataclass
class SamplerResult:
    """The finalized step in flat arrays (one entry per sample, sorted by prompt then pool index)
    and per-prompt arrays; ``prompt(i)`` / ``prompts()`` give the friendly per-prompt view.

    Decided by the sampling: the per-sample arrays up to ``positive``, the per-prompt
    ``rounds_used``, ``exit_round``, ``missing``, ``first_round_*`` and ``batch``; by the
    algorithm's keep rule: ``kept`` and ``weights``. Derived from them (``of_pools``,
    ``with_kept``): ``samples``, ``positives``, ``negatives``, ``offsets``, ``baseline``,
    ``kept_positives``, ``kept_negatives`` and ``advantages`` (by ``estimator``)."""

    sample_prompt: np.ndarray     # int, prompt index
    sample_pool_index: np.ndarray  # int, position in the prompt's pool
    sample_round: np.ndarray      # int, 1-based
    sample_order: np.ndarray      # int, position in observation order (to map back to inputs)
    rewards: np.ndarray
    positive: np.ndarray          # bool
    kept: np.ndarray              # bool
    advantages: np.ndarray        # 0 where not kept
    samples: np.ndarray           # per prompt
    positives: np.ndarray
    negatives: np.ndarray
    rounds_used: np.ndarray
    exit_round: np.ndarray        # 0: unresolved; the round (numbered across the step) it ended
    missing: list[str | None]
    baseline: np.ndarray          # per prompt: the mean reward of its whole pool
    kept_positives: np.ndarray
    kept_negatives: np.ndarray
    first_round_positives: np.ndarray
    first_round_samples: np.ndarray
    offsets: np.ndarray = field(repr=False)  # prompt i's samples are [offsets[i], offsets[i+1])
    # Per sample: the weight of its term in the policy loss (the algorithm's; 1 by default).
    weights: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    # Per prompt: the generation batch (1-based) it was drawn in: 1 unless the algorithm draws
    # further batches of prompts in a step (DAPO).
    batch: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    # The advantage estimator of the step, with its options: ``with_kept`` recomputes with it.
    estimator: Estimator | None = field(default=None, repr=False, compare=False)
    # Per sample: the verifier's own score, before any shaping (overlong): ``rewards`` where
    # nothing shapes them. Positives and DAPO's filter may read it (``positive_metric``,
    # ``dapo_filter_metric``).
    scores: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    # Per sample: what the KL in the reward takes off its reward (``use_kl_in_reward``: the
    # coefficient times its KL summed over its tokens, ``trainer.kl``); None: nothing.
    kl_penalty: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.scores is None:
            self.scores = self.rewards
        if self.weights is None:
            self.weights = np.ones(len(self.rewards))
        if self.batch is None:
            self.batch = np.ones(len(self.samples), dtype=np.int64)

    @classmethod
    def of_pools(cls, *, num_prompts: int, sample_prompt: np.ndarray,
                 sample_pool_index: np.ndarray, sample_round: np.ndarray,
                 sample_order: np.ndarray, rewards: np.ndarray, positive: np.ndarray,
                 rounds_used: np.ndarray, exit_round: np.ndarray, missing: list[str | None],
                 first_round_positives: np.ndarray, first_round_samples: np.ndarray,
                 kept: np.ndarray | None = None, weights: np.ndarray | None = None,
                 batch: np.ndarray | None = None, estimator: Estimator | None = None,
                 advantages: np.ndarray | None = None,
                 scores: np.ndarray | None = None) -> SamplerResult:
        """A result from what was decided, samples sorted by prompt then pool index: the pool
        counts, offsets and baselines are derived here, and what depends on ``kept`` (nothing
        kept unless given) by ``with_kept``."""
        P = int(num_prompts)
        p = np.asarray(sample_prompt, dtype=np.int64)
        r = np.asarray(rewards, dtype=np.float64)
        pos = np.asarray(positive, dtype=bool)
        positives = np.bincount(p[pos], minlength=P).astype(np.int64)
        negatives = np.bincount(p[~pos], minlength=P).astype(np.int64)
        pool = positives + negatives
        offsets = np.zeros(P + 1, dtype=np.int64)
        np.cumsum(pool, out=offsets[1:])
        baseline = np.divide(np.bincount(p, weights=r, minlength=P), pool,
                             out=np.zeros(P), where=pool > 0)
        none = np.zeros(len(p), dtype=bool)
        pooled = cls(
            sample_prompt=p, sample_pool_index=np.asarray(sample_pool_index, dtype=np.int64),
            sample_round=np.asarray(sample_round, dtype=np.int64),
            sample_order=np.asarray(sample_order, dtype=np.int64), rewards=r, positive=pos,
            kept=none, advantages=np.zeros(len(p)), samples=pool, positives=positives,
            negatives=negatives, rounds_used=np.asarray(rounds_used, dtype=np.int64),
            exit_round=np.asarray(exit_round, dtype=np.int64), missing=list(missing),
            baseline=baseline, kept_positives=np.zeros(P, dtype=np.int64),
            kept_negatives=np.zeros(P, dtype=np.int64),
            first_round_positives=np.asarray(first_round_positives, dtype=np.int64),
            first_round_samples=np.asarray(first_round_samples, dtype=np.int64),
            offsets=offsets, weights=weights, batch=batch, estimator=estimator,
            scores=None if scores is None else np.asarray(scores, dtype=np.float64))
        if kept is None:
            return pooled
        return pooled.with_kept(kept, advantages=advantages)

    def with_kept(self, kept: np.ndarray, *, weights: np.ndarray | None = None,
                  advantages: np.ndarray | None = None) -> SamplerResult:
        """A copy that keeps ``kept`` (a bool per sample) for the update, with every field
        that depends on it recomputed: the kept counts and the advantages (the result's
        estimator over the new kept set, unless ``advantages`` are given; 0 where not kept).
        ``weights`` (per sample) replace the loss weights; by default they stay."""
        kept = np.asarray(kept, dtype=bool)
        if kept.shape != self.rewards.shape:
            raise ValueError(f"kept must have one entry per sample ({len(self.rewards)}), "
                             f"got shape {kept.shape}")
        P, p = self.num_prompts, self.sample_prompt
        if advantages is None:
            if self.estimator is None:
                raise ValueError("this result has no advantage estimator: give advantages")
            advantages = self.estimator(self.final_rewards, p, kept, P)
        advantages = np.where(kept, np.asarray(advantages, dtype=np.float64), 0.0)
        w = self.weights if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != self.rewards.shape:
            raise ValueError(f"weights must have one entry per sample ({len(self.rewards)}), "
                             f"got shape {w.shape}")
        return replace(
            self, kept=kept, advantages=advantages, weights=w,
            kept_positives=np.bincount(p[kept & self.positive], minlength=P).astype(np.int64),
            kept_negatives=np.bincount(p[kept & ~self.positive], minlength=P).astype(np.int64))

    @property
    def final_rewards(self) -> np.ndarray:
        """The rewards the advantages use: ``rewards`` less the KL in the reward where there is
        one (verl's ``token_level_rewards`` summed over the response)."""
        return self.rewards if self.kl_penalty is None else self.rewards - self.kl_penalty

    def with_kl_penalty(self, penalty: np.ndarray) -> SamplerResult:
        """A copy whose rewards lose ``penalty`` (one per sample) in the advantages, which are
        recomputed over the same kept samples (the result's estimator)."""
        penalty = np.asarray(penalty, dtype=np.float64)
        if penalty.shape != self.rewards.shape:
            raise ValueError(f"penalty must have one entry per sample ({len(self.rewards)}), "
                             f"got shape {penalty.shape}")
        return replace(self, kl_penalty=penalty).with_kept(self.kept)

    @property
    def num_prompts(self) -> int:
        return len(self.samples)

    def prompt(self, i: int) -> PromptResult:
        s = slice(int(self.offsets[i]), int(self.offsets[i + 1]))
        er = int(self.exit_round[i])
        return PromptResult(
            index=i, rewards=self.rewards[s].tolist(), rounds=self.sample_round[s].tolist(),
            kept=self.kept[s].tolist(), advantages=self.advantages[s].tolist(),
            positives=int(self.positives[i]), negatives=int(self.negatives[i]),
            rounds_used=int(self.rounds_used[i]), exit_round=er if er > 0 else None,
            missing=self.missing[i], baseline=float(self.baseline[i]),
            kept_positives=int(self.kept_positives[i]),
            kept_negatives=int(self.kept_negatives[i]), weights=self.weights[s].tolist())

    def prompts(self) -> list[PromptResult]:
        return [self.prompt(i) for i in range(self.num_prompts)]
