"""Work handed to the workers. The one module of the services that talks to the broker: tasks
are sent by name through the web process's Celery client (``webapp.celery``), never by
importing ``workers/`` (that would pull the trainer and torch into the web process)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.functions import Now
from webapp import celery as broker
from webapp.celery import BrokerUnavailable

from experiments.models import Run

__all__ = ["BrokerUnavailable", "enqueue_estimate", "enqueue_on_commit", "enqueue_run"]

logger = logging.getLogger("experiments.services")


def enqueue_run(run_id: int, queue: str) -> None:
    """Send the run to ``queue`` now; ``BrokerUnavailable`` when the broker does not take it."""
    broker.enqueue_run(run_id, queue)


def enqueue_estimate(estimate_id: int, queue: str) -> None:
    """Send the launch preflight's sample to ``queue`` now; ``BrokerUnavailable`` likewise."""
    broker.enqueue_estimate(estimate_id, queue)


def enqueue_on_commit(run: Run) -> None:
    """Enqueue the run once its row is committed. A broker that is down does not undo the
    launch: the run stays queued, ``run.enqueue_error`` says why it is not on the queue yet, and
    the workers' sweep (``requeue_orphaned_runs``) enqueues it when the broker is back."""
    run_id, queue = run.pk, run.queue
    run.enqueue_error = ""

    def enqueue() -> None:
        try:
            enqueue_run(run_id, queue)
        except BrokerUnavailable as exc:
            logger.warning("run %s stays queued: the broker did not take it (%s)", run_id, exc)
            run.enqueue_error = str(exc)
        else:
            Run.objects.filter(pk=run_id).update(enqueued_at=Now())

    transaction.on_commit(enqueue)
