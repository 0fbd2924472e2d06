"""A format reward in TRL's batched form (``GRPOTrainer``'s ``reward_funcs``):
``RADA_REWARDS=format=trainer.reward_examples.think_format:format_reward``."""

from __future__ import annotations

import re
from typing import Any

# Reasoning in <think>...</think>, then a final "#### <answer>" line, nothing after it.
FORMAT = re.compile(r"^<think>.*?</think>.*^####\s*\S+\s*\Z", re.DOTALL | re.MULTILINE)


def format_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Format: 1 for a response that reasons inside <think>...</think> and ends on a
    "#### <answer>" line, else 0 (whatever the answer)."""
    return [1.0 if FORMAT.search(text) else 0.0 for text in completions]
