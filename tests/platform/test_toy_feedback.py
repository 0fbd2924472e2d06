"""Feedback from the update (``Algorithm.after_update``), proven by a toy defined in this file
alone: GVM-RAFT's shape, it keeps each prompt's share of the update's gradient in its persistent
state, from the per-prompt statistics the learner measures (``PromptUpdateStats``: each
prompt's part of the policy loss, and ``grad_mass``, the L1 norm of that loss's gradient with
respect to the prompt's token log-probabilities, with its share of the mini-batch's). It trains
the tiny model through ``trainer.train``; the launch form offers it. (The same statistics on the
sharded path: tests/trainer/test_distributed_update.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse

from trainer import train
from trainer.algorithms import (
    Algorithm,
    UpdateFeedback,
    register_algorithm,
    sample_batch,
    unregister_algorithm,
)
from trainer.backends import make_backend
from trainer.config import TrainConfig
from trainer.data import resolve_prompts
from trainer.recorders import ListRecorder


class GradientShares:
    """What the update said, per step, and each prompt's gradient share (by its index in the
    training set), decayed by half per step: run state. (The test reads the states made in
    ``MADE``.)"""

    def __init__(self, config: TrainConfig) -> None:
        self.feedback: list[UpdateFeedback] = []
        self.share: dict[int, float] = {}
        MADE.append(self)

    def state_dict(self) -> dict[str, Any]:
        return {"share": sorted(self.share.items())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.share = dict(state["share"])


def take_feedback(feedback: UpdateFeedback) -> None:
    state: GradientShares = feedback.state
    state.feedback.append(feedback)
    if feedback.stats is None:  # nothing trained (the simulated backend)
        return
    state.share = {i: v / 2 for i, v in state.share.items()}
    for k, i in enumerate(feedback.prompt_indices):
        state.share[i] = state.share.get(i, 0.0) + float(feedback.stats.grad_share[k])


MADE: list[GradientShares] = []

TOY = Algorithm(
    name="toy-gradshare", label="Toy: gradient shares",
    help="GRPO that keeps each prompt's share of the update's gradient", sampling="group",
    sample_step=sample_batch, advantage="group", std_normalize=True,
    make_state=GradientShares, state_key="toy_gradient_shares", after_update=take_feedback,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: c.batch_size * c.group_size,
    step_shape="batch_size x group_size", summary_fields=("group_size",))


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    register_algorithm(TOY)
    yield TOY
    unregister_algorithm(TOY.name)


def trained(tmp: Path, **config: Any) -> tuple[ListRecorder, GradientShares]:
    cfg = TrainConfig.from_dict({"algorithm": TOY.name, "batch_size": 4, "group_size": 4,
                                 "total_steps": 2, "save_every": 0, "eval_every": 0,
                                 "max_new_tokens": 6, "task_num_prompts": 16, "lr": 2e-4,
                                 "verifier": "exact", "seed": 3, **config})
    prompts, _ = resolve_prompts(cfg)
    backend = make_backend(cfg, prompts)
    MADE.clear()
    try:
        rec = ListRecorder()
        train(cfg, prompts, backend, rec, out_dir=tmp)
    finally:
        backend.close()
    return rec, MADE[0]


def test_the_toy_reads_each_prompts_loss_and_gradient_share(toy: Algorithm, builtin_model: Path,
                                                           tmp_path: Path) -> None:
    rec, state = trained(tmp_path)
    assert [f.step for f in state.feedback] == [1, 2]
    for feedback, step in zip(state.feedback, rec.steps, strict=True):
        stats, m = feedback.stats, step.metrics
        assert stats is not None and len(stats.loss) == len(step.prompts) == 4
        assert [feedback.config.batch_size] == [len(feedback.prompt_indices)]
        # One mini-batch, one epoch: the prompts' parts make up the policy loss.
        assert stats.loss.sum() == pytest.approx(m["policy_loss"], rel=1e-5, abs=1e-8)
        kept = [s for s in step.samples if s.kept]
        total = sum(s.tokens for s in kept)
        for k, p in enumerate(step.prompts):
            mine = [s for s in kept if s.prompt_id == p.prompt_id]
            assert stats.tokens[k] == sum(s.tokens for s in mine)
            # At ratio 1 the token-mean's gradient with respect to a token's log-prob is
            # -A / T: the prompt's mass is sum |A_i| x |o_i| / T.
            expected = sum(abs(s.advantage) * s.tokens for s in mine) / total
            assert stats.grad_mass[k] == pytest.approx(expected, rel=1e-3, abs=1e-9)
            assert (stats.grad_share[k] > 0) == any(s.advantage != 0 for s in mine)
        if stats.grad_mass.sum() > 0:
            assert stats.grad_share.sum() == pytest.approx(1.0)
    assert state.share and all(v >= 0 for v in state.share.values())


def test_without_a_policy_the_toy_hears_no_statistics(toy: Algorithm, tmp_path: Path) -> None:
    rec, state = trained(tmp_path, backend="simulated", total_steps=1)
    assert len(state.feedback) == 1 and state.feedback[0].stats is None
    assert np.array_equal(state.feedback[0].kept, state.feedback[0].result.kept)


@pytest.mark.django_db
def test_the_launch_form_offers_the_toy(toy: Algorithm, owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert f'<option value="{toy.name}">{toy.label}</option>' in page
