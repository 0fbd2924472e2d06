"""Checkpoint directories: RNG round trip, latest_checkpoint ignores partial writes."""

from __future__ import annotations

import random

import numpy as np
import torch

from trainer.checkpoint import (
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    read_state,
    save_checkpoint,
)


def test_rng_states_round_trip(tmp_path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    path = save_checkpoint(checkpoint_dir(tmp_path, 5), step=5, config={"seed": 0})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    state = load_checkpoint(path)
    assert state["step"] == 5 and state["config"] == {"seed": 0}
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_latest_checkpoint_skips_incomplete(tmp_path) -> None:
    assert latest_checkpoint(tmp_path) is None
    save_checkpoint(checkpoint_dir(tmp_path, 2), step=2, config={})
    save_checkpoint(checkpoint_dir(tmp_path, 10), step=10, config={})
    (tmp_path / "checkpoints" / "step-000020.tmp").mkdir()  # a crash mid-write
    (tmp_path / "checkpoints" / "step-000030").mkdir()      # no trainer_state.json
    assert latest_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 10)
    assert read_state(latest_checkpoint(tmp_path))["step"] == 10
