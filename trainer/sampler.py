"""Reinforce-Ada's adaptive sampler (arXiv 2510.04996) as an incremental state machine.

One ``AdaptiveSampler`` covers one training step. A scheduler (``trainer.schedulers``) feeds it
rewards with ``observe``; ``end_round`` retires the active prompts whose exit rule is met;
``finalize`` down-samples every prompt's pool to the update group and computes advantages
(docs/architecture.md, "The algorithm"):

1. every prompt starts active; each round draws ``samples_per_round`` (M) responses per active
   prompt, for at most ``max_rounds`` (N) rounds;
2. after each round an active prompt meeting its algorithm's exit rule becomes inactive
   (``Algorithm.exit_rule``; v3's Seq rule is "at least K_pos positives and at least K_neg
   negatives"; ada-pos defaults to (1, 0) and ada-balance to (n//2, n - n//2));
3. prompts still active after the last round are "unresolved";
4. the algorithm's keep rule (``Algorithm.keep``) says which pool samples the update takes,
   and may weight them. By default the update group is a down-sample of the pool to
   ``min(n, pool)`` responses (``balanced_downsample``): up to ``n//2`` positives and up to
   ``n - n//2`` negatives, then the free slots from whichever side has more left
   (``Algorithm.positive_target`` may aim for another number of positives: an unresolved
   Seq-pos prompt mirrors its pool). Within a side the choice is seeded and uniform;
5. advantages come from the algorithm's estimator in ``trainer.advantages`` (global baseline
   for Reinforce-Ada, group statistics for GRPO), over what is kept.

An algorithm without an exit rule takes one round: ``draws`` samples per prompt (its draws
rule, ``Algorithm.draws``; by default ``group_size``: GRPO, and DAPO per batch), or
``allocation[i]`` samples for prompt i when it allocates (Est, ``trainer.allocation``); an
algorithm that does not down-sample keeps the whole pool.

The round scheduler drives the sampler with ``observe_many`` / ``end_round``. The per-prompt
schedulers drive the same object one prompt at a time: after ``start_per_prompt()`` every
prompt has its own round counter (``prompt_round``), and ``end_prompt_round(i)`` closes prompt
i's current round alone, checks its exit rule and says whether it should draw another
(``rule_met`` lets a streaming scheduler stop a prompt mid-round). Round statistics come out the
same either way: round t's ``RoundStat`` is emitted once no prompt is still sampling in round t
or earlier. State lives in numpy arrays and the bookkeeping is vectorised so a 512 x 32 step
costs about a millisecond.

Pure python/numpy: no torch here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.advantages import ADVANTAGE_ESTIMATORS, EPS, positives_by
from trainer.registry import get_algorithm
from trainer.result import PromptResult, SamplerResult
from trainer.types import RoundStat

if TYPE_CHECKING:
    from trainer.algorithms.base import Algorithm
    from trainer.config import TrainConfig

__all__ = ["AdaptiveSampler", "PromptResult", "SamplerResult", "balanced_downsample",
           "make_sampler", "positive_target"]


def _one_round(pos: np.ndarray, neg: np.ndarray, k_pos: int, k_neg: int) -> np.ndarray:
    # No exit rule (GRPO, DAPO's batches, Est): one round, then every prompt is done; its
    # exit_round is 1.
    return np.ones(np.shape(pos), dtype=bool)


def positive_target(algorithm: str | Algorithm, resolved: np.ndarray, positives: np.ndarray,
                    pool: np.ndarray, n: int) -> np.ndarray:
    """How many positives the down-sample aims for, per prompt: ``n//2`` in general, the
    algorithm's own rule where it has one (``Algorithm.positive_target``; Seq-pos mirrors an
    unresolved prompt's pool: ``clamp(ceil(pos/pool * n), 1, n-1)``)."""
    return get_algorithm(algorithm).positive_target(resolved, positives, pool, n)


