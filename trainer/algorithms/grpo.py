"""GRPO (Shao et al., 2024): one round of n responses per prompt, every response kept, the
group's own mean (and std) as baseline:

    A_i = (r_i - mean(group)) / (std(group) + eps)     (std normalisation off: Dr.GRPO)

The paper's baseline, and budget-matched at n = 8, 16, 32 ("GRPO n=16")."""

from __future__ import annotations

from trainer.algorithms.base import Algorithm
from trainer.algorithms.sampling import sample_batch

GRPO = Algorithm(
    name="grpo", label="GRPO",
    help="GRPO: one round of n per prompt, the group's own mean and std as baseline",
    sampling="group", sample_step=sample_batch,
    advantage="group", std_normalize=True,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: c.batch_size * c.group_size,
    step_shape="batch_size x group_size",
    label_shows_group_size=True, preflight_group_sizes=(4, 8, 16),
    match_budget=lambda c, budget: {"group_size": budget}, budget_match="exact",
    budget_note="group_size = budget: one round of budget responses per prompt",
    summary_fields=("group_size",), baseline=True)
