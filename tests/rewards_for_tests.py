"""Rewards for the tests of ``TrainConfig.rewards``, registered through ``RADA_REWARDS`` only
by the tests that name this module (tests/trainer/test_rewards.py, the worker's in
tests/platform/test_rewards_worker.py)."""

from __future__ import annotations

import math
import time
from typing import Any

from trainer.reward_registry import register_reward


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict[str, Any] | None = None) -> float:
    """Odd answer: 1 when the response is an odd integer, else 0 (verl's signature)."""
    return float(int(solution_str) % 2 == 1)


@register_reward("short")
def short(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Short: 1 for a response of at most 3 token ids (TRL's batched signature)."""
    return [1.0 if len(ids) <= 3 else 0.0 for ids in kwargs["completion_ids"]]


@register_reward("unruly")
def unruly(data_source: str, solution_str: str, ground_truth: str,
           extra_info: dict[str, Any] | None = None) -> Any:
    """Unruly: by the response's last digit, raises (0), returns NaN (1), an infinity (2), text
    (3), else verl's dict with a score of 0.25; sleeps past any time limit the tests set on a
    response saying "sleep"."""
    if "sleep" in solution_str:
        time.sleep(30)
    last = solution_str.strip()[-1:]
    if last == "0":
        raise RuntimeError("no zeros")
    if last == "1":
        return math.nan
    if last == "2":
        return -math.inf
    if last == "3":
        return "three"
    return {"score": 0.25, "acc": 0.0}
