"""Reinforce-Ada and GRPO RL post-training (arXiv 2510.04996), without Django.

Importing ``trainer`` is light (the web process imports ``trainer.config``); ``train`` and the
heavier modules load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train", "TrainResult"]


def __getattr__(name: str) -> Any:
    if name in ("train", "TrainResult"):
        from trainer import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
