"""Recorded runs for the dashboard tests.

Steps are the records ``trainer.train`` emits with the simulated backend, written through the
platform's recorder (``workers.recorder.PostgresRecorder``), as a worker writes them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from experiments.models import (
    Prompt,
    PromptSet,
    Run,
)

from trainer.config import TrainConfig
from trainer.types import RankRecord, StepRecord


def make_prompt_set(name: str = "arith-test", size: int = 12) -> PromptSet:
    from trainer.digest import PromptDigest

    prompts = [Prompt(index=i, text=f"{i}+{i + 1}=", answer=str(2 * i + 1)[::-1],
                      metadata={"pass_rate": (i + 0.5) / size}) for i in range(size)]
    # With its content hash, as the import service stores every set.
    ps = PromptSet.objects.create(name=name, source=PromptSet.Source.BUILTIN, size=size,
                                  content_hash=PromptDigest.of(prompts))
    for p in prompts:
        p.prompt_set = ps
    Prompt.objects.bulk_create(prompts)
    return ps


def make_run(owner: User, prompt_set: PromptSet, *, name: str = "run",
             algorithm: str = "ada-balance", seed: int = 0, total_steps: int = 6,
             batch_size: int = 4, **overrides: Any) -> Run:
    config = TrainConfig(algorithm=algorithm, seed=seed, total_steps=total_steps,
                         batch_size=batch_size, backend="simulated", **overrides).validate()
    return Run.objects.create(owner=owner, name=name, algorithm=algorithm,
                              config=config.to_dict(), prompt_set=prompt_set, model=config.model,
                              seed=seed, total_steps=total_steps)


def write_step(run: Run, record: StepRecord) -> None:
    """Write one step through the platform's recorder, as a worker does."""
    from workers.recorder import PostgresRecorder

    PostgresRecorder(run.pk).on_step(record)
    run.refresh_from_db()


def trained_steps(run: Run, out_dir: Path) -> list[StepRecord]:
    """The step records ``trainer.train`` emits for the run's config with the simulated backend
    (per-prompt pass rates from the prompts' metadata)."""
    from trainer import train
    from trainer.backends.simulated import SimulatedBackend
    from trainer.recorders import ListRecorder
    from trainer.types import Prompt as TrainerPrompt

    config = TrainConfig.from_dict({**run.config, "backend": "simulated", "eval_every": 0,
                                    "save_every": 0})
    prompts = [TrainerPrompt(id=str(p.pk), text=p.text, answer=p.answer, metadata=p.metadata)
               for p in Prompt.objects.filter(prompt_set=run.prompt_set).order_by("index")]
    recorder = ListRecorder()
    train(config, prompts, SimulatedBackend(config), recorder, out_dir=out_dir)
    return recorder.steps


def record_run(run: Run, steps: int | None = None, response: str | None = None) -> Run:
    """Train the run with the simulated backend and record its steps as the worker does.
    ``response`` (a format string with ``{i}``) replaces the response texts, for escaping tests."""
    with tempfile.TemporaryDirectory() as tmp:
        records = trained_steps(run, Path(tmp))
    for record in records[:steps]:
        if response is not None:
            for s in record.samples:
                s.response = response.format(i=s.index)
        write_step(run, record)
    run.refresh_from_db()
    return run


def record_run_with_evals(run: Run, eval_prompts: list[Any]) -> Run:
    """Train the run with the simulated backend, evaluations included (its ``eval_every`` and
    ``eval_k`` on ``eval_prompts``), and record steps and evaluations as the worker does."""
    from trainer import train
    from trainer.backends.simulated import SimulatedBackend
    from trainer.recorders import ListRecorder
    from trainer.types import Prompt as TrainerPrompt
    from workers.recorder import PostgresRecorder

    config = TrainConfig.from_dict({**run.config, "backend": "simulated", "save_every": 0})
    prompts = [TrainerPrompt(id=str(p.pk), text=p.text, answer=p.answer, metadata=p.metadata)
               for p in Prompt.objects.filter(prompt_set=run.prompt_set).order_by("index")]
    recorder = ListRecorder()
    with tempfile.TemporaryDirectory() as tmp:
        train(config, prompts, SimulatedBackend(config), recorder, out_dir=Path(tmp),
              eval_prompts=eval_prompts)
    postgres = PostgresRecorder(run.pk)
    for kind, _, record in recorder.events:
        if kind == "step":
            postgres.on_step(record)
        elif kind == "eval":
            postgres.on_eval(record)
    run.refresh_from_db()
    return run


