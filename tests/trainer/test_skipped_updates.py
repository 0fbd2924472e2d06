"""A non-finite gradient norm skips the optimiser step (issue 21, as verl's actor does): the
weights stay as they were, the step records skipped_updates, the run goes on, and more than
max_skipped_updates skips in a row fail the run with a reason that says so."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.trainer.test_update import batch, tiny_qwen2
from trainer.config import TrainConfig
from trainer.types import SKIPPED_IN_A_ROW, NonFiniteGradients
from trainer.update import make_optimizer, update_policy

pytestmark = pytest.mark.slow


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_an_inf_gradient_leaves_the_weights_and_adam_unchanged() -> None:
    model = tiny_qwen2()
    config = TrainConfig(lr=2e-3, batch_size=2, weight_decay=0.0)
    opt, sched = make_optimizer(model, config)
    b = batch()
    b.advantages[0] = math.inf  # an inf advantage: inf loss, non-finite gradient
    before = weights(model)
    metrics = update_policy(model, opt, sched, b, config, pad_token_id=0, seed=0)
    assert metrics["skipped_updates"] == 1 and metrics["optimizer_steps"] == 0
    assert metrics[SKIPPED_IN_A_ROW] == 1
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert not opt.state  # AdamW's moments never saw the step
    assert all(math.isfinite(metrics[k]) for k in ("policy_loss", "grad_norm"))


def test_only_the_bad_mini_batch_is_skipped() -> None:
    model = tiny_qwen2()
    # One prompt per mini-batch: group 0 (inf advantage) skipped, group 1 trained.
    config = TrainConfig(lr=2e-3, batch_size=2, ppo_mini_batch_size=1, weight_decay=0.0)
    opt, sched = make_optimizer(model, config)
    b = batch()
    b.advantages[0] = math.inf
    before = weights(model)
    metrics = update_policy(model, opt, sched, b, config, pad_token_id=0, seed=0)
    assert metrics["skipped_updates"] == 1 and metrics["optimizer_steps"] == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert metrics["grad_norm"] > 0 and math.isfinite(metrics["grad_norm"])


def _inject_inf_on(model: torch.nn.Module, calls: set[int]) -> None:
    """Make the gradient of the first parameter inf on the given backward passes (1-based)."""
    seen = [0]

    def hook(grad: torch.Tensor) -> torch.Tensor:
        seen[0] += 1
        return grad * math.inf if seen[0] in calls else grad

    next(model.parameters()).register_hook(hook)


def _run(tiny_model_dir: Path, out: Path, inject: set[int], **kw):
    from trainer.backends import make_backend
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    config = TrainConfig(model=str(tiny_model_dir), backend="hf", device="cpu",
                         algorithm="grpo", batch_size=4, group_size=4, total_steps=3,
                         lr=2e-4, save_every=0, eval_every=0, task_num_prompts=64,
                         task_max_digits=2, max_new_tokens=6, seed=0, **kw).validate()
    prompts, _ = resolve_prompts(config)
    backend = make_backend(config, prompts)
    _inject_inf_on(backend.model, inject)
    rec = ListRecorder()
    return rec, backend, lambda: train(config, prompts, backend, rec, out_dir=out)


def test_the_run_goes_on_past_a_skipped_update(tiny_model_dir: Path, tmp_path: Path) -> None:
    rec, backend, go = _run(tiny_model_dir, tmp_path, {2})
    result = go()
    assert result.status == "completed" and result.last_step == 3
    skipped = [s.metrics["skipped_updates"] for s in rec.steps]
    taken = [s.metrics["optimizer_steps"] for s in rec.steps]
    assert skipped == [0, 1, 0] and taken == [1, 0, 1]
    assert all(torch.isfinite(p).all() for p in backend.model.parameters())
    assert all(SKIPPED_IN_A_ROW not in s.metrics for s in rec.steps)


def test_too_many_skips_in_a_row_fail_the_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    # Steps 2 and 3 skip: 2 in a row, more than max_skipped_updates = 1.
    rec, _, go = _run(tiny_model_dir, tmp_path, {2, 3}, max_skipped_updates=1)
    with pytest.raises(NonFiniteGradients, match="2 optimiser steps in a row .* "
                                                 "max_skipped_updates = 1"):
        go()
    assert [s.metrics["skipped_updates"] for s in rec.steps] == [0, 1, 1]
