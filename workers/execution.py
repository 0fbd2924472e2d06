"""Executing one run on a worker: lease, resume, train, record, finish.

A run executes on at most one worker at a time. The worker takes the run's lease (a conditional
UPDATE on the run row), refreshes its heartbeat from a thread while training, and checks the
lease before every write; a copy of the task that Celery redelivers while the lease is live does
nothing. When a worker dies its heartbeat goes stale, and the next worker to get the task takes
the lease over and resumes from the run's last checkpoint, after deleting the records of the
steps past it (the trainer emits them again).
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import socket
import threading
import traceback
import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection
from experiments import selectors, services
from experiments.models import Run

from trainer.config import TrainConfig
from trainer.types import Prompt
from workers.recorder import LeaseLost, PostgresRecorder

logger = logging.getLogger("workers.execution")

# Test seam: "module:function" taking (backend, config) and returning the backend to train
# with. The lifecycle tests use it to pace generation and to inject failures into the real
# training loop; production leaves it unset.
BACKEND_HOOK_ENV = "RADA_BACKEND_HOOK"


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
                    logger.exception("run %s: heartbeat failed", self.run_id)
        finally:
            connection.close()  # this thread's own connection

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


class StopCheck:
    """``should_stop`` for ``trainer.train``, polled between rounds: a cancel request or a lost
    lease stops the run cleanly."""

    def __init__(self, run_id: int, owner: str, heartbeat: Heartbeat) -> None:
        self.run_id, self.owner, self.heartbeat = run_id, owner, heartbeat
        self.cancelled = False
        self.lease_lost = False

    def __call__(self) -> bool:
        if self.heartbeat.lost.is_set():
            self.lease_lost = True
        else:
            self.cancelled, self.lease_lost = services.run_should_stop(self.run_id, self.owner)
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


def execute(run_id: int) -> str:
    """Execute (or resume) run ``run_id``; returns what happened, for the worker's log."""
    owner = new_lease_owner()
    run = services.acquire_run_lease(run_id, owner)
    if run is None:
        logger.info("run %s: skipped (finished, cancelled, deleted or leased by a live worker)",
                    run_id)
        return "skipped"
    logger.info("run %s: lease taken by %s (attempt %s)", run_id, owner, run.attempts)
    heartbeat = Heartbeat(run_id, owner, settings.RUN_HEARTBEAT_SECONDS)
    heartbeat.start()
    try:
        if run.cancel_requested:  # cancelled while its worker was dead
            services.finish_run(run_id, owner, Run.Status.CANCELLED)
            return "cancelled"
        status = _train(run, owner, heartbeat)
    except LeaseLost:
        return _lease_lost(run_id)
    except Exception as exc:
        if heartbeat.lost.is_set():
            return _lease_lost(run_id)
        logger.exception("run %s failed", run_id)
        services.finish_run(run_id, owner, Run.Status.FAILED,
                            error=f"{type(exc).__name__}: {exc}"[:10_000],
                            traceback=traceback.format_exc())
        return "failed"
    finally:
        heartbeat.stop()
    logger.info("run %s: %s", run_id, status)
    return status


def _lease_lost(run_id: int) -> str:
    if Run.objects.filter(pk=run_id).exists():
        logger.warning("run %s: lease lost; another worker owns the run now", run_id)
    else:
        # Deleted while training: the trainer may have written a checkpoint after the delete
        # removed the run's folder.
        logger.warning("run %s: lease lost; the run was deleted", run_id)
        shutil.rmtree(services.run_checkpoint_dir(run_id), ignore_errors=True)
    return "lease lost"


def _train(run: Run, owner: str, heartbeat: Heartbeat) -> str:
    import trainer

    config = TrainConfig.from_dict(run.config)
    checkpoint = services.prepare_resume(run.pk, owner)
    if checkpoint is not None:
        logger.info("run %s: resuming from step %s (%s)", run.pk, checkpoint.step,
                    checkpoint.path)
    prompts = trainer_prompts(run.prompt_set_id)
    eval_prompts = trainer_prompts(run.eval_set_id) if run.eval_set_id else None
    backend = make_backend(config, prompts)
    should_stop = StopCheck(run.pk, owner, heartbeat)
    try:
        result = trainer.train(config, prompts, backend,
                               PostgresRecorder(run.pk, lease_owner=owner), should_stop,
                               out_dir=services.run_checkpoint_dir(run.pk),
                               eval_prompts=eval_prompts,
                               resume_from=checkpoint.path if checkpoint else None)
    finally:
        # A worker process executes many runs: a vllm engine (and its KV cache) must not
        # outlive its run.
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    if should_stop.lease_lost:
        raise LeaseLost(f"run {run.pk}: lease lost")
    status = Run.Status.CANCELLED if result.status == "cancelled" else Run.Status.SUCCEEDED
    if not services.finish_run(run.pk, owner, status):
        raise LeaseLost(f"run {run.pk}: lease lost")
    return status
