"""Stops inside train(): cancel during an evaluation, the wall-time limit, the order of a
step's evaluation and checkpoint, and a recorder that refuses a checkpoint (a lost lease)."""

from __future__ import annotations

import pytest

from trainer import train
from trainer.backends.simulated import SimulatedBackend
from trainer.checkpoint import latest_checkpoint, read_state
from trainer.recorders import ListRecorder
from trainer.types import Prompt

from .test_loop import prompts, sim_config


class CountingBackend(SimulatedBackend):
    """Counts generate calls (evaluation and sampling alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().generate(*args, **kwargs)


def eval_set(n: int) -> list[Prompt]:
    return [Prompt(f"e{i}", f"q{i}", str(i), {"pass_rate": 0.5}) for i in range(n)]


def test_cancel_reaches_an_evaluation_between_its_batches(tmp_path) -> None:
    """An evaluation of 640 prompts is 10 batches of 64, 20 generate calls: a cancel during it
    stops it after the call in progress, and the step's checkpoint is written."""
    backend = CountingBackend()
    rec = ListRecorder()

    def should_stop() -> bool:
        return backend.calls >= 3 and len(rec.steps) == 1  # during the evaluation of step 1

    result = train(sim_config(total_steps=3, eval_every=1, save_every=0), prompts(), backend,
                   rec, should_stop, out_dir=tmp_path, eval_prompts=eval_set(640))
    assert result.status == "cancelled" and result.last_step == 1
    # Evaluation of step 0 (20 calls) was whole; step 1's sampling; then a few of step 1's eval.
    evals = rec.of_type("eval")
    assert [e.step for e in evals] == [0]
    assert backend.calls < 20 + 4 + 20
    assert read_state(result.checkpoint)["step"] == 1


def test_wall_time_limit_stops_the_run_with_its_own_status(tmp_path) -> None:
    class Slow(SimulatedBackend):
        def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            import time

            time.sleep(0.05)
            return super().generate(*args, **kwargs)

    rec = ListRecorder()
    result = train(sim_config(total_steps=100_000, max_wall_seconds=0.5, save_every=0),
                   prompts(), Slow(), rec, out_dir=tmp_path)
    assert result.status == "time_limit" and not result.cancelled
    assert 1 <= result.last_step < 100_000 and len(rec.steps) == result.last_step
    state = read_state(result.checkpoint)
    assert state["step"] == result.last_step and state["elapsed_seconds"] > 0.5


def test_a_resumed_run_counts_the_seconds_trained_before(tmp_path) -> None:
    rec = ListRecorder()
    train(sim_config(total_steps=2, save_every=2), prompts(), SimulatedBackend(), rec,
          out_dir=tmp_path / "a")
    ckpt = latest_checkpoint(tmp_path / "a")
    state = read_state(ckpt)
    import json

    state["elapsed_seconds"] = 1e6  # as if it had trained for days
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    result = train(sim_config(total_steps=4, max_wall_seconds=1000), prompts(),
                   SimulatedBackend(), ListRecorder(), out_dir=tmp_path / "b", resume_from=ckpt)
    assert result.status == "time_limit" and result.last_step == 2


class CrashAtEval(ListRecorder):
    """A worker dying while it evaluates step ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_eval(self, record) -> None:  # type: ignore[no-untyped-def]
        if record.step == self.at:
            raise SystemExit("killed")
        super().on_eval(record)


def test_a_crash_before_a_checkpoint_steps_evaluation_replays_it_on_resume(tmp_path) -> None:
    """Evaluation comes before the checkpoint of its step: a crash in between leaves the older
    checkpoint, and the resumed run evaluates that step again."""
    cfg = sim_config(total_steps=4, eval_every=2, save_every=2)
    with pytest.raises(SystemExit):
        train(cfg, prompts(), SimulatedBackend(), CrashAtEval(at=4), out_dir=tmp_path,
              eval_prompts=eval_set(8))
    ckpt = latest_checkpoint(tmp_path)
    assert read_state(ckpt)["step"] == 2  # not 4: step 4 was never evaluated
    rec = ListRecorder()
    train(cfg, prompts(), SimulatedBackend(), rec, out_dir=tmp_path, eval_prompts=eval_set(8),
          resume_from=ckpt)
    assert [e.step for e in rec.of_type("eval")] == [4]
    assert [c.step for c in rec.of_type("checkpoint")] == [4]


class LeaseLostAtCheckpoint(ListRecorder):
    def before_checkpoint(self, step: int) -> None:
        raise RuntimeError("lease lost")


def test_a_recorder_can_refuse_a_checkpoint_before_any_file_is_written(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="lease lost"):
        train(sim_config(total_steps=2, save_every=1), prompts(), SimulatedBackend(),
              LeaseLostAtCheckpoint(), out_dir=tmp_path)
    assert not (tmp_path / "checkpoints").exists() or not any(
        (tmp_path / "checkpoints").iterdir())
