"""Runs executed by real Celery worker processes (``-P solo``) on the test database, through the
real training loop (simulated backend: no model), recorded by the PostgreSQL recorder."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from django.db.models import Count
from experiments import services
from experiments.models import Checkpoint, PromptStep, RoundStat, Run, Sample, Step

from tests.fixtures.services import ROOT, wait_for

HOOK = {"RADA_BACKEND_HOOK": "tests.platform.worker_hooks:paced"}
SIM = {"backend": "simulated", "algorithm": "ada-balance", "batch_size": 6, "group_size": 4,
       "samples_per_round": 4, "max_rounds": 3, "eval_every": 0, "seed": 3}
TERMINAL = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED)


def wait_status(run: Run, statuses: tuple[str, ...] = TERMINAL, timeout: float = 120) -> Run:
    def done() -> Run | None:
        run.refresh_from_db()
        return run if run.status in statuses else None

    return wait_for(done, timeout, what=f"run {run.pk} to reach {statuses}")


def wait_step(run: Run, step: int, timeout: float = 120) -> None:
    def reached() -> bool:
        run.refresh_from_db()
        assert run.status not in TERMINAL or run.current_step >= step, (run.status, run.error)
        return run.current_step >= step

    wait_for(reached, timeout, what=f"run {run.pk} to record step {step}")


def replay(run: Run, tmp_path: Path, resume_from: Path | None = None, **changes: Any) -> Any:
    """The same run trained in this process with a list recorder: what the trainer emits
    (from ``resume_from``, a checkpoint of the run, where given: the steps after it).
    ``changes`` to its config must not change what a step records (``total_steps`` for more
    steps of the same run, ``save_every``)."""
    import trainer
    from trainer.config import TrainConfig
    from trainer.recorders import ListRecorder
    from workers.execution import make_backend, trainer_prompts

    config = TrainConfig.from_dict(run.config | changes)
    prompts = trainer_prompts(run.prompt_set_id)
    recorder = ListRecorder()
    backend = make_backend(config, prompts)
    try:
        trainer.train(config, prompts, backend, recorder, None,
                      out_dir=tmp_path / f"replay-{run.pk}", resume_from=resume_from)
    finally:
        backend.close()
    return recorder



def replay_as_the_worker(run: Run, tmp_path: Path, model_dir: Path,
                         monkeypatch: pytest.MonkeyPatch, resume_from: Path | None = None,
                         **changes: Any) -> Any:
    """``replay`` under the worker's conditions: the built-in model resolved to ``model_dir`` and
    one torch thread (the workers in these tests run with one; threads change float sums)."""
    import torch

    from trainer.model import MODEL_DIR_ENV

    monkeypatch.setenv(MODEL_DIR_ENV, str(model_dir))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return replay(run, tmp_path, resume_from, **changes)
    finally:
        torch.set_num_threads(threads)

def assert_recorded_as_emitted(run: Run, emitted: Any, *, first: int | None = None,
                               after: int = 0) -> None:
    """Every step, round, prompt-step and sample row equals what the trainer emitted (its
    ``first`` steps only, where the run recorded fewer: a run stopped early; the run's steps
    after step ``after`` only, where the trainer emitted a resume from that step's checkpoint)."""
    steps = {s.step: s for s in Step.objects.filter(run=run, step__gt=after)}
    expected = emitted.steps if first is None else emitted.steps[:first]
    assert first is None or len(expected) == first, (first, len(emitted.steps))
    assert sorted(steps) == [r.step for r in expected]
    for rec in expected:
        row = steps[rec.step]
        timing = {k for k in rec.metrics if k.startswith("time_")}
        for key, value in rec.metrics.items():
            if key not in timing:
                # The policy loss is a float32 mean of terms ~A x ratio whose advantages sum to
                # ~0: it lands near 1e-8, where one rounding of a float32 sum (eps 1.2e-7 of
                # terms of order 1) moves it by a few percent. Within that rounding it must agree.
                tol = {"rel": 1e-6, "abs": 1e-7} if key == "policy_loss" else {}
                assert row.metrics[key] == pytest.approx(value, nan_ok=True, **tol), key
        assert row.real_reward == pytest.approx(rec.metrics["real_reward"])
        assert row.samples == sum(r.samples for r in rec.rounds)
        rounds = list(RoundStat.objects.filter(run=run, step=rec.step).order_by(
            "round").values_list("round", "active_prompts", "samples", "positives", "finished",
                                 "tokens"))
        assert rounds == [(r.round, r.active_prompts, r.samples, r.positives, r.finished,
                           r.tokens) for r in rec.rounds]
        prompts = {str(p.prompt_id): p for p in PromptStep.objects.filter(run=run, step=rec.step)}
        assert set(prompts) == {p.prompt_id for p in rec.prompts}
        for p in rec.prompts:
            row_p = prompts[p.prompt_id]
            assert (row_p.samples, row_p.positives, row_p.negatives, row_p.rounds,
                    row_p.exit_round, row_p.missing, row_p.kept_positives,
                    row_p.kept_negatives) == (p.samples, p.positives, p.negatives, p.rounds,
                                              p.exit_round, p.missing or "", p.kept_positives,
                                              p.kept_negatives)
            assert row_p.baseline == pytest.approx(p.baseline)
            assert row_p.allocated == p.allocated
            assert row_p.p_hat == (None if p.p_hat is None else pytest.approx(p.p_hat))
        samples = {(str(s.prompt_id), s.index): s for s in Sample.objects.filter(
            run=run, step=rec.step)}
        assert len(samples) == len(rec.samples)
        for s in rec.samples:
            row_s = samples[(s.prompt_id, s.index)]
            assert (row_s.round, row_s.response, row_s.reward, row_s.kept) == (
                s.round, s.response, s.reward, s.kept)
            if s.advantage is None or not math.isfinite(s.advantage):
                assert row_s.advantage is None
            else:
                assert row_s.advantage == pytest.approx(s.advantage)


def assert_no_duplicates(run: Run) -> None:
    assert not Step.objects.filter(run=run).values("step").annotate(n=Count("*")).filter(n__gt=1)
    assert not RoundStat.objects.filter(run=run).values("step", "round").annotate(
        n=Count("*")).filter(n__gt=1)
    assert not Sample.objects.filter(run=run).values("step", "prompt", "index").annotate(
        n=Count("*")).filter(n__gt=1)
    total = sum(Step.objects.filter(run=run).values_list("samples", flat=True))
    assert Sample.objects.filter(run=run).count() == total
    run.refresh_from_db()
    assert run.samples_spent == total


def test_worker_executes_and_records_a_run(start_worker: Any, user: Any,
                                           prompt_set_factory: Any, tmp_path: Path,
                                           client: Any) -> None:
    worker = start_worker("cpu")
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "sim", SIM | {"total_steps": 4, "save_every": 2}, ps)
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert (run.current_step, run.attempts, run.lease_owner) == (4, 1, "")
    assert_recorded_as_emitted(run, replay(run, tmp_path))
    assert_no_duplicates(run)
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4]
    assert all(Path(c.path).is_dir() for c in Checkpoint.objects.filter(run=run))
    last = Step.objects.filter(run=run).order_by("step").last()
    assert run.latest_real_reward == pytest.approx(last.real_reward)

    # The worker's `platform` is the standard module, and /healthz counts the worker.
    info = [json.loads(redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).get(k))
            for k in redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).scan_iter(
                "rada:workers:*")]
    mine = [i for i in info if i["pid"] == worker.pid]
    assert mine and mine[0]["platform_system"] == os.uname().sysname
    assert mine[0]["platform_module"].endswith("platform.py")
    assert "/platform/" not in mine[0]["platform_module"].replace("/lib/python", "")
    # The compose health check of a worker container sees it too.
    check = subprocess.run([sys.executable, "-m", "workers.healthcheck"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    health = client.get("/healthz")
    assert health.status_code == 200
    body = health.json()
    assert body["database"]["ok"] and body["broker"]["ok"] and body["workers"]["cpu"] >= 1


def test_retention_kept_only(start_worker: Any, user: Any, prompt_set_factory: Any) -> None:
    start_worker("cpu")
    ps = prompt_set_factory(12, pass_rate=0.5)
    kept = services.launch_run(user, "kept", SIM | {"total_steps": 2}, ps, retention="kept")
    none = services.launch_run(user, "none", SIM | {"total_steps": 2}, ps, retention="none")
    for run in (kept, none):
        assert wait_status(run).status == Run.Status.SUCCEEDED, run.traceback
    assert not Sample.objects.filter(run=kept, kept=False, response__isnull=False).exists()
    assert not Sample.objects.filter(run=kept, kept=True, response__isnull=True).exists()
    assert Sample.objects.filter(run=none).exists()
    assert not Sample.objects.filter(run=none, response__isnull=False).exists()


def test_cancel_between_rounds_keeps_last_checkpoint(start_worker: Any, user: Any,
                                                     prompt_set_factory: Any) -> None:
    start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.2"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "cancel me", SIM | {"total_steps": 200, "save_every": 1},
                              ps)
    wait_step(run, 2)
    services.request_cancel(run, user)
    run = wait_status(run)
    assert run.status == Run.Status.CANCELLED
    assert 2 <= run.current_step < 200
    last = Checkpoint.objects.filter(run=run).order_by("step").last()
    assert last is not None and last.step == run.current_step and Path(last.path).is_dir()
    assert_no_duplicates(run)


def test_failure_is_stored_and_worker_stays_up(start_worker: Any, user: Any,
                                               prompt_set_factory: Any) -> None:
    worker = start_worker("cpu", env=HOOK)
    bad = prompt_set_factory(12, pass_rate=0.5, metadata={"fail_after_calls": 3})
    run = services.launch_run(user, "boom", SIM | {"total_steps": 20}, bad)
    run = wait_status(run)
    assert run.status == Run.Status.FAILED
    assert run.error == "RuntimeError: injected failure at generate call 4"
    assert "Traceback (most recent call last)" in run.traceback
    assert "worker_hooks.py" in run.traceback and run.lease_owner == ""
    assert worker.alive()
    # Issue 27: the same failure in a rank of a distributed run arrives through Ray (its
    # coloured remote traceback, the reason on its last line, wrapped by the launcher). The
    # error leads with the reason in plain text; the traceback keeps everything, uncoloured.
    ranked = prompt_set_factory(12, pass_rate=0.5, metadata={"fail_after_calls": 3,
                                                             "fail_as_rank": True})
    run = wait_status(services.launch_run(user, "boom on a rank", SIM | {"total_steps": 20},
                                          ranked))
    assert run.status == Run.Status.FAILED
    assert run.error == ("RuntimeError: injected failure at generate call 4 (rank 1 of 2 "
                         "failed in generate; every rank was stopped)")
    assert "\x1b" not in run.traceback and "ray::RankActor.call()" in run.traceback
    assert "worker_hooks.py" in run.traceback and "RankFailed" in run.traceback
    # The same worker takes the next run.
    ok = services.launch_run(user, "fine", SIM | {"total_steps": 2},
                             prompt_set_factory(12, pass_rate=0.5))
    assert wait_status(ok).status == Run.Status.SUCCEEDED
    assert worker.alive()


def test_deleting_a_running_run_stops_its_execution(start_worker: Any, user: Any,
                                                    prompt_set_factory: Any,
                                                    settings: Any) -> None:
    worker = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.2"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "doomed", SIM | {"total_steps": 200, "save_every": 1}, ps)
    wait_step(run, 2)
    run_id = run.pk
    services.delete_run(run, user)
    wait_for(lambda: f"run {run_id}: lease lost; the run was deleted" in worker.log(), 60,
             what="the worker to notice the deletion")
    assert not Step.objects.filter(run_id=run_id).exists()
    assert not Sample.objects.filter(run_id=run_id).exists()
    assert not (Path(settings.CHECKPOINT_ROOT) / f"run-{run_id}").exists()
    assert worker.alive()


def test_sigkill_mid_run_resumes_from_checkpoint_without_duplicates(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path) -> None:
    first = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.15"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "crash", SIM | {"total_steps": 12, "save_every": 3}, ps)
    wait_step(run, 5)  # past the checkpoint of step 3, before the one of step 6
    first.kill()
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.current_step < 12
    resume_step = max(Checkpoint.objects.filter(run=run).values_list("step", flat=True))
    second = start_worker("cpu")
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 2 and run.current_step == 12
    assert f"resuming from step {resume_step}" in second.log()
    assert_no_duplicates(run)
    assert list(Step.objects.filter(run=run).order_by("step").values_list("step", flat=True)) \
        == list(range(1, 13))
    # Resumed steps are the uninterrupted run's steps (the trainer restores its RNG state).
    assert_recorded_as_emitted(run, replay(run, tmp_path))


def test_sigkill_of_an_async_run_resumes_counting_what_was_in_flight(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path) -> None:
    """Issue 29 item 5: an asynchronous run (max_policy_lag 1) killed mid-run resumes on the
    next worker from its checkpoint: the samples that checkpoint held in flight are discarded
    and counted on the first resumed step, never recorded twice, and every row is what the
    trainer emits for that resume."""
    import trainer
    from trainer.asyncloop import ASYNC_STATE
    from trainer.checkpoint import checkpoint_dir, read_state
    from trainer.config import TrainConfig
    from trainer.recorders import ListRecorder
    from workers.execution import make_backend, trainer_prompts

    first = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "async crash", SIM | {
        "total_steps": 7, "save_every": 3, "max_policy_lag": 1}, ps)
    wait_step(run, 4)  # past the checkpoint of step 3, before the one of step 6
    first.kill()
    resume_step = max(Checkpoint.objects.filter(run=run).values_list("step", flat=True))
    ckpt = Checkpoint.objects.get(run=run, step=resume_step).path
    held = read_state(ckpt)[ASYNC_STATE]
    second = start_worker("cpu")
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 2 and run.current_step == 7
    assert f"resuming from step {resume_step}" in second.log()
    assert_no_duplicates(run)
    # The trainer in this process: the uninterrupted run to the checkpoint, then its resume.
    config = TrainConfig.from_dict(run.config)
    data = trainer_prompts(run.prompt_set_id)
    whole, resumed = ListRecorder(), ListRecorder()
    trainer.train(config, data, make_backend(config, data), whole, None,
                  out_dir=tmp_path / "whole")
    trainer.train(config, data, make_backend(config, data), resumed, None,
                  out_dir=tmp_path / "resumed",
                  resume_from=checkpoint_dir(tmp_path / "whole", resume_step))
    assert_recorded_as_emitted(run, SimpleNamespace(
        steps=whole.steps[:resume_step] + resumed.steps))
    # What was in flight: drawn before the checkpoint (version < its step), not yet trained.
    assert held["version"] == resume_step and held["inflight_samples"] > 0
    counted = Step.objects.filter(run=run).order_by("step").values_list(
        "step", "metrics__samples_inflight_discarded")
    assert [c for _, c in counted] == [held["inflight_samples"] if step == resume_step + 1
                                       else 0 for step, _ in counted]
    assert not Sample.objects.filter(run=run, policy_version__isnull=True).exists()
    assert not Sample.objects.filter(run=run, step__gt=resume_step,
                                     policy_version__lt=resume_step).exists()


