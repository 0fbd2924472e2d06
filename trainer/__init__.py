"""Reinforce-Ada and GRPO RL post-training (arXiv 2510.04996), without Django.

Importing ``trainer`` is light (the web process imports ``trainer.config``); ``train`` and the
heavier modules load on first use. It registers the algorithms (``trainer.algorithms``: the
built-ins, then the modules ``RADA_ALGORITHMS`` names), so that whoever imports any module of
the trainer finds them in the registry (``trainer.registry``).
"""

from __future__ import annotations

import os
from typing import Any

# GNU OpenMP (torch's CPU threads) spin-waits between parallel regions by default. On cores shared
# with other busy processes (web server, database, other workers, a test suite) that made a warm
# start step 8x slower with 2 threads than with 1 (85.8 s vs 10.2 s for 20 steps with PASSIVE,
# load average 4-6 on 2 cores). libgomp reads this once, when torch loads: every torch import in
# the package comes after this line (the package's __init__); an explicit setting by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import trainer.algorithms  # noqa: E402,F401  (registers the algorithms; no torch)

__all__ = ["train", "TrainResult"]


def __getattr__(name: str) -> Any:
    if name in ("train", "TrainResult"):
        from trainer import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
