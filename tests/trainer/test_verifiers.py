import threading

import pytest

from trainer.config import TrainConfig
from trainer.verifiers import (
    exact_verifier,
    make_verifier,
    math_verifier,
    score_responses,
)


def test_exact() -> None:
    assert exact_verifier(" 521\n", "521") == 1.0
    assert exact_verifier("52", "521") == 0.0


@pytest.mark.parametrize(
    ("response", "answer", "reward"),
    [
        (r"so the answer is $\boxed{\frac{1}{2}}$", "0.5", 1.0),
        (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
        (r"$\boxed{\sqrt{2}/2}$", r"\frac{\sqrt{2}}{2}", 1.0),
        (r"\boxed{4}", "3", 0.0),
        ("I do not know", "3", 0.0),
    ],
)
def test_math_verify(response: str, answer: str, reward: float) -> None:
    assert math_verifier(response, answer) == reward


def test_math_verify_works_off_the_main_thread() -> None:
    # math-verify's default timeouts use signal.alarm, which raises outside the main thread.
    out: list[float] = []
    thread = threading.Thread(target=lambda: out.append(math_verifier(r"\boxed{2}", "2")))
    thread.start()
    thread.join()
    assert out == [1.0]


def test_make_verifier_auto() -> None:
    assert make_verifier(TrainConfig()) is exact_verifier
    # math-verify in a helper process under the per-response time limit.
    assert make_verifier(TrainConfig(verifier="math")).name == "math"
    cfg = TrainConfig()
    cfg.prompts = "data.jsonl"  # auto is decided by the prompt source
    assert make_verifier(cfg).name == "math"
    assert make_verifier(TrainConfig(verifier="math", verifier_timeout_seconds=0)) \
        is math_verifier


def test_raising_verifier_scores_zero_and_records_the_error() -> None:
    def flaky(response: str, answer: str) -> float:
        if response == "boom":
            raise RuntimeError("parser exploded")
        return exact_verifier(response, answer)

    rewards, errors = score_responses(flaky, ["7", "boom", "8"], "7")
    assert rewards == [1.0, 0.0, 0.0]
    assert errors == [None, "RuntimeError: parser exploded", None]


def _slow_verifier(response: str, answer: str) -> float:
    """A verifier stuck in pure-Python work (as sympy on a pathological expression)."""
    import time

    end = time.monotonic() + 5
    while time.monotonic() < end:
        sum(range(1000))
    return 1.0


@pytest.mark.parametrize("where", ["main thread", "other thread"])
def test_a_verifier_past_its_time_limit_scores_zero_as_a_verifier_error(where: str) -> None:
    from trainer.verifiers import VerifierTimeout, with_time_limit

    limited = with_time_limit(_slow_verifier, 0.2)
    out: list = []

    def score() -> None:
        out.append(score_responses(limited, ["slow", "slow"], "1"))

    if where == "main thread":
        score()
    else:
        thread = threading.Thread(target=score)
        thread.start()
        thread.join()
    rewards, errors = out[0]
    assert rewards == [0.0, 0.0]
    assert errors == [f"{VerifierTimeout.__name__}: no verdict within 0.2 s "
                      "(verifier_timeout_seconds)"] * 2
    # Within the limit the verdict stands, and no alarm is left armed.
    assert score_responses(with_time_limit(exact_verifier, 5), ["3"], "3") == ([1.0], [None])
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_math_verify_on_a_pathological_response_times_out_and_the_next_one_is_scored() -> None:
    """``\\boxed{9^{9^{9^{9^{9}}}}}``: sympy evaluates the tower as one C-level integer power,
    which no in-process timer can interrupt (in-process it never returns). The helper process is
    killed at the limit; the response scores 0 as a verifier error, and the next response gets
    a fresh process and its verdict."""
    verifier = make_verifier(TrainConfig(verifier="math", verifier_timeout_seconds=2.0))
    try:
        rewards, errors = score_responses(
            verifier, [r"\boxed{2}", r"\boxed{9^{9^{9^{9^{9}}}}}", r"\boxed{2}", r"\boxed{3}"],
            "2")
    finally:
        verifier.close()
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    assert errors[0] is None and errors[2] is None and errors[3] is None
    assert errors[1] == "VerifierTimeout: no verdict within 2 s (verifier_timeout_seconds)"
    assert make_verifier(TrainConfig(verifier="exact")) is exact_verifier


def test_isolated_verifier_passes_errors_back() -> None:
    verifier = make_verifier(TrainConfig(verifier="math"))
    try:
        rewards, errors = score_responses(verifier, [r"\boxed{2}"], "")
    finally:
        verifier.close()
    assert rewards == [0.0] and errors[0].startswith("VerifierError: ValueError: cannot parse")