def test_sigterm_hands_the_run_back_without_counting_an_attempt(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path) -> None:
    """A clean worker shutdown (SIGTERM: docker stop) does not wait for a long run: the run's
    process stops at its next poll, keeps its checkpoint and puts the run back on its queue
    with the attempt given back; the next worker resumes it, rows as an uninterrupted run's."""
    first = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.15"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "shutdown", SIM | {"total_steps": 10, "save_every": 4}, ps)
    wait_step(run, 5)  # past the checkpoint of step 4
    first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(timeout=60)  # warm shutdown, yet the run did not hold it up
    assert "handing run back" in first.log()
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.lease_owner == "" and run.attempts == 0
    assert run.current_step < 10 and run.error == ""
    second = start_worker("cpu")
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 1 and run.current_step == 10
    assert "resuming from step" in second.log()
    assert_no_duplicates(run)
    assert_recorded_as_emitted(run, replay(run, tmp_path))


def test_redelivered_task_does_not_start_a_second_execution(
        start_worker: Any, user: Any, prompt_set_factory: Any) -> None:
    # Redis redelivers a task that stays unacknowledged past the visibility timeout, here 2 s;
    # the run takes far longer (30 paced steps: >= 12 s on a quiet machine, where the copy
    # arrives about 3 s after the lease), so the idle second worker receives the same task
    # mid-run. A run that ended first would fail the wait for the copy, never pass.
    env = HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1", "CELERY_VISIBILITY_TIMEOUT": "2",
                  "CELERY_UNACKED_RESTORE_INTERVAL": "1", "CELERY_UNACKED_RESTORE_THROTTLE": "1"}
    workers = [start_worker("cpu", env=env), start_worker("cpu", env=env)]
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "long", SIM | {"total_steps": 30}, ps)

    def skipped() -> str | None:
        if any(f"run {run.pk}: skipped" in w.log() for w in workers):
            run.refresh_from_db()
            return run.status
        return None

    # The copy arrived while the first execution was still going, and did nothing.
    assert wait_for(skipped, 120, what="the redelivered copy to reach a worker") == "running"
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 1  # one lease taken, ever
    taken = [w for w in workers if f"run {run.pk}: lease taken" in w.log()]
    assert len(taken) == 1
    assert_no_duplicates(run)


