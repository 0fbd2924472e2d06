"""The PostgreSQL recorder in-process: idempotent steps, retention, lease checks, progress."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from experiments import services
from experiments.models import Checkpoint, EvalResult, PromptStep, RoundStat, Run, Sample, Step

from trainer.types import (
    CheckpointRecord,
    EvalRecord,
    PromptStepRecord,
    SampleRecord,
    StepRecord,
)
from trainer.types import (
    RoundStat as RoundRecord,
)
from workers.recorder import LeaseLost, PostgresRecorder

SIM = {"backend": "simulated", "batch_size": 2, "total_steps": 5}


def step_record(step: int, prompt_ids: list[int], reward: float = 1.0) -> StepRecord:
    samples = [SampleRecord(prompt_id=str(pid), round=1 + i // 2, index=i, response=f"r{i}",
                            tokens=2, reward=reward if i % 2 == 0 else 0.0, kept=i < 2,
                            advantage=0.5 if i < 2 else None)
               for pid in prompt_ids for i in range(4)]
    prompts = [PromptStepRecord(prompt_id=str(pid), samples=4, positives=2, negatives=2,
                                rounds=2, exit_round=None, kept_positives=1, kept_negatives=1,
                                baseline=0.5, missing="negatives") for pid in prompt_ids]
    rounds = [RoundRecord(round=1, active_prompts=2, samples=4, positives=2, finished=0),
              RoundRecord(round=2, active_prompts=2, samples=4, positives=2, finished=0)]
    metrics = {"real_reward": reward / 2, "kept_reward": float("nan"), "samples": 8.0,
               "tokens": 16.0, "time_step": 1.5}
    return StepRecord(step=step, metrics=metrics, rounds=rounds, prompts=prompts,
                      samples=samples)


@pytest.fixture
def run(db: None, user: Any, prompt_set_factory: Any) -> Run:
    return services.launch_run(user, "rec", SIM, prompt_set_factory(4))


def prompt_ids(run: Run) -> list[int]:
    return list(run.prompt_set.prompts.order_by("index").values_list("pk", flat=True)[:2])


def test_step_rows_and_progress(run: Run) -> None:
    rec = PostgresRecorder(run.pk)
    rec.on_step(step_record(1, prompt_ids(run)))
    rec.on_step(step_record(2, prompt_ids(run), reward=0.0))
    run.refresh_from_db()
    assert (run.current_step, run.samples_spent, run.latest_real_reward) == (2, 16, 0.0)
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert [s.wall_seconds for s in steps] == [1.5, 3.0]  # cumulative training time
    assert steps[0].metrics["kept_reward"] is None and steps[0].kept_reward is None  # NaN
    assert RoundStat.objects.filter(run=run).count() == 4
    assert PromptStep.objects.filter(run=run, missing="negatives").count() == 4
    assert Sample.objects.filter(run=run).count() == 16
    assert Sample.objects.filter(run=run, kept=False, advantage__isnull=True).count() == 8


def test_est_estimate_and_allocation_per_prompt_step(run: Run) -> None:
    record = step_record(1, prompt_ids(run))
    record.prompts[0].p_hat, record.prompts[0].allocated = 1 / 17, 4
    record.prompts[1].p_hat, record.prompts[1].allocated = float("nan"), 4  # NaN: stored as NULL
    PostgresRecorder(run.pk).on_step(record)
    rows = dict(PromptStep.objects.filter(run=run).values_list("prompt_id", "p_hat"))
    assert rows == {int(record.prompts[0].prompt_id): pytest.approx(1 / 17),
                    int(record.prompts[1].prompt_id): None}
    assert set(PromptStep.objects.filter(run=run).values_list("allocated", flat=True)) == {4}
    # Seq and GRPO steps leave both empty.
    PostgresRecorder(run.pk).on_step(step_record(2, prompt_ids(run)))
    assert not PromptStep.objects.filter(run=run, step=2, p_hat__isnull=False).exists()
    assert not PromptStep.objects.filter(run=run, step=2, allocated__isnull=False).exists()


def test_each_samples_policy_version_is_stored_null_when_synchronous(run: Run) -> None:
    import dataclasses

    ids = prompt_ids(run)
    PostgresRecorder(run.pk).on_step(step_record(1, ids))
    stale = step_record(2, ids)
    stale = dataclasses.replace(stale, samples=[
        dataclasses.replace(x, policy_version=x.index % 2) for x in stale.samples])
    PostgresRecorder(run.pk).on_step(stale)
    rows = Sample.objects.filter(run=run)
    assert set(rows.filter(step=1).values_list("policy_version", flat=True)) == {None}
    assert sorted(rows.filter(step=2).values_list("index", "policy_version")) == sorted(
        (x.index, x.index % 2) for x in stale.samples)


def test_recording_a_step_again_replaces_it(run: Run) -> None:
    rec = PostgresRecorder(run.pk)
    rec.on_step(step_record(1, prompt_ids(run)))
    rec.on_step(step_record(2, prompt_ids(run)))
    rec.on_step(step_record(2, prompt_ids(run), reward=0.0))  # a resumed run re-emits step 2
    assert Step.objects.filter(run=run).count() == 2
    assert Sample.objects.filter(run=run, step=2).count() == 8
    assert not Sample.objects.filter(run=run, step=2, reward=1.0).exists()
    run.refresh_from_db()
    assert run.samples_spent == 16 and run.latest_real_reward == 0.0


@pytest.mark.parametrize(("retention", "texts"), [("all", 8), ("kept", 4), ("none", 0)])
def test_retention(db: None, user: Any, prompt_set_factory: Any, retention: str,
                   texts: int) -> None:
    run = services.launch_run(user, "ret", SIM, prompt_set_factory(4), retention=retention)
    PostgresRecorder(run.pk).on_step(step_record(1, prompt_ids(run)))
    assert Sample.objects.filter(run=run, response__isnull=False).count() == texts
    if retention == "kept":
        assert not Sample.objects.filter(run=run, kept=True, response__isnull=True).exists()


def test_writes_need_the_lease(run: Run) -> None:
    assert services.acquire_run_lease(run.pk, "worker-a") is not None
    assert services.acquire_run_lease(run.pk, "worker-b") is None  # live lease: no takeover
    PostgresRecorder(run.pk, lease_owner="worker-a").on_step(step_record(1, prompt_ids(run)))
    stale = PostgresRecorder(run.pk, lease_owner="worker-b")
    for call in (lambda: stale.on_step(step_record(2, prompt_ids(run))),
                 lambda: stale.on_round(2, RoundRecord(1, 2, 4, 2, 0)),
                 lambda: stale.on_checkpoint(CheckpointRecord(2, "/x"))):
        with pytest.raises(LeaseLost):
            call()
    assert list(Step.objects.filter(run=run).values_list("step", flat=True)) == [1]


def test_stale_lease_is_taken_over_and_resume_drops_later_steps(run: Run,
                                                                 tmp_path: Any) -> None:
    assert services.acquire_run_lease(run.pk, "dead") is not None
    rec = PostgresRecorder(run.pk, lease_owner="dead")
    for step in (1, 2, 3):
        rec.on_step(step_record(step, prompt_ids(run)))
    ckpt = tmp_path / "step-2"
    ckpt.mkdir()
    rec.on_checkpoint(CheckpointRecord(2, str(ckpt)))
    rec.on_eval(EvalRecord(2, {"greedy_accuracy": 0.5}))
    # The worker died: its last heartbeat is older than the lease timeout.
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    taken = services.acquire_run_lease(run.pk, "alive")
    assert taken is not None and taken.attempts == 2
    resume = services.prepare_resume(run.pk, "alive")
    assert resume is not None and resume.step == 2
    assert list(Step.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    assert not Sample.objects.filter(run=run, step=3).exists()
    run.refresh_from_db()
    assert run.current_step == 2 and run.samples_spent == 16
    assert Checkpoint.objects.filter(run=run).count() == 1
    assert EvalResult.objects.get(run=run).metrics == {"greedy_accuracy": 0.5}
    assert services.finish_run(run.pk, "dead", Run.Status.SUCCEEDED) is False
    assert services.finish_run(run.pk, "alive", Run.Status.SUCCEEDED) is True
