"""Recorded runs for the dashboard tests.

Steps are emitted as the trainer emits them (``trainer.types.StepRecord``) by a small simulated
Reinforce-Ada sampler, and written through the platform's recorder (``workers.recorder``) when it
is importable; until it lands on main, an ORM writer with the same row layout stands in.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import (
    Prompt,
    PromptSet,
    PromptStep,
    RoundStat,
    Run,
    Sample,
    Step,
)

from trainer.config import TrainConfig
from trainer.types import PromptStepRecord, SampleRecord, StepRecord
from trainer.types import RoundStat as RoundRecord


@pytest.fixture
def plain_static_storage(settings: Any) -> None:
    """Tests run without ``collectstatic``: the manifest storage of production would refuse to
    build URLs, so tests use the plain storage (same URLs minus the content hash)."""
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}


def make_prompt_set(name: str = "arith-test", size: int = 12) -> PromptSet:
    ps = PromptSet.objects.create(name=name, source=PromptSet.Source.BUILTIN, size=size)
    Prompt.objects.bulk_create(
        Prompt(prompt_set=ps, index=i, text=f"{i}+{i + 1}=", answer=str(2 * i + 1)[::-1],
               metadata={"pass_rate": (i + 0.5) / size}) for i in range(size))
    return ps


def make_run(owner: User, prompt_set: PromptSet, *, name: str = "run",
             algorithm: str = "ada-balance", seed: int = 0, total_steps: int = 6,
             batch_size: int = 4, **overrides: Any) -> Run:
    config = TrainConfig(algorithm=algorithm, seed=seed, total_steps=total_steps,
                         batch_size=batch_size, backend="simulated", **overrides).validate()
    return Run.objects.create(owner=owner, name=name, algorithm=algorithm,
                              config=config.to_dict(), prompt_set=prompt_set, model=config.model,
                              seed=seed, total_steps=total_steps)


def simulate_step(run: Run, step: int, prompts: list[Prompt], rng: random.Random,
                  response: str = "{i}") -> StepRecord:
    """One step of Reinforce-Ada (or GRPO) sampling with Bernoulli rewards per prompt."""
    cfg = run.config
    n, m, rounds_max = cfg["group_size"], cfg["samples_per_round"], cfg["max_rounds"]
    adaptive = run.algorithm != "grpo"
    batch = [prompts[(step * cfg["batch_size"] + j) % len(prompts)]
             for j in range(cfg["batch_size"])]
    pools: dict[int, list[tuple[int, float]]] = {p.pk: [] for p in batch}
    exit_round: dict[int, int | None] = {p.pk: None for p in batch}
    rounds: list[RoundRecord] = []
    for rnd in range(1, (rounds_max if adaptive else 1) + 1):
        active = [p for p in batch if exit_round[p.pk] is None]
        if not active:
            break
        draws, pos_total, finished = 0, 0, 0
        for p in active:
            for _ in range(m if adaptive else n):
                r = 1.0 if rng.random() < p.metadata["pass_rate"] else 0.0
                pools[p.pk].append((rnd, r))
                draws += 1
                pos_total += int(r > 0.5)
            pos = sum(1 for _, r in pools[p.pk] if r > 0.5)
            neg = len(pools[p.pk]) - pos
            if run.algorithm == "ada-pos":
                done = pos >= 1
            else:
                done = pos >= n // 2 and neg >= n - n // 2
            if adaptive and done:
                exit_round[p.pk] = rnd
                finished += 1
        if not adaptive:
            finished = len(active)
            for p in active:
                exit_round[p.pk] = 1
        rounds.append(RoundRecord(round=rnd, active_prompts=len(active), samples=draws,
                                  positives=pos_total, finished=finished, tokens=draws * 3))
    prompt_records, samples = [], []
    for p in batch:
        pool = pools[p.pk]
        pos = sum(1 for _, r in pool if r > 0.5)
        baseline = sum(r for _, r in pool) / len(pool)
        kept = set(range(min(n, len(pool))))
        missing = None
        if exit_round[p.pk] is None:
            missing = "positives" if pos == 0 or run.algorithm == "ada-pos" else "negatives"
        prompt_records.append(PromptStepRecord(
            prompt_id=str(p.pk), samples=len(pool), positives=pos, negatives=len(pool) - pos,
            rounds=pool[-1][0], exit_round=exit_round[p.pk],
            kept_positives=sum(1 for i in kept if pool[i][1] > 0.5),
            kept_negatives=sum(1 for i in kept if pool[i][1] <= 0.5), baseline=baseline,
            missing=missing, tokens=len(pool) * 3))
        for i, (rnd, r) in enumerate(pool):
            samples.append(SampleRecord(
                prompt_id=str(p.pk), round=rnd, index=i, response=response.format(i=i),
                tokens=3, reward=r, kept=i in kept,
                advantage=(r - baseline) if i in kept else None))
    total = sum(r.samples for r in rounds)
    real = [r for p in batch for _, r in pools[p.pk][:n]]
    unresolved = [pr for pr in prompt_records if pr.exit_round is None]
    metrics = {
        "reward_all": sum(s.reward for s in samples) / len(samples),
        "real_reward": sum(real) / len(real),
        "kept_reward": sum(s.reward for s in samples if s.kept) / sum(1 for s in samples if s.kept),
        "samples": float(total), "tokens": float(total * 3),
        "zero_adv_frac": sum(1 for pr in prompt_records if pr.kept_positives == 0
                             or pr.kept_negatives == 0) / len(batch),
        "first_round_all_correct": 0.1, "first_round_all_wrong": 0.2,
        "unresolved": float(len(unresolved)),
        "unresolved_missing_pos": float(sum(1 for u in unresolved if u.missing == "positives")),
        "unresolved_missing_neg": float(sum(1 for u in unresolved if u.missing == "negatives")),
        "entropy": 1.0 / step, "policy_loss": 0.01, "kl": 0.0,
        "clip_frac_low": 0.01, "clip_frac_high": 0.02, "grad_norm": 0.5,
        "response_length": 3.0, "verifier_errors": 0.0, "lr": 1e-6,
        "time_generation": 0.5, "time_scoring": 0.1, "time_update": 0.3,
        "time_step": 0.9 + math.sin(step) * 0.01,
    }
    return StepRecord(step=step, metrics=metrics, rounds=rounds, prompts=prompt_records,
                      samples=samples)


def write_step(run: Run, record: StepRecord, wall_seconds: float) -> None:
    """Write one step as the recorder does (all rows of the step, then progress)."""
    try:  # the platform's recorder, once it exists
        from workers.recorder import PostgresRecorder  # type: ignore[import-not-found]
    except ImportError:
        PostgresRecorder = None  # noqa: N806
    if PostgresRecorder is not None:  # pragma: no cover - depends on main
        PostgresRecorder(run.pk).on_step(record)
        return
    m = record.metrics
    Step.objects.create(run=run, step=record.step, metrics=m, real_reward=m["real_reward"],
                        kept_reward=m["kept_reward"], samples=int(m["samples"]),
                        tokens=int(m["tokens"]), wall_seconds=wall_seconds)
    RoundStat.objects.bulk_create(
        RoundStat(run=run, step=record.step, round=r.round, active_prompts=r.active_prompts,
                  samples=r.samples, positives=r.positives, finished=r.finished, tokens=r.tokens)
        for r in record.rounds)
    PromptStep.objects.bulk_create(
        PromptStep(run=run, step=record.step, prompt_id=int(p.prompt_id), samples=p.samples,
                   positives=p.positives, negatives=p.negatives, rounds=p.rounds,
                   exit_round=p.exit_round, missing=p.missing or "",
                   kept_positives=p.kept_positives, kept_negatives=p.kept_negatives,
                   baseline=p.baseline, tokens=p.tokens) for p in record.prompts)
    Sample.objects.bulk_create(
        Sample(run=run, step=record.step, prompt_id=int(s.prompt_id), index=s.index,
               round=s.round, response=s.response, tokens=s.tokens, reward=s.reward,
               kept=s.kept, advantage=s.advantage) for s in record.samples)
    Run.objects.filter(pk=run.pk).update(
        current_step=record.step, samples_spent=run.samples_spent + int(m["samples"]),
        latest_real_reward=m["real_reward"])
    run.refresh_from_db()


def record_run(run: Run, steps: int | None = None, seed: int = 0,
               response: str = "{i}") -> Run:
    prompts = list(Prompt.objects.filter(prompt_set=run.prompt_set).order_by("index"))
    rng = random.Random(seed)
    for step in range(1, (steps or run.total_steps) + 1):
        write_step(run, simulate_step(run, step, prompts, rng, response), wall_seconds=step * 0.9)
    run.refresh_from_db()
    return run