# --- a world_size > 1 run (the run page's "Across ranks") ------------------------------------

NODES = ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2")


def two_node_run(owner: User) -> Run:
    config = TrainConfig(backend="vllm", world_size=4, device="cuda", batch_size=4,
                         total_steps=3)
    return Run.objects.create(owner=owner, name="four ranks", algorithm=config.algorithm,
                              config=config.to_dict(), prompt_set=make_prompt_set(),
                              model=config.model, total_steps=3, queue="ray")


def ranks(step: int) -> list[RankRecord]:
    """Four ranks on two nodes; rank 2 generates 60% slower than the others from step 2 on
    (in step 1 rank 3 is the slowest by a little)."""
    out = []
    for k in range(4):
        gen = 10.0 + (6.0 if k == 2 and step > 1 else 0.0) + (0.5 if k == 3 else 0.0)
        out.append(RankRecord(rank=k, node=NODES[k], device=f"NVIDIA H100 80GB HBM3 (cuda:{k % 2})",
                              generation_s=gen, update_s=4.0, weight_gather_s=0.02,
                              engine_load_s=0.15))
    return out


def record(run: Run, steps: int = 3) -> None:
    for step in range(1, steps + 1):
        write_step(run, StepRecord(step=step, metrics={"time_step": 20.0}, rounds=[],
                                   prompts=[], samples=[], ranks=ranks(step)))


def split_ranks(step: int) -> list[RankRecord]:
    """The four ranks split (rollout_ranks = 2): ranks 0 and 1 on the first node train (their
    part of the update and the weight gather, no engine), ranks 2 and 3 on the second generate
    (every request, then loading the new weights; no shard); rank 2 generates 60% slower from
    step 2 on."""
    out = []
    for k in range(4):
        rollout = k >= 2
        gen = (10.0 + (6.0 if k == 2 and step > 1 else 0.0)) if rollout else 0.0
        out.append(RankRecord(rank=k, node=NODES[k], device=f"NVIDIA H100 80GB HBM3 (cuda:{k % 2})",
                              generation_s=gen, update_s=0.0 if rollout else 8.0,
                              weight_gather_s=0.0 if rollout else 0.02,
                              engine_load_s=0.15 if rollout else 0.0,
                              role="rollout" if rollout else "train"))
    return out


def record_split(run: Run, steps: int = 3) -> None:
    """``run`` (``two_node_run``) as a rollout/train split: its config says rollout_ranks = 2,
    its steps record each rank's role."""
    Run.objects.filter(pk=run.pk).update(config={**run.config, "rollout_ranks": 2})
    for step in range(1, steps + 1):
        write_step(run, StepRecord(step=step, metrics={"time_step": 20.0}, rounds=[],
                                   prompts=[], samples=[], ranks=split_ranks(step)))


# --- a sweep with a failed seed (compare, the report, the runs list and the API leave it out) ---

def sweep_with_a_failed_seed(owner: User, steps: int = 6) -> Any:
    """A sweep over GRPO and Seq-balance x seeds 0 and 1, recorded as a worker records it:
    Seq-balance's seed 0 failed before its first step, GRPO's seed 1 was cancelled two steps
    short of the end, the other two ran all ``steps``."""
    from experiments import services

    base = {"backend": "simulated", "batch_size": 4, "total_steps": steps, "eval_every": 0,
            "save_every": 0}
    sweep = services.launch_sweep(owner, "mixed", base, {"algorithm": ["grpo", "ada-balance"],
                                                         "seed": [0, 1]},
                                  make_prompt_set(name="mixed-set", size=12))
    for run in sweep.runs.all():
        if (run.algorithm, run.seed) == ("ada-balance", 0):
            Run.objects.filter(pk=run.pk).update(
                status=Run.Status.FAILED, error="ValueError: device: these ranks were built "
                                                "with 'cpu', the run asks for 'auto'")
        elif (run.algorithm, run.seed) == ("grpo", 1):
            record_run(run, steps=steps - 2)
            Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
        else:
            record_run(run)
            Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    return sweep
