"""The learning-rate schedule, apart from trainer.update so that a run without a model (the
simulated backend) reports the lr it would train at without importing torch."""

from __future__ import annotations


def warmup_factor(step_index: int, warmup_steps: int) -> float:
    """verl's constant-with-warm-up schedule (transformers' get_constant_schedule_with_warmup):
    the lr multiplier at scheduler step k = ``step_index`` (0-based) is ``k / W`` while k < W,
    then 1. The first step trains at lr 0 (AdamW's moments still take its gradient).

    verl steps the scheduler once per training step (after all of its mini-batches, in
    ``update_actor``), so every optimiser step of one training step shares its lr; so here."""
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, step_index / warmup_steps)
