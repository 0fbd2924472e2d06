"""The REST API, version 1 (django-ninja): ``/api/v1/``, its OpenAPI schema at
``/api/v1/openapi.json`` and its docs page at ``/api/v1/docs``.

Thin, like the dashboard's views: writes go through ``experiments.services``, reads through the
selectors, and the same rules hold (anyone signed in reads; cancel, delete and relaunch are for a
run's owner or staff). A request authenticates with ``Authorization: Bearer <token>`` (tokens are
made on the account page) or, for the docs page's "Try it out", the browser's session.

Errors are JSON: ``{"detail": "...", "errors": [{"field": ..., "reason": ...}]}``; bad input is a
4xx naming the field, never a 5xx.
"""

from __future__ import annotations

import datetime as dt
import json
import tomllib
from typing import Annotated, Any, Literal

from dashboard import reports
from dashboard import selectors as dashboard_selectors
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.http import FileResponse, HttpRequest, HttpResponse
from experiments import bundles, services
from experiments import selectors as experiment_selectors
from experiments.models import PromptSet, Run, Sweep
from ninja import File, Form, NinjaAPI, Query, Router, Schema, Status, UploadedFile
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, django_auth
from pydantic import AfterValidator, Field
from pydantic import ValidationError as PydanticValidationError

from api import selectors
from api.services import user_for_token
from trainer.config import ConfigError

PAGE_MAX = 5000


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        return user_for_token(token)


api = NinjaAPI(
    title="Reinforce-Ada platform API", version="1", urls_namespace="api-v1",
    description="Runs, sweeps, prompt sets and their records. Authenticate with "
                "`Authorization: Bearer <token>`; create a token on your account page (/account/).",
    auth=[TokenAuth(), django_auth])


# --- errors -------------------------------------------------------------------------------------

def error_response(request: HttpRequest, status: int, pairs: list[tuple[str, str]],
                   detail: str | None = None) -> HttpResponse:
    errors = [{"field": f, "reason": r} for f, r in pairs]
    text = detail or "; ".join(f"{f}: {r}" for f, r in pairs)
    return api.create_response(request, {"detail": text, "errors": errors}, status=status)


@api.exception_handler(services.LaunchError)
def _launch_error(request: HttpRequest, exc: services.LaunchError) -> HttpResponse:
    return error_response(request, 400, exc.pairs)


@api.exception_handler(ConfigError)
def _config_error(request: HttpRequest, exc: ConfigError) -> HttpResponse:
    return error_response(request, 400, [(exc.field, exc.reason)])


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "forbidden"}, status=403)


@api.exception_handler(ObjectDoesNotExist)
def _not_found(request: HttpRequest, exc: ObjectDoesNotExist) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "not found"}, status=404)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return api.create_response(
        request, {"detail": "authentication needed: Authorization: Bearer <token> (create one "
                            "on /account/)"}, status=401)


def _loc_field(loc: Any) -> str:
    """A pydantic error location as a field name: ('query', 'limit') -> limit,
    ('body', 'config', 'seed') -> config.seed."""
    parts = [str(p) for p in loc if p not in ("query", "body", "path", "form", "file")]
    if parts and parts[0] == "payload":
        parts = parts[1:]
    # A union's errors carry the member tried ("int", "function-after[...]"): not a field.
    parts = [p for p in parts if p not in UNION_TAGS and "[" not in p]
    return ".".join(parts) or "body"


UNION_TAGS = {"int", "str", "float", "bool", "none", "list", "dict"}


