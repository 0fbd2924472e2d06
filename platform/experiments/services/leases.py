"""The run lease and the workers' side of a run's life: take, renew and release the lease,
resume from the last checkpoint, and enqueue again the runs no worker holds."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Greatest, Now

from experiments.models import Checkpoint, Run
from experiments.services.enqueue import BrokerUnavailable, enqueue_run
from experiments.services.runs import delete_run_records

# One logger for the services, whichever module of them logs.
logger = logging.getLogger("experiments.services")


def requeue_orphaned_runs(queues: Sequence[str], *, include_queued: bool = False) -> list[int]:
    """Enqueue again the runs on ``queues`` that no worker will otherwise take: running ones
    whose lease went stale (their worker died), queued ones the broker never took (it was down
    at launch), and with ``include_queued`` every queued one (their messages may be lost: a
    worker's start, a broker restart without persistence). Duplicates are harmless: the lease
    lets one execution through. Called by every worker's registry thread once per lease
    period."""
    with connection.cursor() as cursor:
        # The database's clock, not this host's: workers on several hosts compare heartbeats.
        cursor.execute(
            "SELECT id, queue FROM experiments_run WHERE queue = ANY(%s) AND ("
            "  (status = 'running' AND (heartbeat_at IS NULL "
            "     OR heartbeat_at < now() - make_interval(secs => %s))) "
            "  OR (status = 'queued' AND (enqueued_at IS NULL OR %s))) ORDER BY id",
            [list(queues), settings.RUN_LEASE_TIMEOUT_SECONDS, include_queued])
        rows = cursor.fetchall()
    for run_id, queue in rows:
        enqueue_run(run_id, queue)
        Run.objects.filter(pk=run_id).update(enqueued_at=Now())
    return [run_id for run_id, _ in rows]


# --- the run lease (called by workers) ----------------------------------------------------------
# A run executes on at most one worker: the worker that set ``lease_owner`` and keeps
# ``heartbeat_at`` fresh. Every write a worker makes for a run is conditional on still holding
# the lease, so a worker that lost it (declared dead, or the run was deleted) cannot write.

def acquire_run_lease(run_id: int, owner: str) -> Run | None:
    """Take the lease of a queued run, or of a running one whose heartbeat is older than
    ``RUN_LEASE_TIMEOUT_SECONDS`` (its worker died), counting an attempt; None when the run is
    finished, cancelled, gone, or leased by a live worker (a redelivered task then does
    nothing). A run that already had ``RUN_MAX_ATTEMPTS`` attempts (each lost: a finished one
    would not be here) is a poison run: it ends failed with "worker lost N times" instead, and
    no worker takes it again."""
    takeable = ("status IN ('queued', 'running') AND (lease_owner = '' OR heartbeat_at IS NULL "
                "OR heartbeat_at < now() - make_interval(secs => %s))")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE experiments_run SET lease_owner = %s, heartbeat_at = now(), "
            "  attempts = attempts + 1, status = 'running', current_round = 0, waiting_for = '', "
            "  started_at = COALESCE(started_at, clock_timestamp()) "
            f"WHERE id = %s AND attempts < %s AND {takeable} RETURNING id",
            [owner, run_id, settings.RUN_MAX_ATTEMPTS, settings.RUN_LEASE_TIMEOUT_SECONDS])
        if cursor.fetchone() is not None:
            return Run.objects.select_related("prompt_set", "eval_set").get(pk=run_id)
        cursor.execute(
            "UPDATE experiments_run SET status = 'failed', lease_owner = '', "
            "  current_round = 0, finished_at = now(), "
            "  error = 'worker lost ' || attempts || ' times (RUN_MAX_ATTEMPTS = ' || %s "
            "          || '); not tried again' "
            f"WHERE id = %s AND attempts >= %s AND {takeable} RETURNING attempts",
            [settings.RUN_MAX_ATTEMPTS, run_id, settings.RUN_MAX_ATTEMPTS,
             settings.RUN_LEASE_TIMEOUT_SECONDS])
        failed = cursor.fetchone()
    if failed is not None:
        logger.error("run %s: worker lost %s times; failed", run_id, failed[0])
    return None


# The order the workers take queued runs in (``take_next_run``): runs whose worker died first
# (they were admitted already), then the run of the user with the fewest runs executing on
# the queue, then of the user served longest ago (their latest run's start on the queue; never
# served first), then the user's own runs first-launched first. Within one user the order is
# the order of launch; between users it is max-min fair: one user's 60 queued runs hold a
# second user's next run back by at most the runs already executing.
FAIR_PICK = """
    WITH stats AS (
        SELECT owner_id,
               count(*) FILTER (WHERE status = 'running' AND lease_owner <> ''
                                AND heartbeat_at >= now() - make_interval(secs => %(lease)s))
                   AS executing,
               max(started_at) AS served
        FROM experiments_run WHERE queue = %(queue)s GROUP BY owner_id)
    SELECT r.id FROM experiments_run r JOIN stats s ON s.owner_id = r.owner_id
    WHERE r.queue = %(queue)s AND r.status IN ('queued', 'running')
      AND (r.lease_owner = '' OR r.heartbeat_at IS NULL
           OR r.heartbeat_at < now() - make_interval(secs => %(lease)s))
    ORDER BY (r.status = 'running') DESC, s.executing, s.served ASC NULLS FIRST, r.id
    LIMIT 1"""


def take_next_run(message_run_id: int, owner: str, queue: str | None = None) -> Run | None:
    """The worker's side of a message: take the lease of the run that is next in fair order
    on the message's queue (``FAIR_PICK``), which need not be the message's own run; None
    when no run there can be taken (the message's run is finished, leased by a live worker,
    gone; and so is every other).

    The broker's queue is first-in first-out, so a message is treated as a token ("a worker
    is free on this queue"), not as an order: every queued run has at least one message (its
    launch's, or a re-enqueue's), so taking another run for it leaves a message for the run it
    named. A message that finds nothing to take (a copy Redis redelivered while its run
    executes, one left over after its run went with another message) does nothing, as it
    always did. Picks are serialised per queue (a transaction-scoped advisory lock) so two
    workers never read the same counts, and the lease itself is ``acquire_run_lease``'s
    conditional update: attempts and poison runs count as before."""
    # The message's run says its queue; ``queue`` (the message's routing key) stands in
    # when that run was deleted, so its message still serves the queue it was sent to.
    queue = Run.objects.filter(pk=message_run_id).values_list(
        "queue", flat=True).first() or queue
    if queue is None:
        return None
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"rada-take:{queue}"])
            # A poison run fails in acquire_run_lease instead of being taken: look again.
            for _ in range(settings.RUN_MAX_ATTEMPTS + 8):
                cursor.execute(FAIR_PICK, {"queue": queue,
                                           "lease": settings.RUN_LEASE_TIMEOUT_SECONDS})
                row = cursor.fetchone()
                if row is None:
                    return None
                run = acquire_run_lease(row[0], owner)
                if run is not None:
                    return run
    return None


def run_process_lost(run_id: int, owner: str, how: str) -> str:
    """The worker holding ``owner``'s lease saw the run's process die (``how``). One attempt
    lost: below ``RUN_MAX_ATTEMPTS`` the lease is released and the run enqueued again (it
    resumes from its last checkpoint); at the cap it ends failed with "worker lost N times".
    Returns what was done, for the worker's log."""
    return _attempt_lost(run_id, owner, lambda attempts: (
        f"worker lost {attempts} times (RUN_MAX_ATTEMPTS = {settings.RUN_MAX_ATTEMPTS}; "
        f"last: {how}); not tried again"))


