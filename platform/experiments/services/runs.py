"""A launched run's changes by its owner: cancel, delete (its records with raw SQL), relaunch;
and where its records and checkpoints are."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from experiments.models import Run
from experiments.services.common import User, _check_can_modify, derived_run_name, gone
from experiments.services.launch import launch_run

# Tables holding a run's per-step records, children first. Deleted with raw SQL: Django's
# cascade would load millions of sample rows into memory to delete them one by one.
RUN_RECORD_TABLES = ("experiments_sample", "experiments_promptstep", "experiments_roundstat",
                     "experiments_step", "experiments_evalresult", "experiments_checkpoint")


def request_cancel(run: Run, user: User) -> Run:
    """Cooperative cancel: a queued run is cancelled at once; a running one stops between rounds
    (its worker checks ``cancel_requested``), keeping its last checkpoint."""
    _check_can_modify(run, user)
    now = timezone.now()
    # Conditional updates race safely with a worker taking the lease: exactly one of them wins.
    if not Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
            status=Run.Status.CANCELLED, cancel_requested=True, finished_at=now):
        Run.objects.filter(pk=run.pk).exclude(
            status__in=(Run.Status.SUCCEEDED, Run.Status.FAILED)).update(cancel_requested=True)
    try:
        run.refresh_from_db()
    except Run.DoesNotExist:  # deleted by a request that won the race
        raise gone("run", run.pk) from None
    return run


def delete_run(run: Run, user: User) -> None:
    """Delete a run, its records and its checkpoint folder. A worker still executing it loses
    its lease (the row is gone) and stops at the next round."""
    _check_can_modify(run, user)
    run_id = run.pk
    with transaction.atomic():
        # Lock the run row first: a worker's step transaction holds the same lock while it
        # writes, so its rows are either written before this delete (and deleted by it) or
        # refused after it (the row is gone). The record tables have no database-enforced
        # foreign keys, so this ordering is what prevents orphans. A relaunch or retry of
        # the run takes the same lock before it stores its clone.
        if not Run.objects.select_for_update().filter(pk=run_id).exists():
            raise gone("run", run_id)  # a delete that lost the race: the winner said 204
        delete_run_records(run_id)
        Run.objects.filter(pk=run_id).delete()
    folder = run_checkpoint_dir(run_id)
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))


def relaunch_run(run: Run, user: User) -> Run:
    """A new run with the same config, prompt sets, queue and retention, cloned from ``run``."""
    _check_can_modify(run, user)
    return launch_run(user, derived_run_name(run.name, " (relaunch)"), run.config,
                      run.prompt_set, eval_set=run.eval_set, queue=run.queue,
                      retention=run.retention, cloned_from=run)


def delete_run_records(run_id: int, *, after_step: int | None = None,
                       tables: Iterable[str] = RUN_RECORD_TABLES) -> None:
    """Delete a run's per-step records (those after ``after_step`` only, when given)."""
    with connection.cursor() as cursor:
        for table in tables:
            if after_step is None:
                cursor.execute(f"DELETE FROM {table} WHERE run_id = %s", [run_id])
            else:
                cursor.execute(f"DELETE FROM {table} WHERE run_id = %s AND step > %s",
                               [run_id, after_step])


def run_checkpoint_dir(run_id: int) -> Path:
    """Where a run's checkpoints live: under CHECKPOINT_ROOT, which every worker must share for a
    run to resume on another host."""
    return Path(settings.CHECKPOINT_ROOT) / f"run-{run_id}"


