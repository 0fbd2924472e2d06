"""A run's reward: the verifier's score, or a weighted sum of reward components (the verifier
and a deployment's own rewards, ``TrainConfig.rewards``: ``RewardComponents``), with reward
shaping on top: DAPO's overlong penalty (Yu et al., 2025, "Soft Overlong Punishment"; verl's
DAPO reward manager), off by default.

Every component keeps the verifier's guarantees: one that raises or runs past
``verifier_timeout_seconds`` scores 0 for that response and is counted as its error; one that
returns NaN, an infinity or no number is an error of that response too (its component is
recorded as None, never as a number). The run goes on.

Light imports only: the schedulers call ``score_generations`` and the web process imports them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
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


def _as_number(value: Any) -> float:
    """A reward's value as a finite float: verl's dict with a ``score`` is read as its score;
    NaN, an infinity or anything but a real number raises ValueError (the response's error)."""
    if isinstance(value, dict) and "score" in value:
        value = value["score"]
    if not isinstance(value, numbers.Real):
        raise ValueError(f"returned {type(value).__name__}, not a number")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"returned {number}, not a finite number")
    return number


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class RewardComponents:
    """The rewards a run combines (``TrainConfig.rewards``: (name, weight) pairs): per response,
    each component's score and their weighted sum ``sum_i w_i x r_i``, the reward the run
    trains on (its "score": what ``positive_metric`` acc and score read).

    ``verifier`` is the run's verifier (``verify``, as ``score_responses`` calls it); any other
    name a registered reward (``trainer.reward_registry``): verl's ``compute_score(data_source,
    solution_str, ground_truth, extra_info)`` per response, with the prompt's ``data_source``
    and ``extra_info`` from its metadata (a verl Parquet file's columns) and its answer as the
    ground truth; TRL's ``f(prompts, completions, **kwargs)`` once per prompt's responses, with
    ``completion_ids`` and the prompt's columns (``answer``, ``ground_truth`` and its metadata's
    keys) one per completion. Each call runs under ``seconds`` (``call_with_time_limit``)."""

    def __init__(self, components: Sequence[tuple[str, float]], verify: Callable[..., Any],
                 seconds: float) -> None:
        from trainer.reward_registry import VERIFIER, get_reward

        self.components = list(components)
        self.verify, self.seconds = verify, seconds
        self.rewards = {name: get_reward(name) for name, _ in self.components
                        if name != VERIFIER}

    def __call__(self, prompt: Any, gens: Sequence[Any]
                 ) -> tuple[list[float], list[str | None], list[dict[str, float | None]]]:
        """(scores, errors, components) of one prompt's responses."""
        from trainer.reward_registry import VERIFIER
        from trainer.verifiers import score_responses

        n = len(gens)
        texts = [g.text for g in gens]
        values: dict[str, list[float | None]] = {}
        errors: list[list[str]] = [[] for _ in range(n)]
        for name, _ in self.components:
            if name == VERIFIER:
                scores, errs = score_responses(self.verify, texts, prompt.answer)
                got: list[Any] = [None if e else s for s, e in zip(scores, errs, strict=True)]
                failures: list[str | None] = list(errs)
            else:
                got, failures = self._call(self.rewards[name], prompt, gens, texts)
            values[name] = []
            for j in range(n):
                value, failure = got[j], failures[j]
                if failure is None:
                    try:
                        value = _as_number(value)
                    except ValueError as exc:
                        value, failure = None, _error(exc)
                values[name].append(None if failure else value)
                if failure:
                    errors[j].append(f"{name}: {failure}")
        scores = [sum(w * (values[name][j] or 0.0) for name, w in self.components)
                  for j in range(n)]
        components = [{name: values[name][j] for name, _ in self.components} for j in range(n)]
        return scores, ["; ".join(e) if e else None for e in errors], components

    def _call(self, reward: Any, prompt: Any, gens: Sequence[Any], texts: list[str]
              ) -> tuple[list[Any], list[str | None]]:
        from trainer.verifiers import call_with_time_limit

        meta = prompt.metadata or {}
        if reward.kind == "verl":
            out: list[Any] = []
            failures: list[str | None] = []
            for text in texts:
                try:
                    out.append(call_with_time_limit(
                        lambda t=text: reward.fn(meta.get("data_source", ""), t, prompt.answer,
                                                 meta.get("extra_info") or {}), self.seconds))
                    failures.append(None)
                except Exception as exc:  # noqa: BLE001 - any failure is one response's zero
                    out.append(None)
                    failures.append(_error(exc))
            return out, failures
        n = len(texts)
        columns = {k: [v] * n for k, v in meta.items() if k not in ("prompt", "completions")}
        columns |= {"answer": [prompt.answer] * n, "ground_truth": [prompt.answer] * n,
                    "completion_ids": [list(g.response_token_ids) for g in gens]}
        try:
            out = call_with_time_limit(
                lambda: reward.fn(prompts=[prompt.text] * n, completions=list(texts), **columns),
                self.seconds)
            if isinstance(out, (str, bytes, dict)) or len(out) != n:
                raise ValueError(f"returned {type(out).__name__} of "
                                 f"{len(out) if hasattr(out, '__len__') else '?'} values for "
                                 f"{n} completions; expected a list of {n} numbers")
            return list(out), [None] * n
        except Exception as exc:  # noqa: BLE001 - the whole call failed: each response's zero
            return [None] * n, [_error(exc)] * n


class RewardScorer:
    """A run's scorer: the verifier's rewards (``score(prompt, texts)``), and, given the
    generations, the same plus the overlong penalty of each response's token count
    (``score_generations``; ``score_and_shape`` also returns the verifier's own scores), which
    the schedulers call. A plain scorer without ``score_generations`` is called with the texts
    alone."""

    def __init__(self, score: Any, max_new_tokens: int, buffer_len: int = 0,
                 factor: float = 1.0, components: RewardComponents | None = None) -> None:
        self.score, self.max_new_tokens = score, max_new_tokens
        self.buffer_len, self.factor = buffer_len, factor
        # A run that combines rewards: its scores in place of ``score``'s, each response's
        # components set on its generation (``Generation.reward_components``).
        self.components = components

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
        if self.components is not None:
            scores, errors, parts = self.components(prompt, gens)
            for g, part in zip(gens, parts, strict=True):
                g.reward_components = part
        else:
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