def train_tiny_on_worker(start_worker: Any, user: Any, tiny_model_dir: Path, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch, config: dict[str, Any],
                         num_prompts: int = 16) -> tuple[Run, Any]:
    """Train the warm-started built-in model on a worker (hf backend, one thread), check the run
    succeeded with a policy update and Hugging Face checkpoints, and return it with what the
    trainer in this process emits for the same config (same seed, same model, one thread on
    both sides: the very rows the worker should have recorded)."""

    from trainer.model import MODEL_DIR_ENV

    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start_worker("cpu", env={MODEL_DIR_ENV: str(tiny_model_dir)} | one_thread)
    ps = services.create_builtin_prompt_set(user, "arith", num_prompts, 1, 2, 0)
    config = {"backend": "hf", "model": "builtin:tiny", "lr": 2e-4, "save_every": 1,
              "eval_every": 0, "seed": 1} | config
    run = services.launch_run(user, "tiny", config, ps)
    run = wait_status(run, timeout=600)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.current_step == config["total_steps"]
    assert_no_duplicates(run)
    for step in Step.objects.filter(run=run):
        assert step.metrics["grad_norm"] is not None and step.metrics["grad_norm"] > 0
    ckpt = Checkpoint.objects.filter(run=run).order_by("step").last()
    assert ckpt.step == config["total_steps"] and (Path(ckpt.path) / "config.json").is_file()
    assert any(Path(ckpt.path).glob("*.safetensors"))
    emitted = replay_as_the_worker(run, tmp_path, tiny_model_dir, monkeypatch)
    assert_recorded_as_emitted(run, emitted)
    return run, emitted


