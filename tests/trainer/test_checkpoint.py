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


def test_a_run_without_a_model_never_imports_torch_and_resumes_exactly(tmp_path) -> None:
    """The simulated backend draws nothing from torch: its run's process (a CLI run, a
    worker's run child) does not import it (a second or more per run), its checkpoints carry no
    torch state, and a resume from one continues the uninterrupted run exactly."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "run.toml").write_text(
        'backend = "simulated"\nalgorithm = "ada-balance"\nbatch_size = 4\ngroup_size = 4\n'
        "samples_per_round = 4\nmax_rounds = 3\neval_every = 0\nseed = 3\ntotal_steps = 4\n"
        "save_every = 2\n")
    probe = ("import sys, runpy; sys.argv = ['trainer'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('trainer', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('torch loaded' if 'torch' in sys.modules else 'no torch', file=sys.stderr)")

    def run(out: Path, *extra: str) -> str:
        done = subprocess.run([sys.executable, "-c", probe, "run", "--config",
                               str(tmp_path / "run.toml"), "--out", str(out), "--no-progress",
                               *extra], cwd=root, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stderr.strip().splitlines()[-1]

    assert run(tmp_path / "whole") == "no torch"
    assert "torch" not in read_state(checkpoint_dir(tmp_path / "whole", 2))["rng"]
    # The same run stopped after step 2 (its later checkpoints removed) and resumed.
    import shutil

    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    shutil.rmtree(checkpoint_dir(tmp_path / "resumed", 4))
    events = (tmp_path / "resumed" / "events.jsonl").read_text().splitlines()
    kept = [e for e in events if json.loads(e).get("step", 0) <= 2]
    (tmp_path / "resumed" / "events.jsonl").write_text("\n".join(kept) + "\n")
    assert run(tmp_path / "resumed", "--resume") == "no torch"

    def samples(out: Path) -> list:
        return [(e["step"], e["samples"]) for e in map(json.loads, (out / "events.jsonl")
                .read_text().splitlines()) if e.get("type") == "step"]

    assert samples(tmp_path / "resumed") == samples(tmp_path / "whole")
    assert [s for s, _ in samples(tmp_path / "whole")] == [1, 2, 3, 4]