def _splits(outstanding: int, partial: bool) -> tuple[np.ndarray, np.ndarray]:
    # (positives, negatives) among ``outstanding`` samples: every split of all of them, or
    # (partial) of any number of them.
    if not partial:
        a = np.arange(outstanding + 1)
        return a, outstanding - a
    a, b = np.triu_indices(outstanding + 1)
    return a, b - a


class AdaptiveSampler:
    """Per-step state of adaptive sampling for ``num_prompts`` prompts.

    Call ``observe`` / ``observe_many`` for rewards of active prompts, ``end_round`` after every
    round, then ``finalize`` once. ``round_counts`` and ``max_rounds`` are what a scheduler
    should use; an algorithm without an exit rule takes one round of ``draws`` samples per
    prompt (default ``group_size``), or of its ``allocation``.

    ``k_pos`` / ``k_neg``: the exit counts (None: the algorithm's defaults). ``allocation``:
    samples per prompt of the single round of an algorithm that allocates (required for it).
    ``keep``: which pool samples the update takes (``Algorithm.keep``; default the
    algorithm's). ``eps``: the estimator's epsilon (``trainer.advantages``).
    ``positive_metric``: what a positive reads (``trainer.advantages.positives_by``): the
    verifier's score (acc, score) or the shaped reward (seq_reward, seq_final_reward), each
    against ``positive_threshold``; ``observe`` takes both (the score defaults to the reward).
    """

    def __init__(self, num_prompts: int, *, algorithm: str | Algorithm, group_size: int,
                 samples_per_round: int, max_rounds: int, positive_threshold: float = 0.5,
                 std_normalize: bool | None = None, advantage_estimator: str | None = None,
                 seed: int = 0, k_pos: int | None = None, k_neg: int | None = None,
                 allocation: Sequence[int] | np.ndarray | None = None,
                 eps: float = EPS, draws: int | None = None, keep: KeepRule | None = None,
                 positive_metric: str = "acc") -> None:
        try:
            algo = get_algorithm(algorithm)
        except KeyError:
            raise ValueError(f"unknown exit rule {algorithm!r}: no algorithm of that name is "
                             f"registered (trainer.algorithms)") from None
        if group_size < 1 or num_prompts < 0:
            raise ValueError("group_size must be >= 1 and num_prompts >= 0")
        self.algorithm = algo
        self.exit_rule = algo.exit_rule or _one_round
        self.num_prompts = num_prompts
        self.group_size = group_size
        default_pos, default_neg = algo.default_exit_counts(group_size)
        self.k_pos = default_pos if k_pos is None else k_pos
        self.k_neg = default_neg if k_neg is None else k_neg
        self.allocation: np.ndarray | None = None
        if algo.allocates:
            if allocation is None or len(allocation) != num_prompts:
                raise ValueError(f"{algo.name} needs an allocation: samples for every prompt")
            self.allocation = np.asarray(allocation, dtype=np.int64)
            if num_prompts and self.allocation.min() < 1:
                raise ValueError("every prompt needs at least one sample")
            samples_per_round = int(self.allocation.max()) if num_prompts else 0
            max_rounds = 1
        elif not algo.eliminates:
            samples_per_round, max_rounds = group_size if draws is None else draws, 1
        if samples_per_round < 1 and num_prompts and not algo.allocates:
            raise ValueError(f"a prompt must draw at least one sample, got {samples_per_round}")
        self.keep = keep or default_keep(algo)
        self.samples_per_round = samples_per_round
        self.max_rounds = max_rounds
        self.eps = eps
        self.positive_threshold = positive_threshold
        self.positive_metric = positive_metric
        positives_by(np.zeros(0), np.zeros(0), positive_metric, 0.0)  # an unknown one raises
        self.std_normalize = algo.std_normalize if std_normalize is None else std_normalize
        self.advantage_estimator = advantage_estimator or algo.advantage
        self.estimator = partial(ADVANTAGE_ESTIMATORS[self.advantage_estimator],
                                 std_normalize=self.std_normalize, eps=eps)
        self.seed = seed
        self.round = 1  # the round being observed (1-based), round-based use
        # Per-prompt use (start_per_prompt): each prompt's own current round, whether it still
        # samples, what it drew in its current round, and per-round sums for the RoundStats.
        self._per_prompt = False
        self._round_of = np.ones(num_prompts, dtype=np.int64)
        self._open = np.ones(num_prompts, dtype=bool)
        self._cur_n = np.zeros(num_prompts, dtype=np.int64)
        self._cur_pos = np.zeros(num_prompts, dtype=np.int64)
        # columns: active prompts, samples, positives, finished, tokens; row r-1 is round r
        self._round_sums = np.zeros((max(max_rounds, 1), 5), dtype=np.int64)
        self._active = np.ones(num_prompts, dtype=bool)
        self._pos = np.zeros(num_prompts, dtype=np.int64)
        self._neg = np.zeros(num_prompts, dtype=np.int64)
        self._rounds_used = np.zeros(num_prompts, dtype=np.int64)
        self._seen_this_round = np.zeros(num_prompts, dtype=bool)
        self._exit_round = np.zeros(num_prompts, dtype=np.int64)
        self._first_pos = np.zeros(num_prompts, dtype=np.int64)
        self._first_n = np.zeros(num_prompts, dtype=np.int64)
        # Observations as chunks of (prompt, reward, round, score) arrays; scalar observations
        # buffer in python lists and are flushed as one chunk.
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._buf_p: list[int] = []
        self._buf_r: list[float] = []
        self._buf_t: list[int] = []
        self._buf_s: list[float] = []
        self._finalized = False
        self._exit_possible: dict[tuple[int, int, int, bool], bool] = {}
        self.round_stats: list[RoundStat] = []
        self._round_samples = 0
        self._round_pos = 0

    # --- observing -----------------------------------------------------------------------------
    def is_active(self, prompt_idx: int) -> bool:
        return bool(self._active[prompt_idx])

    def round_counts(self, prompt_indices: Sequence[int]) -> list[int]:
        """How many responses to draw for each of these prompts in the current round."""
        if self.allocation is not None:
            return self.allocation[np.asarray(prompt_indices, dtype=np.int64)].tolist()
        return [self.samples_per_round] * len(prompt_indices)

    def active_indices(self) -> list[int]:
        return np.flatnonzero(self._active).tolist()

    @property
    def done(self) -> bool:
        """No prompt active or all rounds used: time to finalize."""
        if self._per_prompt:
            return not self._open.any()
        return self.round > self.max_rounds or not self._active.any()

    @property
    def has_exit_rule(self) -> bool:
        """Whether a prompt can stop before ``max_rounds`` (Seq); GRPO and Est take one round."""
        return self.algorithm.eliminates

    def pool_size(self, prompt_idx: int) -> int:
        """Samples observed for the prompt so far."""
        return int(self._pos[prompt_idx] + self._neg[prompt_idx])

    def rule_met(self, prompt_idx: int) -> bool:
        """Whether the prompt's exit rule holds on what was observed so far (streaming hook)."""
        return bool(self.exit_rule(self._pos[prompt_idx], self._neg[prompt_idx], self.k_pos,
                                   self.k_neg))

    def exit_possible(self, prompt_idx: int, outstanding: int, *, extra_pos: int = 0,
                      extra_neg: int = 0, partial: bool = False) -> bool:
        """Whether some outcome of ``outstanding`` samples not yet back can meet the prompt's
        exit rule, on top of its pool and ``extra_pos`` / ``extra_neg`` results back but not
        observed yet. The rule is checked once all of them are in (``per-prompt``: at the end
        of a round) or, ``partial``, after any number of them (``streaming``: per sample).

        False means the prompt's next round is certain to be drawn whatever comes back: an
        early-rounds scheduler may submit it now and change nothing but time. The rule is any
        function of the counts (``Algorithm.exit_rule``), so every split is tried:
        ``outstanding + 1`` of them (``partial``: every (a, b) with a + b <= outstanding)."""
        pos = int(self._pos[prompt_idx]) + extra_pos
        neg = int(self._neg[prompt_idx]) + extra_neg
        # The rule is a function of the counts alone: a scheduler asks the same few questions
        # after every arrival, so answer each once.
        key = (pos, neg, outstanding, partial)
        known = self._exit_possible.get(key)
        if known is None:
            a, b = _splits(outstanding, partial)
            known = self._exit_possible[key] = bool(
                np.any(self.exit_rule(pos + a, neg + b, self.k_pos, self.k_neg)))
        return known

    def exit_probability(self, prompt_idx: int, outstanding: int, *, extra_pos: int = 0,
                         extra_neg: int = 0) -> float:
        """The chance that the prompt's exit rule holds once ``outstanding`` more samples are
        in, each positive with the prompt's pass rate so far (Laplace's rule of succession:
        ``(pos + 1) / (pool + 2)``): how the speculative scheduler ranks which prompts are
        least likely to exit, hence most likely to need their next round."""
        pos = int(self._pos[prompt_idx]) + extra_pos
        neg = int(self._neg[prompt_idx]) + extra_neg
        p = (pos + 1) / (pos + neg + 2)
        a = np.arange(outstanding + 1)
        weights = np.array([math.comb(outstanding, k) for k in range(outstanding + 1)],
                           dtype=np.float64) * p ** a * (1 - p) ** (outstanding - a)
        met = self.exit_rule(pos + a, neg + outstanding - a, self.k_pos, self.k_neg)
        return float(np.sum(weights * np.broadcast_to(met, a.shape)))

    def is_positive(self, reward: float, score: float | None = None) -> bool:
        """Whether a response of this ``reward`` (and verifier ``score``; default the reward)
        counts as a positive (``positive_metric``)."""
        value = reward if score is None or self.positive_metric not in ("acc", "score") \
            else score
        return bool(value > self.positive_threshold)

    def observe(self, prompt_idx: int, reward: float, score: float | None = None) -> None:
        """Add one reward (and the verifier's ``score`` before shaping; default the reward) to
        an active prompt's pool in the current round."""
        if self._finalized:
            raise RuntimeError("sampler already finalized")
        if not self._active[prompt_idx]:
            raise ValueError(f"prompt {prompt_idx} is not active")
        if self._per_prompt and not self._open[prompt_idx]:
            raise ValueError(f"prompt {prompt_idx} has no round open")
        self._buf_p.append(prompt_idx)
        self._buf_r.append(float(reward))
        self._buf_t.append(int(self._round_of[prompt_idx]) if self._per_prompt else self.round)
        self._buf_s.append(float(reward if score is None else score))
        positive = self.is_positive(reward, score)
        if positive:
            self._pos[prompt_idx] += 1
            self._round_pos += 1
        else:
            self._neg[prompt_idx] += 1
        self._seen_this_round[prompt_idx] = True
        self._round_samples += 1
        self._cur_n[prompt_idx] += 1
        self._cur_pos[prompt_idx] += int(positive)

    def observe_many(self, prompt_idx: Sequence[int] | np.ndarray,
                     rewards: Sequence[float] | np.ndarray,
                     scores: Sequence[float] | np.ndarray | None = None) -> None:
        """Vectorised ``observe`` (the round scheduler's path)."""
        if self._finalized:
            raise RuntimeError("sampler already finalized")
        p = np.asarray(prompt_idx, dtype=np.int64)
        r = np.asarray(rewards, dtype=np.float64)
        sc = r if scores is None else np.asarray(scores, dtype=np.float64)
        if p.shape != r.shape or p.ndim != 1 or sc.shape != r.shape:
            raise ValueError("prompt_idx, rewards and scores must be 1-D and of the same length")
        if len(p) == 0:
            return
        if self._per_prompt:
            raise RuntimeError("observe_many is the round-based path; after start_per_prompt "
                               "use observe")
        if not self._active[p].all():
            raise ValueError(f"prompt {int(p[~self._active[p]][0])} is not active")
        self._flush()
        pos = positives_by(r, sc, self.positive_metric, self.positive_threshold)
        self._pos += np.bincount(p, weights=pos, minlength=self.num_prompts).astype(np.int64)
        self._neg += np.bincount(p, weights=~pos, minlength=self.num_prompts).astype(np.int64)
        self._seen_this_round[p] = True
        self._chunks.append((p, r, np.full(len(p), self.round, dtype=np.int64), sc))
        self._round_samples += len(p)
        self._round_pos += int(pos.sum())

    def _flush(self) -> None:
        if self._buf_p:
            p = np.asarray(self._buf_p, dtype=np.int64)
            self._chunks.append((p, np.asarray(self._buf_r, dtype=np.float64),
                                 np.asarray(self._buf_t, dtype=np.int64),
                                 np.asarray(self._buf_s, dtype=np.float64)))
            self._buf_p, self._buf_r, self._buf_t, self._buf_s = [], [], [], []

    def end_round(self, tokens: int = 0) -> RoundStat:
        """Close the current round: retire active prompts whose exit rule is met."""
        if self._per_prompt:
            raise RuntimeError("end_round is the round-based path; after start_per_prompt use "
                               "end_prompt_round")
        self._flush()
        if self.round == 1:
            self._first_pos = self._pos.copy()
            self._first_n = self._pos + self._neg
        sampled = self._seen_this_round
        active_before = int((self._active & sampled).sum())
        self._rounds_used += sampled
        met = self._active & self.exit_rule(self._pos, self._neg, self.k_pos, self.k_neg)
        self._exit_round[met] = self.round
        self._active &= ~met
        stat = RoundStat(round=self.round, active_prompts=active_before,
                         samples=self._round_samples, positives=self._round_pos,
                         finished=int(met.sum()), tokens=tokens)
        self.round_stats.append(stat)
        self.round += 1
        self._seen_this_round = np.zeros(self.num_prompts, dtype=bool)
        self._round_samples = self._round_pos = 0
        self._cur_n[:] = 0
        self._cur_pos[:] = 0
        return stat

    # --- per-prompt rounds ---------------------------------------------------------------------
    def start_per_prompt(self) -> None:
        """Switch to per-prompt rounds: from now on every prompt advances through its rounds on
        its own (``observe`` / ``end_prompt_round``). Only before anything was observed."""
        if self._chunks or self._buf_p or self.round_stats:
            raise RuntimeError("start_per_prompt must come before the first observation")
        self._per_prompt = True
        self._open = self._active.copy()

    def prompt_round(self, prompt_idx: int) -> int:
        """The round (1-based) prompt ``prompt_idx`` is sampling in."""
        return int(self._round_of[prompt_idx]) if self._per_prompt else self.round

    def is_open(self, prompt_idx: int) -> bool:
        """Whether the prompt is still sampling: active with rounds left (per-prompt use)."""
        return bool(self._open[prompt_idx])

    def end_prompt_round(self, prompt_idx: int, tokens: int = 0) -> bool:
        """Close prompt ``prompt_idx``'s current round: retire it when its exit rule is met,
        close it when that was its last round. Returns whether it draws another round.

        The same bookkeeping ``end_round`` does for the whole batch, for one prompt; round t's
        ``RoundStat`` is appended to ``round_stats`` as soon as no open prompt is still in a
        round <= t (``tokens``: the response tokens of this prompt's round, summed into it)."""
        if not self._per_prompt:
            raise RuntimeError("call start_per_prompt first")
        i = prompt_idx
        if not self._open[i]:
            raise ValueError(f"prompt {i} has no round open")
        self._flush()
        t = int(self._round_of[i])
        if t == 1:
            self._first_pos[i] = self._pos[i]
            self._first_n[i] = self._pos[i] + self._neg[i]
        sampled = self._cur_n[i] > 0
        self._rounds_used[i] += int(sampled)
        met = bool(self.exit_rule(self._pos[i], self._neg[i], self.k_pos, self.k_neg))
        self._round_sums[t - 1] += (int(sampled), self._cur_n[i], self._cur_pos[i], int(met),
                                    tokens)
        self._cur_n[i] = self._cur_pos[i] = 0
        if met:
            self._exit_round[i] = t
            self._active[i] = False
            self._open[i] = False
        self._round_of[i] = t + 1
        if t + 1 > self.max_rounds:
            self._open[i] = False
        self._emit_closed_rounds()
        return bool(self._open[i])

    def _emit_closed_rounds(self) -> None:
        # Round t is complete once every prompt still sampling is past it; rounds nobody sampled
        # (every prompt left earlier) are not rounds at all, as in round-based use.
        still = self._round_of[self._open]
        last_closed = int(still.min()) - 1 if len(still) else self.max_rounds
        t = len(self.round_stats) + 1
        while t <= min(last_closed, self.max_rounds):
            active, samples, positives, finished, tokens = self._round_sums[t - 1].tolist()
            if active == 0:
                break
            self.round_stats.append(RoundStat(round=t, active_prompts=active, samples=samples,
                                              positives=positives, finished=finished,
                                              tokens=tokens))
            t += 1

    # --- finalizing ----------------------------------------------------------------------------
    def finalize(self) -> SamplerResult:
        """The pools as a ``SamplerResult``, with what the algorithm's keep rule keeps of them
        (by default each pool down-sampled to its update group) and their advantages."""
        if self._finalized:
            raise RuntimeError("sampler already finalized")
        self._flush()
        self._finalized = True
        if self._chunks:
            p = np.concatenate([c[0] for c in self._chunks])
            r = np.concatenate([c[1] for c in self._chunks])
            rnd = np.concatenate([c[2] for c in self._chunks])
            sc = np.concatenate([c[3] for c in self._chunks])
        else:
            p = np.zeros(0, np.int64)
            r = np.zeros(0)
            rnd = np.zeros(0, np.int64)
            sc = np.zeros(0)
        # Sort samples by (prompt, observation order) to get pool order and pool indices.
        order = np.argsort(p, kind="stable")
        p, r, rnd, sc = p[order], r[order], rnd[order], sc[order]
        offsets = np.zeros(self.num_prompts + 1, dtype=np.int64)
        np.cumsum(self._pos + self._neg, out=offsets[1:])
        resolved = self._exit_round > 0
        missing_pos = self._pos < self.k_pos
        missing: list[str | None] = [
            None if res else ("positives" if mp else "negatives")
            for res, mp in zip(resolved.tolist(), missing_pos.tolist(), strict=True)]
        pools = SamplerResult.of_pools(
            num_prompts=self.num_prompts, sample_prompt=p,
            sample_pool_index=np.arange(len(p)) - offsets[p], sample_round=rnd,
            sample_order=order, rewards=r,
            positive=positives_by(r, sc, self.positive_metric, self.positive_threshold),
            rounds_used=self._rounds_used.copy(), exit_round=self._exit_round.copy(),
            missing=missing, first_round_positives=self._first_pos,
            first_round_samples=self._first_n, estimator=self.estimator, scores=sc)
        kept = self.keep(pools, self.group_size, self.seed)
        kept, weights = kept if isinstance(kept, tuple) else (kept, None)
        return pools.with_kept(kept, weights=weights)


