"""What the API's routes share: the signed-in user, a run, sweep or prompt set named in the
path or body (a 404 or a ``LaunchError`` naming the field), the launch body (JSON or TOML)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from typing import Any, TypeVar

from django.http import HttpRequest
from experiments import selectors as experiment_selectors
from experiments import services
from experiments.models import PromptSet, Run, Sweep
from ninja.errors import HttpError
from pydantic import ValidationError as PydanticValidationError

from api.errors import error_pairs
from api.schemas import LaunchBody
from trainer import jsonsafe


def user_of(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


MAX_ID = 2**63 - 1  # bigint: a larger id names nothing (and must not reach the database)

T = TypeVar("T")


def _by_id(what: str, object_id: int, fetch: Callable[[int], T],
           missing: type[Exception]) -> T:
    """``fetch(object_id)``, or a 404 naming ``what`` when it raises ``missing``."""
    if not 0 < object_id <= MAX_ID:
        raise HttpError(404, f"no {what} with id {object_id}")
    try:
        return fetch(object_id)
    except missing:
        raise HttpError(404, f"no {what} with id {object_id}") from None


def get_run(run_id: int) -> Run:
    return _by_id("run", run_id, experiment_selectors.run_detail, Run.DoesNotExist)


def get_sweep(sweep_id: int) -> Sweep:
    return _by_id("sweep", sweep_id, experiment_selectors.sweep_get, Sweep.DoesNotExist)


def get_prompt_set(set_id: int) -> PromptSet:
    return _by_id("prompt set", set_id,
                  lambda pk: PromptSet.objects.select_related("owner").get(pk=pk),
                  PromptSet.DoesNotExist)


def prompt_set_ref(ref: int | str | None, field: str) -> PromptSet | None:
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


def launch_body(request: HttpRequest, schema: type[LaunchBody]) -> LaunchBody:
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
        except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4,300 digits
            raise services.LaunchError("config", f"invalid TOML: {exc}") from None
        except RecursionError:
            raise services.LaunchError("config", "invalid TOML: nested too deeply") from None
        data: Any = {k: v for k, v in request.GET.items()}
        data["config"] = config
    else:
        try:
            data = jsonsafe.loads(text or "null")
        except ValueError as exc:
            raise services.LaunchError("body", f"invalid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise services.LaunchError("body", "expected a JSON object")
    # Text that is not Unicode (a lone surrogate: JSON's "\ud800") and nesting deeper than any
    # config needs, named by their place (config.model, grid[0].values[1]); numbers are the
    # config's own check (it names NaN in a float field).
    problem = jsonsafe.first_problem(data, numbers=False)
    if problem:
        raise services.LaunchError(*problem)
    # A misspelt key ("retension") must not launch with the default in its place.
    known = list(schema.model_fields)
    unknown = [(str(k), f"unknown field; a launch takes {', '.join(known)}")
               for k in data if k not in known]
    try:
        body = schema.model_validate(data)
    except PydanticValidationError as exc:
        pairs = error_pairs(exc.errors()) + unknown
        raise services.LaunchError(*pairs[0], more=pairs[1:]) from None
    if unknown:
        raise services.LaunchError(*unknown[0], more=unknown[1:])
    return body


def launch_config(body: LaunchBody) -> dict[str, Any]:
    # A prompt file named in a config is a path on the client's machine: on the platform the
    # prompts are the chosen prompt sets'.
    return {k: v for k, v in body.config.items() if k not in services.UNSWEEPABLE}


def sweep_out(sweep: Sweep, **extra: Any) -> dict[str, Any]:
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


def launch_doc(schema: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(LAUNCH_DOC))
    doc["requestBody"]["content"]["application/json"]["schema"]["$ref"] = (
        f"#/components/schemas/{schema}")
    return doc

