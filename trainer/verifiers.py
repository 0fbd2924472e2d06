"""Verifiers: a response and a reference answer in, a reward in [0, 1] out.

``exact`` serves the built-in task (the answer is a digit string); ``math`` uses math-verify
(boxed-answer extraction, LaTeX and numeric equivalence) for real math datasets. A verifier that
raises on one response must not end a run: ``score_responses`` scores it 0 and records the error.

Every verifier that ``make_verifier`` returns runs under a per-response time limit
(``config.verifier_timeout_seconds``): symbolic equivalence can take sympy forever on a
pathological response (a tower of exponents), and one response must not hold a run. A response
past the limit scores 0 and counts as a verifier error (``VerifierTimeout``). The limit is a
``SIGALRM`` interval timer in the main thread (where the worker's run process and the CLI
train), which interrupts pure-Python work such as sympy's; elsewhere the verifier runs in a
helper thread that is abandoned past the limit (Python cannot stop a thread; it ends when its
verifier returns). Hand-written: math-verify's own timeouts are the same ``signal.alarm``
mechanism, but raise outside the main thread and cover parse and verify separately.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

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


class VerifierTimeout(Exception):  # noqa: N818 - reads as the verdict it records
    """A verifier gave no verdict within its time limit."""


def with_time_limit(verifier: Verifier, seconds: float) -> Verifier:
    """``verifier`` raising ``VerifierTimeout`` when one call takes longer than ``seconds``
    (0: no limit)."""
    if seconds <= 0:
        return verifier

    def limited(response: str, answer: str) -> float:
        if threading.current_thread() is threading.main_thread() and hasattr(signal,
                                                                              "setitimer"):
            return _alarm_limited(verifier, response, answer, seconds)
        return _thread_limited(verifier, response, answer, seconds)

    limited.__name__ = getattr(verifier, "__name__", "verifier")
    limited.__wrapped__ = verifier  # type: ignore[attr-defined]
    return limited


def _timeout_message(seconds: float) -> str:
    return f"no verdict within {seconds:g} s (verifier_timeout_seconds)"


def _alarm_limited(verifier: Verifier, response: str, answer: str, seconds: float) -> float:
    def expire(signum: int, frame: Any) -> None:
        raise VerifierTimeout(_timeout_message(seconds))

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return verifier(response, answer)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _thread_limited(verifier: Verifier, response: str, answer: str, seconds: float) -> float:
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["reward"] = verifier(response, answer)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    helper = threading.Thread(target=call, name="verifier", daemon=True)
    helper.start()
    helper.join(seconds)
    if helper.is_alive():
        raise VerifierTimeout(_timeout_message(seconds))
    if "error" in box:
        raise box["error"]
    return box["reward"]


def make_verifier(config: TrainConfig) -> Verifier:
    """``auto``: exact match for the built-in task, math-verify for prompt files (under the
    config's per-response time limit)."""
    from trainer.config import BUILTIN_TASK

    name = config.verifier
    if name == "auto":
        name = "exact" if config.prompts == BUILTIN_TASK else "math"
    try:
        verifier = VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; choose one of auto, "
                         f"{', '.join(VERIFIERS)}") from None
    if verifier is exact_verifier:
        return verifier  # a string comparison: linear time, no timer worth its system calls
    return with_time_limit(verifier, config.verifier_timeout_seconds)


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
