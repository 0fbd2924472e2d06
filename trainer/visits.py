"""Which training prompts a run has drawn so far: ``prompts_revisited`` of every step, and the
order in which DAPO takes its further batches (``dapo_further_prompts = "unseen-first"``).

A step's prompts are what its algorithm selects (``Algorithm.select_batch``): by default its own
batch of the epoch's permutation (``seeds.batch_indices``), so that within an epoch only an
algorithm that selects otherwise revisits a prompt (DAPO's further batches come from the rest
of the set and may hold prompts an earlier step drew, or a later step's own batch will). The
counts are run state: the loop keeps them and saves them in every checkpoint
(``VISITS_STATE``), so a resumed run orders its further batches exactly as an uninterrupted one.

Light imports only (numpy): the algorithm registry imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from trainer import seeds

# trainer_state.json key of the per-prompt draw counts.
VISITS_STATE = "prompt_visits"


class PromptVisits:
    """How many earlier steps drew each prompt of the training set (index into the set)."""

    def __init__(self, num_prompts: int) -> None:
        self.counts = np.zeros(int(num_prompts), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.counts)

    def revisited(self, indices: Iterable[int]) -> int:
        """How many of ``indices`` (one step's draws) an earlier step drew too."""
        idx = np.fromiter(indices, dtype=np.int64)
        return int(np.sum(self.counts[idx] > 0)) if len(idx) else 0

    def mark(self, indices: Iterable[int]) -> None:
        """Count one step's draws (a prompt drawn twice in a step counts once)."""
        idx = np.unique(np.fromiter(indices, dtype=np.int64))
        self.counts[idx] += 1

    def state_dict(self) -> dict[str, Any]:
        # Sparse: a run of a few steps over a large set touches few prompts.
        nonzero = np.flatnonzero(self.counts)
        return {"num_prompts": len(self.counts), "indices": nonzero.tolist(),
                "counts": self.counts[nonzero].tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["num_prompts"]) != len(self.counts):
            raise ValueError(f"the checkpoint's prompt visits are of {state['num_prompts']} "
                             f"prompts, the run's training set has {len(self.counts)}")
        self.counts[:] = 0
        self.counts[np.asarray(state["indices"], dtype=np.int64)] = np.asarray(
            state["counts"], dtype=np.int64)

    @classmethod
    def from_selections(cls, num_prompts: int, steps: int,
                        selected: Callable[[int], Iterable[int]]) -> PromptVisits:
        """The counts of a run whose steps 1..``steps`` drew ``selected(step)``: the best a
        resume from a checkpoint older than these counts can rebuild, from the algorithm's
        batch selection (``trainer.algorithms.choose_batch``; DAPO's further batches of those
        steps are then not counted)."""
        visits = cls(num_prompts)
        for step in range(1, steps + 1):
            visits.mark(selected(step))
        return visits

    @classmethod
    def from_own_batches(cls, num_prompts: int, batch_size: int, seed: int,
                         steps: int) -> PromptVisits:
        """The counts of a run whose steps 1..``steps`` drew their own batches of the epoch
        permutation only (``seeds.batch_indices``: every algorithm's default selection)."""
        return cls.from_selections(num_prompts, steps, lambda step: seeds.batch_indices(
            num_prompts, batch_size, seed, step))


def own_batches_after(num_prompts: int, batch_size: int, seed: int, step: int,
                      last_step: int) -> np.ndarray:
    """Whether each prompt is in the own batch of a step after ``step`` up to ``last_step``
    (``seeds.batch_indices``): a prompt the run will draw anyway. One permutation per epoch."""
    out = np.zeros(num_prompts, dtype=bool)
    per_epoch = num_prompts // batch_size
    first, last = step + 1, last_step
    if first > last:
        return out
    for epoch in range((first - 1) // per_epoch, (last - 1) // per_epoch + 1):
        lo = max(first, epoch * per_epoch + 1) - epoch * per_epoch - 1
        hi = min(last, (epoch + 1) * per_epoch) - epoch * per_epoch
        perm = np.random.default_rng([seed, epoch, seeds.EPOCH_ORDER]).permutation(num_prompts)
        out[perm[lo * batch_size:hi * batch_size]] = True
    return out
