"""``/runs``: list, launch, one run, cancel, delete, relaunch, retry in a sweep, and its records
(steps, rounds, evaluations, prompt-steps and samples paged by cursor, the Parquet bundle)."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, HttpRequest
from experiments import bundles, services
from experiments import selectors as experiment_selectors
from ninja import Query, Router, Status
from webapp.throttles import LaunchThrottle

from api import selectors
from api.common import get_run, launch_body, launch_config, launch_doc, prompt_set_ref, user_of
from api.schemas import (
    EvalOut,
    LaunchBody,
    PageQuery,
    PromptStepPage,
    RoundOut,
    RunDetail,
    RunFilters,
    RunOut,
    SamplePage,
    SampleQuery,
    StepOut,
)

router = Router(tags=["runs"])


@router.get("", response=list[RunOut])
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> Any:
    """Runs, newest first, filtered."""
    qs = experiment_selectors.run_list(
        status=filters.status, algorithm=filters.algorithm, prompt_set_id=filters.prompt_set,
        search=filters.q, sweep_id=filters.sweep, owner=filters.owner)
    return qs[filters.offset:filters.offset + filters.limit]


@router.post("", response={201: RunDetail}, openapi_extra=launch_doc("LaunchBody"),
             throttle=LaunchThrottle())
def create_run(request: HttpRequest) -> Any:
    """Launch one run from a config (JSON body, or a TOML body; see the request body)."""
    body = launch_body(request, LaunchBody)
    prompt_set = prompt_set_ref(body.prompt_set, "prompt_set")
    run = services.launch_run(user_of(request), body.name, launch_config(body), prompt_set,
                              eval_set=prompt_set_ref(body.eval_set, "eval_set"), queue=body.queue,
                              retention=body.retention)
    return Status(201, run)


@router.get("/{int:run_id}", response=RunDetail)
def run_detail(request: HttpRequest, run_id: int) -> Any:
    return get_run(run_id)


@router.post("/{int:run_id}/cancel", response=RunDetail)
def cancel_run(request: HttpRequest, run_id: int) -> Any:
    """Cooperative: a queued run stops at once, a running one after its current round."""
    return services.request_cancel(get_run(run_id), user_of(request))


@router.delete("/{int:run_id}", response={204: None})
def delete_run(request: HttpRequest, run_id: int) -> Any:
    services.delete_run(get_run(run_id), user_of(request))
    return Status(204, None)


@router.post("/{int:run_id}/relaunch", response={201: RunDetail}, throttle=LaunchThrottle())
def relaunch_run(request: HttpRequest, run_id: int) -> Any:
    """A new run with the same settings, outside any sweep."""
    return Status(201, services.relaunch_run(get_run(run_id), user_of(request)))


@router.post("/{int:run_id}/retry", response={201: RunDetail}, throttle=LaunchThrottle())
def retry_run(request: HttpRequest, run_id: int) -> Any:
    """A failed or cancelled run of a sweep, run again in its place: a new run of the sweep
    with the same settings; the old one is ``replaced_by`` it and left out of the sweep's
    status, runs, compare and report."""
    return Status(201, services.retry_run(get_run(run_id), user_of(request)))


@router.get("/{int:run_id}/steps", response=list[StepOut])
def run_steps(request: HttpRequest, run_id: int) -> Any:
    """Every recorded step: columns and the full metrics (units: trainer.types.STEP_METRICS)."""
    return selectors.step_rows(get_run(run_id))


@router.get("/{int:run_id}/rounds", response=list[RoundOut])
def run_rounds(request: HttpRequest, run_id: int,
               step: int | None = Query(None, ge=0, le=2**31 - 1)) -> Any:
    """Round statistics: per step and sampling round, active prompts, samples, positives,
    prompts finished, tokens."""
    return selectors.round_rows(get_run(run_id), step)


@router.get("/{int:run_id}/evaluations", response=list[EvalOut])
def run_evaluations(request: HttpRequest, run_id: int) -> Any:
    """Held-out evaluations: greedy accuracy, avg@k, pass@k... per evaluated step."""
    return selectors.eval_rows(get_run(run_id))


@router.get("/{int:run_id}/prompt-steps", response=PromptStepPage)
def run_prompt_steps(request: HttpRequest, run_id: int, page: Query[PageQuery]) -> Any:
    """One row per prompt and step, in (step, prompt) order; pass ``next_cursor`` back as
    ``cursor`` for the next page (null: the last page)."""
    rows, cursor = selectors.prompt_step_page(get_run(run_id), cursor=page.cursor,
                                              limit=page.limit, step=page.step,
                                              prompt=page.prompt)
    return {"items": rows, "next_cursor": cursor}


@router.get("/{int:run_id}/samples", response=SamplePage)
def run_samples(request: HttpRequest, run_id: int, page: Query[SampleQuery]) -> Any:
    """Responses as the run's retention policy kept them (``response`` null when dropped), in
    (step, prompt, index) order, paged like prompt-steps."""
    rows, cursor = selectors.sample_page(get_run(run_id), cursor=page.cursor, limit=page.limit,
                                         step=page.step, prompt=page.prompt, kept=page.kept)
    return {"items": rows, "next_cursor": cursor}


@router.get("/{int:run_id}/export", openapi_extra={
    "responses": {200: {"description": "the run's Parquet bundle (zip)",
                        "content": {"application/zip": {"schema": {"type": "string",
                                                                   "format": "binary"}}}}}})
def export_run(request: HttpRequest, run_id: int) -> Any:
    """The run as a Parquet bundle: a zip of steps, rounds, prompt_steps, samples (as retained),
    evaluations, checkpoints and prompts as Parquet files, with config.json and manifest.json
    (docs/api.md). A run still training is exported as far as it got."""
    run = get_run(run_id)
    return FileResponse(bundles.bundle_file(run), as_attachment=True,
                        filename=bundles.bundle_filename(run), content_type="application/zip")


