"""GSM8K's answer check as a verl ``compute_score`` file (verl's ``custom_reward_function``):
registered unchanged by naming the module (``RADA_REWARDS=trainer.reward_examples.gsm8k``)."""

from __future__ import annotations

import re
from typing import Any

# GSM8K's final-answer line: "#### 42" (commas as thousands separators, a sign, decimals).
ANSWER = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def final_answer(text: str) -> str | None:
    """The number of the last "#### " line of ``text`` without its commas (None: no such line)."""
    found = ANSWER.findall(text)
    return found[-1].replace(",", "") if found else None


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict[str, Any] | None = None) -> dict[str, float]:
    """GSM8K: 1 when the response's last "#### <number>" line equals the reference answer
    (numerically; the reference may be a bare number or end in its own "#### " line), else 0."""
    given = final_answer(solution_str)
    reference = final_answer(ground_truth) or ground_truth.strip().replace(",", "")
    try:
        correct = given is not None and float(given) == float(reference)
    except ValueError:  # a reference that is not a number: compared as text
        correct = given == reference
    return {"score": 1.0 if correct else 0.0, "acc": float(correct)}