def requeue_after_environment_error(run_id: int, owner: str, error: str,
                                     traceback: str = "") -> str:
    """The run's process failed on an import or environment error (``error``: its reason
    first, ``trainer.errors.reason``), not through the run's own fault: retried like a lost
    worker. Below ``RUN_MAX_ATTEMPTS`` the lease is released and the run enqueued again (it
    resumes from its last checkpoint; the records past it are replaced); at the cap it ends
    failed with ``error`` first and the traceback. Returns what was done, for the log."""
    return _attempt_lost(run_id, owner, lambda attempts: (
        f"{error} (an import or environment error, retried like a lost worker: {attempts} "
        f"attempts, RUN_MAX_ATTEMPTS = {settings.RUN_MAX_ATTEMPTS}; not tried again)"),
        traceback=traceback)


def _attempt_lost(run_id: int, owner: str, final_error: Any, traceback: str = "") -> str:
    """One attempt of the leased run lost: enqueue it again, or at ``RUN_MAX_ATTEMPTS`` fail
    it with ``final_error(attempts)``."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner).first()
        if run is None:
            return "lease lost"
        if run.attempts >= settings.RUN_MAX_ATTEMPTS:
            Run.objects.filter(pk=run_id).update(
                status=Run.Status.FAILED, lease_owner="", current_round=0, finished_at=Now(),
                waiting_for="", error=final_error(run.attempts), traceback=traceback)
            return f"failed after {run.attempts} attempts"
        Run.objects.filter(pk=run_id).update(lease_owner="", heartbeat_at=None,
                                             current_round=0, waiting_for="")
    try:
        enqueue_run(run_id, run.queue)
    except BrokerUnavailable as exc:  # its lease is free: the sweep enqueues it in time
        logger.warning("run %s: not re-enqueued (%s)", run_id, exc)
    return f"re-enqueued (attempt {run.attempts} of {settings.RUN_MAX_ATTEMPTS} lost)"


def hand_back_run(run_id: int, owner: str, *, outage: bool = False) -> str:
    """The worker holding ``owner``'s lease is shutting down cleanly and stopped the run at a
    step boundary (its checkpoint kept): release the lease, give back the attempt it took (a
    clean shutdown is no failure), and put the run back on its queue, where the next worker
    resumes it from that checkpoint. Returns what was done, for the worker's log.

    ``outage``: the run's writes failed past the recorder's retry window and the database is
    back. The attempt is given back only when the run got past the step it had reached at the
    previous outage (``Run.outage_step``; steps replayed from the checkpoint are no progress):
    an outage that recurs before the run gets further counts one, so a database that cuts
    every execution ends the run in ``RUN_MAX_ATTEMPTS``."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner).first()
        if run is None:
            return "lease lost"
        progressed = not outage or run.outage_step is None or run.current_step > run.outage_step
        changes: dict[str, Any] = {"status": Run.Status.QUEUED, "lease_owner": "",
                                   "heartbeat_at": None, "current_round": 0, "waiting_for": ""}
        if progressed:
            changes["attempts"] = Greatest(F("attempts") - 1, 0)
        if outage:  # the furthest step an outage found it at
            changes["outage_step"] = max(run.outage_step or 0, run.current_step)
        Run.objects.filter(pk=run_id).update(**changes)
    try:
        enqueue_run(run_id, run.queue)
    except BrokerUnavailable as exc:  # its lease is free: the sweep enqueues it in time
        logger.warning("run %s: handed back, not re-enqueued (%s)", run_id, exc)
    if not progressed:
        return (f"handed back, attempt {run.attempts} of {settings.RUN_MAX_ATTEMPTS} counted "
                f"(not past step {run.outage_step}, where the previous outage stopped it)")
    return "handed back"


