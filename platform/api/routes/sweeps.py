"""``/sweeps``: list, launch a grid, one sweep, cancel all its runs."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from experiments import selectors as experiment_selectors
from experiments import services
from ninja import Query, Router, Status
from webapp.throttles import LaunchThrottle

from api.common import (
    get_sweep,
    launch_body,
    launch_config,
    launch_doc,
    prompt_set_ref,
    sweep_out,
    user_of,
)
from api.schemas import CancelOut, SweepBody, SweepLaunched, SweepOut

router = Router(tags=["sweeps"])


@router.get("", response=list[SweepOut])
def list_sweeps(request: HttpRequest, limit: int = Query(100, ge=1, le=1000)) -> Any:
    return [sweep_out(s) for s in experiment_selectors.sweep_list()[:limit]]


@router.post("", response={201: SweepLaunched}, openapi_extra=launch_doc("SweepBody"),
             throttle=LaunchThrottle())
def create_sweep(request: HttpRequest) -> Any:
    """Launch a grid of runs over one base config, whole or not at all."""
    body = launch_body(request, SweepBody)
    try:
        grid = services.parse_sweep_spec(body.grid) if isinstance(body.grid, str) else body.grid
        prompt_set = prompt_set_ref(body.prompt_set, "prompt_set")
        sweep = services.launch_sweep(user_of(request), body.name, launch_config(body), grid,
                                      prompt_set,
                                      eval_set=prompt_set_ref(body.eval_set, "eval_set"),
                                      queue=body.queue, retention=body.retention)
    except services.LaunchError as exc:
        # The services name the launch form's field ("sweep"); here the grid is "grid".
        if not any(field == "sweep" for field, _ in exc.pairs):
            raise
        pairs = [("grid" if field == "sweep" else field, reason) for field, reason in exc.pairs]
        raise services.LaunchError(*pairs[0], more=pairs[1:]) from None
    errors = [r.enqueue_error for r in sweep.launched_runs if r.enqueue_error]
    return Status(201, sweep_out(sweep, enqueue_errors=errors))


@router.get("/{int:sweep_id}", response=SweepOut)
def sweep_detail(request: HttpRequest, sweep_id: int) -> Any:
    return sweep_out(get_sweep(sweep_id))


@router.post("/{int:sweep_id}/cancel", response=CancelOut)
def cancel_sweep(request: HttpRequest, sweep_id: int) -> Any:
    """Cancel every unfinished run of the sweep; returns how many were asked to stop."""
    n = services.cancel_sweep(get_sweep(sweep_id), user_of(request))
    return {"cancelled": n}


