"""Asynchronous training's overlap in one process (issue 29 item 4): the tick the schedule places
during an update runs on an engine thread while the update trains, and the run's records are
those of the same schedule run serially, record for record."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer import train
from trainer.backends.simulated import SimulatedBackend
from trainer.config import TrainConfig
from trainer.learner import SamplingOnly
from trainer.recorders import ListRecorder, event

# The step metrics of the timeline (asynchronous runs only).
TIMELINE = ("time_engine_busy", "time_trainer_busy", "time_overlap", "time_engine_idle_share",
            "time_trainer_idle_share")


def prompts(n: int = 20) -> list[Any]:
    from trainer.types import Prompt

    rates = (0.0, 0.25, 0.5, 0.75, 1.0)
    return [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": rates[i % len(rates)]})
            for i in range(n)]


def records(rec: ListRecorder) -> list[dict]:
    """Every step's record as its JSONL line (samples, prompts, rounds, metrics), the
    wall-clock metrics (``time_*``) aside."""
    out = [event("step", s) for s in rec.steps]
    for e in out:
        e["metrics"] = {k: v for k, v in e["metrics"].items() if not k.startswith("time_")}
    return out


def sim_run(tmp_path: Path, engine_thread: bool, backend: Any = None, **kw: Any
            ) -> ListRecorder:
    base = dict(backend="simulated", batch_size=4, total_steps=6, save_every=3, eval_every=0,
                seed=3, verifier="exact", max_policy_lag=1)
    rec = ListRecorder()
    result = train(TrainConfig(**{**base, **kw}), prompts(),
                   backend if backend is not None else SimulatedBackend(), rec,
                   out_dir=tmp_path, engine_thread=engine_thread)
    assert result.status == "completed"
    return rec


@pytest.mark.parametrize("algorithm,k", [("grpo", 1), ("ada-balance", 2), ("dapo", 1),
                                         ("ada-est", 1)])
def test_the_engine_thread_records_what_the_serial_schedule_records(tmp_path, algorithm,
                                                                     k) -> None:
    threaded = sim_run(tmp_path / "t", True, algorithm=algorithm, max_policy_lag=k)
    serial = sim_run(tmp_path / "s", False, algorithm=algorithm, max_policy_lag=k)
    assert records(threaded) == records(serial)
    assert sum(len(s.samples) for s in threaded.steps) > 0
    for s in threaded.steps:
        m = s.metrics
        assert set(TIMELINE) <= set(m)
        assert 0 <= m["time_engine_idle_share"] <= 1 and 0 <= m["time_trainer_idle_share"] <= 1
        assert m["time_engine_busy"] == m["time_generation"]
        assert m["time_trainer_busy"] == m["time_update"]
    # Serially nothing overlaps.
    assert all(s.metrics["time_overlap"] == 0 for s in serial.steps)


def test_a_synchronous_run_records_no_timeline(tmp_path) -> None:
    rec = sim_run(tmp_path, True, algorithm="ada-balance", max_policy_lag=0)
    assert not any(key in s.metrics for s in rec.steps for key in TIMELINE)


class Rendezvous(SimulatedBackend):
    """A simulated backend whose engine tick and update (its learner's) each wait at a barrier
    for the other: a run completes only if they are under way at the same time (serially the
    first to arrive would wait alone and break the barrier)."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=30)
        self.threads: list[str] = []
        backend = self

        class Waits(SamplingOnly):
            def update(self, *args: Any, **kw: Any) -> dict[str, Any]:
                if kw["step"] > 1:  # the first tick admitted 2B prompts: none left to draw
                    backend.barrier.wait()
                return super().update(*args, **kw)

        self.learner = Waits(config)

    def generate(self, *args: Any, **kw: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            self.barrier.wait()
        return super().generate(*args, **kw)


def test_the_updates_tick_runs_on_the_engine_thread_while_the_update_trains(tmp_path) -> None:
    # GRPO at k = 1: the first tick draws the groups of the first two updates, then every
    # update overlaps one tick (the groups of the one after it).
    config = TrainConfig(backend="simulated", algorithm="grpo", batch_size=4, total_steps=4,
                         save_every=0, eval_every=0, seed=3, verifier="exact",
                         max_policy_lag=1)
    backend = Rendezvous(config)
    rec = ListRecorder()
    assert train(config, prompts(), backend, rec, out_dir=tmp_path).status == "completed"
    # Each update after the first met its tick, on the engine thread; the first tick (nothing
    # to overlap yet) ran on this one.
    assert backend.threads == [threading.main_thread().name] + ["engine-tick"] * 3
    assert [s.metrics["policy_lag_max"] for s in rec.steps] == [0, 1, 1, 1]


def test_a_failing_engine_tick_fails_the_step(tmp_path) -> None:
    class Breaks(SimulatedBackend):
        def generate(self, *args: Any, **kw: Any) -> Any:
            if threading.current_thread().name == "engine-tick":
                raise RuntimeError("engine lost")
            return super().generate(*args, **kw)

    with pytest.raises(RuntimeError, match="engine lost"):
        sim_run(tmp_path, True, backend=Breaks(), algorithm="grpo")


# --- the tiny model ----------------------------------------------------------------------------

@pytest.mark.slow
def test_tiny_model_overlap_records_equal_the_serial_schedule(builtin_model: Path,
                                                              tmp_path: Path) -> None:
    """hf: the engine thread generates from a rollout copy of the policy, the update trains
    the policy, the copy takes its weights after each update: the same records, weights
    included, as the serial schedule."""
    from trainer.backends import make_backend
    from trainer.tasks import arithmetic_prompts

    config = TrainConfig(backend="hf", device="cpu", algorithm="ada-balance", batch_size=2,
                         samples_per_round=2, max_rounds=2, group_size=2, total_steps=2,
                         save_every=0, eval_every=0, max_new_tokens=4, max_policy_lag=1,
                         tis_cap=2.0)
    data = arithmetic_prompts(8, 1, 2, seed=0)
    threads = torch.get_num_threads()
    out = {}
    for engine_thread in (True, False):
        backend = make_backend(config, data)  # loading may set every core's thread
        torch.set_num_threads(1)
        try:
            rec = ListRecorder()
            result = train(config, data, backend, rec, None, out_dir=tmp_path / str(engine_thread),
                           engine_thread=engine_thread)
        finally:
            torch.set_num_threads(threads)
            backend.close()
        assert result.status == "completed"
        # The rollout copy holds the policy's last weights, and is not the policy.
        assert backend.engine_model is not backend.model
        assert all(torch.equal(a, b) for a, b in zip(backend.engine_model.parameters(),
                                                     backend.model.parameters(), strict=True))
        assert len(backend.sync_seconds) == 2
        out[engine_thread] = (records(rec),
                              [p.detach().clone() for p in backend.model.parameters()])
    assert out[True][0] == out[False][0]
    assert all(torch.equal(a, b) for a, b in zip(out[True][1], out[False][1], strict=True))
    assert [s["metrics"]["policy_lag_max"] for s in out[True][0]] == [0, 1]
