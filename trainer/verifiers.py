"""Verifiers: a response and a reference answer in, a reward in [0, 1] out.

``exact`` serves the built-in task (the answer is a digit string); ``math`` uses math-verify
(boxed-answer extraction, LaTeX and numeric equivalence) for real math datasets. A verifier that
raises on one response must not end a run: ``score_responses`` scores it 0 and records the error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.config import TrainConfig

Verifier = Callable[[str, str], float]


def exact_verifier(response: str, answer: str) -> float:
    """1.0 when the response equals the answer up to surrounding whitespace."""
    return 1.0 if response.strip() == answer.strip() else 0.0


def math_verifier(response: str, answer: str) -> float:
    """1.0 when math-verify finds the response's final answer equivalent to the reference.

    The gold answer is parsed with ``$...$`` around it when it has no delimiters, so bare LaTeX
    like ``\\frac{1}{2}`` is read as LaTeX. Timeouts are off: math-verify implements them with
    ``signal.alarm``, which raises outside the main thread (Celery workers, a generation thread);
    the wall-clock budget of a step is the trainer's job.
    """
    from math_verify import parse, verify

    _silence_math_verify()
    gold = parse(_as_latex(answer), parsing_timeout=None, raise_on_error=True)
    if not gold:
        raise ValueError(f"cannot parse the reference answer {answer!r}")
    pred = parse(response, parsing_timeout=None, raise_on_error=True)
    if not pred:
        return 0.0  # no answer in the response: wrong, not an error
    return 1.0 if verify(gold, pred, timeout_seconds=None, raise_on_error=True) else 0.0


def _as_latex(answer: str) -> str:
    text = answer.strip()
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return text
    return f"${text}$"


_SILENCED = False


def _silence_math_verify() -> None:
    # math-verify logs a warning that timeouts are disabled; we disable them on purpose.
    global _SILENCED
    if not _SILENCED:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).setLevel(logging.ERROR)
        _SILENCED = True


VERIFIERS: dict[str, Verifier] = {"exact": exact_verifier, "math": math_verifier}


def make_verifier(config: TrainConfig) -> Verifier:
    """``auto``: exact match for the built-in task, math-verify for prompt files."""
    from trainer.config import BUILTIN_TASK

    name = config.verifier
    if name == "auto":
        name = "exact" if config.prompts == BUILTIN_TASK else "math"
    try:
        return VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; choose one of auto, "
                         f"{', '.join(VERIFIERS)}") from None


def score_responses(verifier: Verifier, responses: Sequence[str], answer: str
                    ) -> tuple[list[float], list[str | None]]:
    """Rewards of ``responses`` against ``answer``, and per response the error (``"Type:
    message"``) when the verifier raised, in which case that response scores 0."""
    rewards: list[float] = []
    errors: list[str | None] = []
    for response in responses:
        try:
            reward = float(verifier(response, answer))
            error = None
        except Exception as exc:  # noqa: BLE001 - any verifier failure is one response's zero
            reward, error = 0.0, f"{type(exc).__name__}: {exc}"
        rewards.append(reward)
        errors.append(error)
    return rewards, errors
