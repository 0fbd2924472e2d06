"""Celery tasks. The web process enqueues them by name (``webapp.celery.EXECUTE_RUN_TASK``);
the trainer (torch) is imported inside the task only."""

from __future__ import annotations

from workers.celery_app import app


@app.task(name="workers.execute_run", acks_late=True, ignore_result=True)
def execute_run(run_id: int) -> str:
    """Execute run ``run_id`` to its end (or resume it) under a lease; see workers.execution."""
    from workers.execution import execute

    return execute(run_id)


@app.task(name="workers.estimate_pass_rates", acks_late=True, ignore_result=True)
def estimate_pass_rates(estimate_id: int) -> str:
    """Sample the pass rates of a launch preflight (``Estimate``); see workers.preflight."""
    from workers.preflight import execute_estimate

    return execute_estimate(estimate_id)
