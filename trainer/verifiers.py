"""Verifiers: a response and a reference answer in, a reward in [0, 1] out.

``exact`` serves the built-in task (the answer is a digit string); ``math`` uses math-verify
(boxed-answer extraction, LaTeX and numeric equivalence) for real math datasets. A verifier that
raises on one response must not end a run: ``score_responses`` scores it 0 and records the error.

Every verifier that ``make_verifier`` returns runs under a per-response time limit
(``config.verifier_timeout_seconds``): symbolic equivalence can take sympy forever on a
pathological response, and one response must not hold a run. A response past the limit scores 0
and counts as a verifier error (``VerifierTimeout``). math-verify runs in a helper process
(``IsolatedVerifier``), killed and replaced when a response runs past the limit: the worst cases
are single C-level operations (``\\boxed{9^{9^{9^{9^{9}}}}}`` is one integer power of
astronomical size) that no signal or thread can interrupt. ``with_time_limit`` is the
in-process variant for pure-Python verifiers (a ``SIGALRM`` interval timer in the main thread, an
abandoned helper thread elsewhere). Hand-written: math-verify's own timeouts are ``signal.alarm``
in-process (off: they raise outside the main thread, and cannot stop a C-level operation).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
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


def call_with_time_limit(thunk: Callable[[], Any], seconds: float) -> Any:
    """``thunk()`` under the same limit as ``with_time_limit``'s (a deployment's own reward:
    ``trainer.rewards.RewardComponents``), raising ``VerifierTimeout`` past ``seconds``."""
    return with_time_limit(lambda call, _: call(), seconds)(thunk, "")


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


def _serve(conn: Any, name: str, parent: int) -> None:
    """The helper process of ``IsolatedVerifier``: verify (response, answer) pairs from ``conn``
    until it closes. Dies with its parent (Linux ``PR_SET_PDEATHSIG``)."""
    if os.uname().sysname == "Linux":
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            return
    verifier = VERIFIERS[name]
    verifier("0", "0")  # import math-verify and sympy before the clock starts
    conn.send(("ready", None))
    while True:
        try:
            response, answer = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", float(verifier(response, answer))))
        except Exception as exc:  # noqa: BLE001 - handed back as this response's error
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class VerifierError(Exception):
    """A verifier raised in the helper process (the message is its ``Type: message``)."""


class IsolatedVerifier:
    """A registered verifier run in a helper process with a per-response time limit: past it the
    process is killed (whatever it was doing, C code included), the response raises
    ``VerifierTimeout``, and the next response starts a fresh process."""

    START_SECONDS = 300.0  # importing math-verify and sympy on a loaded machine

    def __init__(self, name: str, seconds: float) -> None:
        self.name, self.seconds = name, seconds
        self.__name__ = f"{name} (isolated)"
        self._proc: Any = None
        self._conn: Any = None
        self._lock = threading.Lock()

    def __call__(self, response: str, answer: str) -> float:
        with self._lock:
            conn = self._ensure()
            conn.send((response, answer))
            if not conn.poll(self.seconds):
                self.close()
                raise VerifierTimeout(_timeout_message(self.seconds))
            kind, value = conn.recv()
        if kind == "error":
            raise VerifierError(value)
        return value

    def _ensure(self) -> Any:
        if self._proc is not None and self._proc.is_alive():
            return self._conn
        self.close()
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
        parent_conn, child_conn = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child_conn, self.name, os.getpid()),
                           name=f"verifier-{self.name}", daemon=True)
        proc.start()
        child_conn.close()
        if not parent_conn.poll(self.START_SECONDS):
            proc.kill()
            raise VerifierTimeout(f"the {self.name} verifier process did not start")
        parent_conn.recv()
        self._proc, self._conn = proc, parent_conn
        return parent_conn

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "_proc", None) is not None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
        self._proc = self._conn = None


def make_verifier(config: TrainConfig) -> Verifier:
    """``auto``: exact match for the built-in task, math-verify for prompt files (under the
    config's per-response time limit)."""
    name = config.resolved_verifier()
    try:
        verifier = VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; choose one of auto, "
                         f"{', '.join(VERIFIERS)}") from None
    if verifier is exact_verifier or config.verifier_timeout_seconds <= 0:
        return verifier  # exact: a string comparison, linear time
    return IsolatedVerifier(name, config.verifier_timeout_seconds)


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
