"""Celery tasks. The web process enqueues them by name (``webapp.celery.EXECUTE_RUN_TASK``);
the trainer (torch) is imported inside the task only."""

from __future__ import annotations

from typing import Any

from workers.celery_app import app


@app.task(name="workers.execute_run", acks_late=True, ignore_result=True, bind=True)
def execute_run(self: Any, run_id: int) -> str:
    """Execute the run next in fair order on this message's queue (run ``run_id``, or another
    user's who waited longer) to its end, or resume it, under a lease; see workers.execution."""
    from workers.execution import execute

    queue = (self.request.delivery_info or {}).get("routing_key") or None
    return execute(run_id, queue)


@app.task(name="workers.estimate_pass_rates", acks_late=True, ignore_result=True)
def estimate_pass_rates(estimate_id: int) -> str:
    """Sample the pass rates of a launch preflight (``Estimate``); see workers.preflight."""
    from workers.preflight import execute_estimate

    return execute_estimate(estimate_id)