def _pairs(errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(field, reason) per field: a union's members each fail, and the last tried (the text
    one, for "id or name") says most."""
    by_field: dict[str, str] = {}
    for e in errors:
        by_field[_loc_field(e.get("loc", ()))] = e.get("msg", "invalid")
    return list(by_field.items())


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return error_response(request, 422, _pairs(exc.errors))


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


# --- schemas ------------------------------------------------------------------------------------

def _no_nul(value: str) -> str:
    # PostgreSQL's text cannot hold NUL: refused here, with its field, not by the database.
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


class PromptSetOut(Schema):
    id: int
    name: str
    source: str
    description: str
    size: int
    owner: str | None
    created_at: dt.datetime

    @staticmethod
    def resolve_owner(obj: PromptSet) -> str | None:
        return obj.owner.username if obj.owner_id else None


class PromptOut(Schema):
    id: int
    index: int
    text: str
    answer: str
    metadata: dict[str, Any]


class PromptSetDetail(PromptSetOut):
    preview: list[PromptOut] = Field(description="the first 20 prompts")
    runs: list[int] = Field(description="runs that train or evaluate on the set")

    @staticmethod
    def resolve_preview(obj: PromptSet) -> list[Any]:
        return list(experiment_selectors.prompt_set_preview(obj))

    @staticmethod
    def resolve_runs(obj: PromptSet) -> list[int]:
        return [r.pk for r in experiment_selectors.prompt_set_runs(obj)]


class RunOut(Schema):
    id: int
    name: str
    algorithm: str
    status: str
    owner: str
    prompt_set: int = Field(validation_alias="prompt_set_id")
    eval_set: int | None = Field(None, validation_alias="eval_set_id")
    sweep: int | None = Field(None, validation_alias="sweep_id")
    cloned_from: int | None = Field(None, validation_alias="cloned_from_id")
    model: str
    seed: int
    queue: str
    retention: str
    total_steps: int
    current_step: int
    current_round: int
    samples_spent: int
    latest_real_reward: float | None
    cancel_requested: bool
    # What a running run waits for before it trains ("waiting for 8 GPUs on the Ray cluster
    # (4 free, 6 in all)"); empty otherwise.
    waiting_for: str
    error: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @staticmethod
    def resolve_owner(obj: Run) -> str:
        return obj.owner.username


class RunDetail(RunOut):
    config: dict[str, Any]


class SweepOut(Schema):
    id: int
    name: str
    owner: str
    grid: list[dict[str, Any]]
    base_config: dict[str, Any]
    created_at: dt.datetime
    status: str
    summary: str
    counts: dict[str, int]
    runs: list[int]


class SweepLaunched(SweepOut):
    enqueue_errors: list[str]


class StepOut(Schema):
    step: int
    real_reward: float | None = Field(description="mean over prompts of the mean reward of "
                                      "each prompt's first n samples (0-1; comparable to GRPO)")
    kept_reward: float | None = Field(description="mean reward of the kept responses (0-1)")
    samples: int = Field(description="responses generated this step")
    tokens: int = Field(description="response tokens generated this step")
    wall_seconds: float = Field(description="seconds of training up to this step")
    metrics: dict[str, Any] = Field(description="every metric the trainer recorded (names and "
                                    "units: trainer.types.STEP_METRICS); null where not finite")


class RoundOut(Schema):
    step: int
    round: int = Field(description="1-based sampling round")
    active_prompts: int = Field(description="prompts sampled in this round")
    samples: int = Field(description="responses drawn in this round")
    positives: int = Field(description="positive responses among them")
    finished: int = Field(description="prompts whose exit rule was met after this round")
    tokens: int = Field(description="response tokens generated in this round")


class EvalOut(Schema):
    step: int = Field(description="0: before training")
    metrics: dict[str, Any] = Field(description="greedy_accuracy, avg@k, pass@k... (fractions, "
                                    "0-1) and counts such as prompts and k")


class PromptStepOut(Schema):
    step: int
    prompt_id: int = Field(description="the prompt's id in the run's prompt set")
    samples: int
    positives: int
    negatives: int
    rounds: int = Field(description="rounds in which the prompt was sampled")
    exit_round: int | None = Field(description="round after which its exit rule was met; null: "
                                   "unresolved")
    missing: str = Field(description="unresolved for lack of 'positives' or 'negatives'")
    kept_positives: int
    kept_negatives: int
    baseline: float = Field(description="mean reward of the prompt's whole pool")
    tokens: int
    p_hat: float | None = Field(description="Est: pass-rate estimate before the step")
    allocated: int | None = Field(description="Est: samples allocated this step")


class SampleOut(Schema):
    step: int
    prompt_id: int
    index: int = Field(description="position in the prompt's pool this step (0-based)")
    round: int
    response: str | None = Field(description="null where the retention policy dropped it")
    tokens: int
    reward: float
    kept: bool = Field(description="kept for the policy update")
    advantage: float | None = Field(description="null when not kept")
    verifier_error: str


class PromptStepPage(Schema):
    items: list[PromptStepOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null: last")


class SamplePage(Schema):
    items: list[SampleOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null: last")


class Message(Schema):
    detail: str


class CancelOut(Schema):
    cancelled: int


class Me(Schema):
    id: int
    username: str
    is_staff: bool


class LaunchBody(Schema):
    """A launch. ``config`` holds TrainConfig fields (the keys of ``python -m trainer run``'s
    TOML); ``prompts``/``eval_prompts`` are set from the prompt sets and ignored here."""

    name: Text
    prompt_set: int | Text = Field(description="id or name")
    config: dict[str, Any] = Field(default_factory=dict)
    eval_set: int | Text | None = Field(None, description="id or name")
    queue: Text = "cpu"
    retention: Text = "all"


class SweepBody(LaunchBody):
    grid: str | list[Any] | dict[str, Any] = Field(
        description='"algorithm=grpo,ada-balance;seed=0..2", a list of {"field", "values"}, or '
                    "a mapping field -> values")


class RunFilters(Schema):
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | None = None
    algorithm: Text | None = Field(None, max_length=32)
    prompt_set: int | None = Field(None, ge=1, le=2**63 - 1)
    sweep: int | None = Field(None, ge=1, le=2**63 - 1)
    owner: Text | None = Field(None, max_length=150, description="username")
    q: Text | None = Field(None, max_length=200, description="text in the name or model")
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=10**9)


class PageQuery(Schema):
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(1000, ge=1, le=PAGE_MAX)
    step: int | None = Field(None, ge=0, le=2**31 - 1)
    prompt: int | None = Field(None, ge=0, le=2**63 - 1)


class SampleQuery(PageQuery):
    kept: bool | None = None


DbId = Annotated[int, Field(ge=1, le=2**63 - 1)]


class ReportQuery(Schema):
    sweep: list[DbId] = Field(default_factory=list, max_length=100)
    runs: list[DbId] = Field(default_factory=list, max_length=500)


# --- helpers ------------------------------------------------------------------------------------

MAX_ID = 2**63 - 1  # bigint: a larger id names nothing (and must not reach the database)


def _run(run_id: int) -> Run:
    if not 0 < run_id <= MAX_ID:
        raise HttpError(404, f"no run with id {run_id}")
    try:
        return dashboard_selectors.run_detail(run_id)
    except Run.DoesNotExist:
        raise HttpError(404, f"no run with id {run_id}") from None


def _sweep(sweep_id: int) -> Sweep:
    if not 0 < sweep_id <= MAX_ID:
        raise HttpError(404, f"no sweep with id {sweep_id}")
    try:
        return experiment_selectors.sweep_get(sweep_id)
    except Sweep.DoesNotExist:
        raise HttpError(404, f"no sweep with id {sweep_id}") from None


def _prompt_set(ref: int | str | None, field: str) -> PromptSet | None:
    if ref is None or ref == "":
        return None
    qs = PromptSet.objects.all()
    if isinstance(ref, int):
        found = qs.filter(pk=ref).first() if 0 < ref <= MAX_ID else None
    else:
        found = qs.filter(name=ref).first()
    if found is None and isinstance(ref, str) and ref.isdigit() and len(ref) < 19:
        found = qs.filter(pk=int(ref)).first()
    if found is None:
        raise services.LaunchError(field, f"no prompt set {ref!r} (give its id or name)")
    return found


def _launch_body(request: HttpRequest, schema: type[LaunchBody]) -> LaunchBody:
    """The launch in the body: JSON (``LaunchBody``), or TOML (``Content-Type:
    application/toml``): the config's keys as in ``python -m trainer run``'s file, the rest
    (name, prompt_set, eval_set, queue, retention, grid) as query parameters."""
    kind = (request.content_type or "").lower()
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        raise services.LaunchError("body", "not UTF-8 text") from None
    if kind in ("application/toml", "text/toml", "text/x-toml"):
        try:
            config = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise services.LaunchError("config", f"invalid TOML: {exc}") from None
        data: Any = {k: v for k, v in request.GET.items()}
        data["config"] = config
    else:
        try:
            data = json.loads(text or "null")
        except ValueError as exc:
            raise services.LaunchError("body", f"invalid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise services.LaunchError("body", "expected a JSON object")
    try:
        return schema.model_validate(data)
    except PydanticValidationError as exc:
        pairs = _pairs(exc.errors())
        raise services.LaunchError(*pairs[0], more=pairs[1:]) from None


def _config(body: LaunchBody) -> dict[str, Any]:
    # A prompt file named in a config is a path on the client's machine: on the platform the
    # prompts are the chosen prompt sets'.
    return {k: v for k, v in body.config.items() if k not in services.UNSWEEPABLE}


def _sweep_out(sweep: Sweep, **extra: Any) -> dict[str, Any]:
    status = experiment_selectors.sweep_statuses([sweep.pk])[sweep.pk]
    return {"id": sweep.pk, "name": sweep.name, "owner": sweep.owner.username,
            "grid": sweep.grid, "base_config": sweep.base_config, "created_at": sweep.created_at,
            "status": status.status, "summary": status.summary, "counts": status.counts,
            "runs": list(experiment_selectors.sweep_runs(sweep.pk).values_list("pk", flat=True)),
            **extra}


LAUNCH_DOC = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/{}"}},
    "application/toml": {"schema": {"type": "string", "description": (
        "The config as in `python -m trainer run --config FILE.toml`; name, prompt_set, "
        "eval_set, queue, retention (and grid for a sweep) as query parameters.")}}}}}


def _launch_doc(schema: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(LAUNCH_DOC))
    doc["requestBody"]["content"]["application/json"]["schema"]["$ref"] = (
        f"#/components/schemas/{schema}")
    return doc


# --- account ------------------------------------------------------------------------------------

@api.get("/me", response=Me, tags=["account"])
def me(request: HttpRequest) -> Any:
    """Who the token belongs to (the client's ``login`` checks a token with it)."""
    return _user(request)


# --- prompt sets --------------------------------------------------------------------------------

prompt_sets = Router(tags=["prompt sets"])


@prompt_sets.get("", response=list[PromptSetOut])
def list_prompt_sets(request: HttpRequest) -> Any:
    return experiment_selectors.prompt_set_list()


@prompt_sets.post("", response={201: PromptSetOut})
def upload_prompt_set(request: HttpRequest, name: Form[Text],
                      file: File[UploadedFile] = None) -> Any:  # type: ignore[assignment]
    """Upload a JSONL or Parquet file of prompts (``prompt``, ``answer``; verl's layout too),
    as multipart form data with fields ``name`` and ``file``."""
    if file is None:
        from webapp.uploads import rejected_files

        reason = rejected_files(request).get("file", "a JSONL or Parquet file is required")
        raise services.LaunchError("file", reason)
    ps = services.create_prompt_set_from_upload(_user(request), name, file, file.name or "")
    return Status(201, ps)


@prompt_sets.get("/{int:set_id}", response=PromptSetDetail)
def prompt_set_detail(request: HttpRequest, set_id: int) -> Any:
    ps = (PromptSet.objects.select_related("owner").filter(pk=set_id).first()
          if 0 < set_id <= MAX_ID else None)
    if ps is None:
        raise HttpError(404, f"no prompt set with id {set_id}")
    return ps


# --- runs ---------------------------------------------------------------------------------------

runs = Router(tags=["runs"])


@runs.get("", response=list[RunOut])
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> Any:
    """Runs, newest first, filtered."""
    qs = dashboard_selectors.run_list(dashboard_selectors.RunFilters(
        status=filters.status or "", algorithm=filters.algorithm or "",
        prompt_set=str(filters.prompt_set or ""), q=filters.q or "",
        sweep=str(filters.sweep or "")))
    if filters.owner:
        qs = qs.filter(owner__username=filters.owner)
    return qs[filters.offset:filters.offset + filters.limit]


@runs.post("", response={201: RunDetail}, openapi_extra=_launch_doc("LaunchBody"))
def create_run(request: HttpRequest) -> Any:
    """Launch one run from a config (JSON body, or a TOML body; see the request body)."""
    body = _launch_body(request, LaunchBody)
    prompt_set = _prompt_set(body.prompt_set, "prompt_set")
    run = services.launch_run(_user(request), body.name, _config(body), prompt_set,
                              eval_set=_prompt_set(body.eval_set, "eval_set"), queue=body.queue,
                              retention=body.retention)
    return Status(201, run)


@runs.get("/{int:run_id}", response=RunDetail)
def run_detail(request: HttpRequest, run_id: int) -> Any:
    return _run(run_id)


@runs.post("/{int:run_id}/cancel", response=RunDetail)
def cancel_run(request: HttpRequest, run_id: int) -> Any:
    """Cooperative: a queued run stops at once, a running one after its current round."""
    return services.request_cancel(_run(run_id), _user(request))


@runs.delete("/{int:run_id}", response={204: None})
def delete_run(request: HttpRequest, run_id: int) -> Any:
    services.delete_run(_run(run_id), _user(request))
    return Status(204, None)


@runs.post("/{int:run_id}/relaunch", response={201: RunDetail})
def relaunch_run(request: HttpRequest, run_id: int) -> Any:
    return Status(201, services.relaunch_run(_run(run_id), _user(request)))


@runs.get("/{int:run_id}/steps", response=list[StepOut])
def run_steps(request: HttpRequest, run_id: int) -> Any:
    """Every recorded step: columns and the full metrics (units: trainer.types.STEP_METRICS)."""
    return selectors.step_rows(_run(run_id))


@runs.get("/{int:run_id}/rounds", response=list[RoundOut])
def run_rounds(request: HttpRequest, run_id: int,
               step: int | None = Query(None, ge=0, le=2**31 - 1)) -> Any:
    """Round statistics: per step and sampling round, active prompts, samples, positives,
    prompts finished, tokens."""
    return selectors.round_rows(_run(run_id), step)


@runs.get("/{int:run_id}/evaluations", response=list[EvalOut])
def run_evaluations(request: HttpRequest, run_id: int) -> Any:
    """Held-out evaluations: greedy accuracy, avg@k, pass@k... per evaluated step."""
    return selectors.eval_rows(_run(run_id))


@runs.get("/{int:run_id}/prompt-steps", response=PromptStepPage)
def run_prompt_steps(request: HttpRequest, run_id: int, page: Query[PageQuery]) -> Any:
    """One row per prompt and step, in (step, prompt) order; pass ``next_cursor`` back as
    ``cursor`` for the next page (null: the last page)."""
    rows, cursor = selectors.prompt_step_page(_run(run_id), cursor=page.cursor,
                                              limit=page.limit, step=page.step,
                                              prompt=page.prompt)
    return {"items": rows, "next_cursor": cursor}


@runs.get("/{int:run_id}/samples", response=SamplePage)
def run_samples(request: HttpRequest, run_id: int, page: Query[SampleQuery]) -> Any:
    """Responses as the run's retention policy kept them (``response`` null when dropped), in
    (step, prompt, index) order, paged like prompt-steps."""
    rows, cursor = selectors.sample_page(_run(run_id), cursor=page.cursor, limit=page.limit,
                                         step=page.step, prompt=page.prompt, kept=page.kept)
    return {"items": rows, "next_cursor": cursor}


@runs.get("/{int:run_id}/export", openapi_extra={
    "responses": {200: {"description": "the run's Parquet bundle (zip)",
                        "content": {"application/zip": {"schema": {"type": "string",
                                                                   "format": "binary"}}}}}})
def export_run(request: HttpRequest, run_id: int) -> Any:
    """The run as a Parquet bundle: a zip of steps, rounds, prompt_steps, samples (as retained),
    evaluations, checkpoints and prompts as Parquet files, with config.json and manifest.json
    (docs/api.md). A run still training is exported as far as it got."""
    run = _run(run_id)
    return FileResponse(bundles.bundle_file(run), as_attachment=True,
                        filename=bundles.bundle_filename(run), content_type="application/zip")


# --- sweeps -------------------------------------------------------------------------------------

sweeps = Router(tags=["sweeps"])


@sweeps.get("", response=list[SweepOut])
def list_sweeps(request: HttpRequest, limit: int = Query(100, ge=1, le=1000)) -> Any:
    return [_sweep_out(s) for s in experiment_selectors.sweep_list()[:limit]]


@sweeps.post("", response={201: SweepLaunched}, openapi_extra=_launch_doc("SweepBody"))
def create_sweep(request: HttpRequest) -> Any:
    """Launch a grid of runs over one base config, whole or not at all."""
    body = _launch_body(request, SweepBody)
    grid = services.parse_sweep_spec(body.grid) if isinstance(body.grid, str) else body.grid
    prompt_set = _prompt_set(body.prompt_set, "prompt_set")
    sweep = services.launch_sweep(_user(request), body.name, _config(body), grid, prompt_set,
                                  eval_set=_prompt_set(body.eval_set, "eval_set"),
                                  queue=body.queue, retention=body.retention)
    errors = [r.enqueue_error for r in sweep.launched_runs if r.enqueue_error]
    return Status(201, _sweep_out(sweep, enqueue_errors=errors))


@sweeps.get("/{int:sweep_id}", response=SweepOut)
def sweep_detail(request: HttpRequest, sweep_id: int) -> Any:
    return _sweep_out(_sweep(sweep_id))


@sweeps.post("/{int:sweep_id}/cancel", response=CancelOut)
def cancel_sweep(request: HttpRequest, sweep_id: int) -> Any:
    """Cancel every unfinished run of the sweep; returns how many were asked to stop."""
    n = services.cancel_sweep(_sweep(sweep_id), _user(request))
    return {"cancelled": n}


# --- reports ------------------------------------------------------------------------------------

@api.get("/report", response=dict[str, Any], tags=["reports"])
def report(request: HttpRequest, query: Query[ReportQuery]) -> Any:
    """A report's data (the report page's figures and tables as tidy rows): the runs of each
    ``sweep`` and the ``runs`` named, grouped by algorithm with seeds as replicates."""
    ids = list(query.runs)
    for sweep_id in query.sweep:
        ids.extend(experiment_selectors.sweep_runs(sweep_id).values_list("pk", flat=True))
    chosen = dashboard_selectors.runs_by_ids(list(dict.fromkeys(ids)))
    if not chosen:
        raise services.LaunchError("runs", "no runs: name a sweep or runs that exist")
    return reports.cached_report(chosen)


api.add_router("/prompt-sets", prompt_sets)
api.add_router("/runs", runs)
api.add_router("/sweeps", sweeps)


def urls() -> Any:
    """The API's URL patterns; the upload operation accepts files up to the prompt-set limit
    (``webapp.uploads``: every other path refuses files while the body streams in)."""
    from webapp.uploads import accepts_files

    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if str(pattern.pattern) == "prompt-sets":
            accepts_files("PROMPT_UPLOAD_MAX_BYTES")(pattern.callback)
    return patterns, app_name, namespace