def renew_run_lease(run_id: int, owner: str) -> bool:
    """Heartbeat; False when the lease is no longer ours."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(heartbeat_at=Now()))


def set_run_waiting(run_id: int, owner: str, waiting_for: str) -> bool:
    """Say what the leased run waits for before it can train ("" once it has it), and refresh
    the heartbeat; False when the lease is no longer ours."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(
        waiting_for=waiting_for[:300], heartbeat_at=Now()))


def run_should_stop(run_id: int, owner: str) -> tuple[bool, bool]:
    """(cancel requested, lease lost) for the worker holding ``owner``'s lease."""
    row = Run.objects.filter(pk=run_id).values_list("cancel_requested", "lease_owner").first()
    if row is None:
        return False, True
    return bool(row[0]), row[1] != owner


def prepare_resume(run_id: int, owner: str) -> Checkpoint | None:
    """Before (re)starting a run: pick the checkpoint to resume from and drop every record after
    it, so the steps the trainer emits again are recorded once. Returns that checkpoint (None:
    start from scratch)."""
    ckpt = latest_checkpoint(run_id)
    resume_step = ckpt.step if ckpt else 0
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner).get()
        delete_run_records(run_id, after_step=resume_step)
        if ckpt is None:
            delete_run_records(run_id, tables=("experiments_evalresult",
                                               "experiments_checkpoint"))
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE experiments_run SET current_step = %s, current_round = 0, "
                "  samples_spent = (SELECT COALESCE(SUM(samples), 0) FROM experiments_step "
                "                   WHERE run_id = %s), "
                "  latest_real_reward = (SELECT real_reward FROM experiments_step "
                "                        WHERE run_id = %s ORDER BY step DESC LIMIT 1) "
                "WHERE id = %s", [resume_step, run_id, run_id, run_id])
    return ckpt


def finish_run(run_id: int, owner: str, status: str, *, error: str = "",
               traceback: str = "") -> bool:
    """Record how the execution ended and release the lease; False when the lease was lost."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(
        status=status, error=error, traceback=traceback, lease_owner="", current_round=0,
        waiting_for="",
        finished_at=Now(), heartbeat_at=Now()))


def latest_checkpoint(run_id: int) -> Checkpoint | None:
    """The newest recorded checkpoint whose folder still exists."""
    for ckpt in Checkpoint.objects.filter(run_id=run_id).order_by("-step"):
        if Path(ckpt.path).exists():
            return ckpt
    return None