@pytest.mark.slow
def test_worker_trains_the_tiny_model(start_worker: Any, user: Any, tiny_model_dir: Path,
                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hf backend on the warm-started built-in model: the worker trains (policy update,
    checkpoints in Hugging Face format) and records what the trainer emits."""
    train_tiny_on_worker(start_worker, user, tiny_model_dir, tmp_path, monkeypatch, {
        "algorithm": "ada-balance", "batch_size": 4, "group_size": 4, "samples_per_round": 4,
        "max_rounds": 2, "total_steps": 2})


@pytest.mark.slow
def test_worker_trains_the_tiny_model_with_est(start_worker: Any, user: Any,
                                               tiny_model_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Reinforce-Ada-Est end to end: 8 prompts in batches of 4, so step 3 revisits step 1's
    prompts with the estimate the worker kept; every step spends exactly B x budget samples;
    p-hat and N_x are recorded per prompt-step; the checkpoint carries the estimator."""
    from trainer.checkpoint import read_state

    run, emitted = train_tiny_on_worker(start_worker, user, tiny_model_dir, tmp_path,
                                        monkeypatch, {
        "algorithm": "ada-est", "batch_size": 4, "budget_per_prompt": 4, "est_min_samples": 2,
        "est_max_samples": 8, "total_steps": 3}, num_prompts=8)
    rows = list(PromptStep.objects.filter(run=run).order_by("step", "prompt_id").values_list(
        "step", "prompt_id", "p_hat", "allocated", "samples", "positives"))
    assert len(rows) == 3 * 4
    for step in (1, 2, 3):
        of_step = [r for r in rows if r[0] == step]
        assert sum(r[3] for r in of_step) == 16 == Step.objects.get(run=run, step=step).samples
        assert all(r[3] == r[4] and 2 <= r[3] <= 8 for r in of_step)
    assert all(r[2] == pytest.approx(1 / 17) for r in rows if r[0] <= 2)  # unseen: the prior
    # Steps 1 and 2 cover the 8 prompts once; step 3's estimate of a prompt follows from the
    # counts of its first visit: (pos + 1) / (n + 17).
    first = {r[1]: r for r in rows if r[0] <= 2}
    assert len(first) == 8
    for _, pid, p_hat, *_ in (r for r in rows if r[0] == 3):
        assert p_hat == pytest.approx((first[pid][5] + 1) / (first[pid][4] + 17))
    assert Step.objects.get(run=run, step=3).metrics["p_hat_mean"] == pytest.approx(
        sum(r[2] for r in rows if r[0] == 3) / 4)
    state = read_state(Checkpoint.objects.get(run=run, step=3).path)
    assert set(state["pass_rate_estimator"]["samples"]) == {str(r[1]) for r in rows}


def test_four_clean_restarts_during_one_run(start_worker: Any, user: Any,
                                            prompt_set_factory: Any, tmp_path: Path) -> None:
    """Issue 19: three Ctrl-Cs of `make run` during one run failed it ("worker lost 3 times").
    Four clean shutdowns (SIGTERM, what the demo now sends its worker) during one run, one more
    than RUN_MAX_ATTEMPTS (3) lost attempts would allow: each hands the run back without
    counting an attempt, the page says it is interrupted and waiting to resume, and the run
    succeeds with the rows of an uninterrupted run. (Each restart costs a worker's start; a
    fifth showed nothing the fourth does not.)"""
    from django.test import Client

    ps = prompt_set_factory(12, pass_rate=0.5)
    # 2 steps per execution, the last one resumes from step 8 and trains 2 more.
    run = services.launch_run(user, "restarts", SIM | {"total_steps": 10, "save_every": 2}, ps)
    client = Client()
    client.force_login(user)
    for restart in range(4):
        worker = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.15"})
        wait_step(run, 2 * restart + 2)
        worker.proc.send_signal(signal.SIGTERM)
        worker.proc.wait(timeout=60)
        run.refresh_from_db()
        # The attempt the lease took is given back: a clean shutdown is no lost worker.
        assert run.status == Run.Status.QUEUED and run.attempts == 0, run.error
        assert run.interrupted
        page = client.get(f"/runs/{run.pk}/status/").content.decode()
        assert "interrupted, waiting to resume" in page and "ETA" not in page
    start_worker("cpu")
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 1 and run.current_step == 10 and not run.interrupted
    assert_no_duplicates(run)
    assert_recorded_as_emitted(run, replay(run, tmp_path))
