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
    assert make_verifier(TrainConfig(verifier="math")) is math_verifier
    cfg = TrainConfig()
    cfg.prompts = "data.jsonl"  # auto is decided by the prompt source
    assert make_verifier(cfg) is math_verifier


def test_raising_verifier_scores_zero_and_records_the_error() -> None:
    def flaky(response: str, answer: str) -> float:
        if response == "boom":
            raise RuntimeError("parser exploded")
        return exact_verifier(response, answer)

    rewards, errors = score_responses(flaky, ["7", "boom", "8"], "7")
    assert rewards == [1.0, 0.0, 0.0]
    assert errors == [None, "RuntimeError: parser exploded", None]
