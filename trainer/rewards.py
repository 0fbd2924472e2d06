"""Reward shaping on top of the verifier's score: DAPO's overlong penalty (Yu et al., 2025, "Soft
Overlong Punishment"; verl's DAPO reward manager), off by default.

Light imports only: the schedulers call ``score_generations`` and the web process imports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def overlong_penalty(length: int, max_new_tokens: int, buffer_len: int,
                     factor: float) -> float:
    """The penalty added to a response of ``length`` tokens, with L_max = ``max_new_tokens``,
    a buffer of B = ``buffer_len`` tokens and the factor f:

        penalty = min(0, -(length - (L_max - B)) / B * f)

    0 up to L_max - B tokens, then falling linearly to -f at L_max. B = 0: no shaping."""
    if buffer_len <= 0:
        return 0.0
    exceed = length - (max_new_tokens - buffer_len)
    return min(0.0, -exceed / buffer_len * factor)


class RewardScorer:
    """A run's scorer: the verifier's rewards (``score(prompt, texts)``), and, given the
    generations, the same plus the overlong penalty of each response's token count
    (``score_generations``; ``score_and_shape`` also returns the verifier's own scores), which
    the schedulers call. A plain scorer without ``score_generations`` is called with the texts
    alone."""

    def __init__(self, score: Any, max_new_tokens: int, buffer_len: int = 0,
                 factor: float = 1.0) -> None:
        self.score, self.max_new_tokens = score, max_new_tokens
        self.buffer_len, self.factor = buffer_len, factor

    def __call__(self, prompt: Any, texts: list[str]) -> tuple[list[float], list[str | None]]:
        return self.score(prompt, texts)

    def score_generations(self, prompt: Any, gens: Sequence[Any]
                          ) -> tuple[list[float], list[str | None]]:
        rewards, _, errors = self.score_and_shape(prompt, gens)
        return rewards, errors

    def score_and_shape(self, prompt: Any, gens: Sequence[Any]
                        ) -> tuple[list[float], list[float], list[str | None]]:
        """(rewards, scores, errors): ``scores`` are the verifier's, ``rewards`` the same with
        the overlong penalty added (equal when shaping is off). What counts as a positive and
        what DAPO filters on may be either (``positive_metric``, ``dapo_filter_metric``)."""
        scores, errors = self.score(prompt, [g.text for g in gens])
        rewards = scores
        if self.buffer_len > 0:
            rewards = [s + overlong_penalty(len(g.response_token_ids), self.max_new_tokens,
                                            self.buffer_len, self.factor)
                       for s, g in zip(scores, gens, strict=True)]
        return rewards, scores, errors


def score_generations(score: Any, prompt: Any, gens: Sequence[Any]
                      ) -> tuple[list[float], list[str | None]]:
    """Rewards and errors of one prompt's generations through ``score``: by
    ``score.score_generations`` where it has one (the run's ``RewardScorer``), else by text."""
    by_generation = getattr(score, "score_generations", None)
    if by_generation is not None:
        return by_generation(prompt, gens)
    return score(prompt, [g.text for g in gens])


def score_and_shape(score: Any, prompt: Any, gens: Sequence[Any]
                    ) -> tuple[list[float], list[float], list[str | None]]:
    """(rewards, scores, errors) of one prompt's generations: the shaped rewards, the
    verifier's own scores and the errors (``RewardScorer.score_and_shape``). A scorer that
    shapes nothing (no ``score_and_shape``) gives scores equal to its rewards."""
    both = getattr(score, "score_and_shape", None)
    if both is not None:
        return both(prompt, gens)
    rewards, errors = score_generations(score, prompt, gens)
    return rewards, list(rewards), errors