# Which pool samples the update takes: (the step's pools, nothing kept yet; n; the step's
# down-sample seed) -> a bool per sample, or (that, a loss weight per sample).
KeepRule = Callable[[SamplerResult, int, int], "np.ndarray | tuple[np.ndarray, np.ndarray]"]


def default_keep(algorithm: Algorithm) -> KeepRule:
    """The algorithm's keep rule (``Algorithm.keep``), else the balanced down-sample aiming at
    its ``positive_target`` or, for one that does not down-sample, every sample."""
    if algorithm.keep is not None:
        return algorithm.keep
    if not algorithm.downsample:
        return keep_all
    return partial(balanced_downsample, positive_target=algorithm.positive_target)


def keep_all(pools: SamplerResult, n: int, seed: int) -> np.ndarray:
    """Every sample of every pool (Est trains on all it drew)."""
    return np.ones(len(pools.rewards), dtype=bool)


def balanced_downsample(pools: SamplerResult, n: int, seed: int, *,
                        positive_target: Any = None) -> np.ndarray:
    """Reinforce-Ada's down-sample of each pool to ``min(n, pool)`` samples: up to
    ``positive_target`` positives (default ``n//2``) and up to ``n - target`` negatives, then
    the free slots from whichever side has more left; within a side a seeded uniform choice
    (``seed``: the step's down-sample stream)."""
    P, p, positive = pools.num_prompts, pools.sample_prompt, pools.positive
    pos_n, neg_n = pools.positives, pools.negatives
    pool = pos_n + neg_n
    resolved = pools.exit_round > 0
    # Targets per prompt and side, then fill the free slots from the side with more left.
    size = np.minimum(n, pool)
    pos_t = np.full(P, n // 2, dtype=np.int64) if positive_target is None \
        else positive_target(resolved, pos_n, pool, n)
    take_pos = np.minimum(pos_t, pos_n)
    take_neg = np.minimum(n - pos_t, neg_n)
    free = size - take_pos - take_neg
    left_pos, left_neg = pos_n - take_pos, neg_n - take_neg
    pos_first = left_pos >= left_neg
    extra_pos = np.where(pos_first, np.minimum(free, left_pos),
                         free - np.minimum(free, left_neg))
    take_pos = take_pos + extra_pos
    take_neg = take_neg + (free - extra_pos)

    # Seeded uniform choice within a side: rank samples by random keys inside each
    # (prompt, side) block and keep the lowest ranks.
    rng = np.random.default_rng(seed)
    keys = rng.random(len(p))
    side = (~positive).astype(np.int64)  # 0: positive, 1: negative
    # One float sort key instead of a 3-key lexsort (4x faster): block id + key in [0, 0.5).
    block_of = p * 2 + side
    by_key = np.argsort(block_of + keys * 0.5)
    block = block_of[by_key]
    block_start = np.zeros(2 * P + 1, dtype=np.int64)
    block_count = np.bincount(block, minlength=2 * P)
    np.cumsum(block_count, out=block_start[1:])
    rank = np.empty(len(p), dtype=np.int64)
    rank[by_key] = np.arange(len(p)) - block_start[block]
    quota = np.where(positive, take_pos[p], take_neg[p])
    return rank < quota


def make_sampler(config: TrainConfig, num_prompts: int, seed: int,
                 allocation: Sequence[int] | np.ndarray | None = None) -> AdaptiveSampler:
    """The sampler a ``TrainConfig`` asks for; ``allocation``: samples per prompt of an
    algorithm that allocates (Est). The algorithm's ``sampler_options`` may name its estimator
    (``advantage``), epsilon (``eps``) and a keep rule built from the config (``keep``: DPPO's
    pruning rate), in place of its record's ``keep``."""
    c = config
    algo = get_algorithm(c.algorithm)
    options: dict[str, Any] = {"eps": EPS, **algo.sampler_options(c)}
    k_pos, k_neg = c.exit_counts
    draws = None if algo.draws is None else int(algo.draws(c))
    return AdaptiveSampler(
        num_prompts, algorithm=algo, group_size=c.group_size,
        samples_per_round=c.samples_per_round if draws is None else draws,
        max_rounds=c.max_rounds, positive_threshold=c.positive_threshold,
        std_normalize=c.use_std_normalization, advantage_estimator=options.get("advantage"),
        seed=seed, k_pos=k_pos, k_neg=k_neg, allocation=allocation, eps=options["eps"],
        draws=draws, keep=options.get("keep"), positive_metric=c.positive_metric)
