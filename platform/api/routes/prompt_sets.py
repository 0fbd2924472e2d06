"""``/prompt-sets``: list, upload, one set with its first prompts and its runs, delete."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from experiments import selectors as experiment_selectors
from experiments import services
from experiments.models import Prompt, PromptSet
from ninja import File, Form, Router, Status, UploadedFile
from ninja.errors import HttpError

from api.common import get_prompt_set, user_of
from api.schemas import PromptOut, PromptSetDetail, PromptSetOut, Text

router = Router(tags=["prompt sets"])


@router.get("", response=list[PromptSetOut])
def list_prompt_sets(request: HttpRequest) -> Any:
    return experiment_selectors.prompt_set_list()


@router.post("", response={201: PromptSetOut, 202: PromptSetOut})
def upload_prompt_set(request: HttpRequest, name: Form[Text],
                      file: File[UploadedFile] = None) -> Any:  # type: ignore[assignment]
    """Upload a JSONL or Parquet file of prompts (``prompt``, ``answer``; verl's layout too),
    as multipart form data with fields ``name`` and ``file``. 201: imported (``ready``). 202: a
    large file still importing: poll ``GET /prompt-sets/{id}`` until ``status`` is ``ready`` or
    ``failed`` (``import_error`` says why; nothing stored). A file refused while the request
    waited is a 400 naming the line or row and the limit."""
    if file is None:
        from webapp.uploads import rejected_files

        reason = rejected_files(request).get("file", "a JSONL or Parquet file is required")
        raise services.LaunchError("file", reason)
    ps = services.create_prompt_set_from_upload(user_of(request), name, file, file.name or "")
    return Status(201 if ps.status == PromptSet.Status.READY else 202, ps)


@router.get("/{int:set_id}", response=PromptSetDetail)
def prompt_set_detail(request: HttpRequest, set_id: int) -> Any:
    return get_prompt_set(set_id)


@router.get("/{int:set_id}/prompts/{int:index}", response=PromptOut)
def prompt_detail(request: HttpRequest, set_id: int, index: int) -> Any:
    """One prompt of the set, whole (``index`` from 0, as in the set's ``preview``)."""
    ps = get_prompt_set(set_id)
    try:
        return experiment_selectors.prompt_in_set(ps.pk, index)
    except Prompt.DoesNotExist:
        raise HttpError(404, f"no prompt {index} in prompt set {set_id}") from None


@router.delete("/{int:set_id}", response={204: None})
def delete_prompt_set(request: HttpRequest, set_id: int) -> Any:
    """Delete a set and its prompts: its owner or staff, once no run trains or evaluates on it
    (409 naming them otherwise)."""
    services.delete_prompt_set(get_prompt_set(set_id), user_of(request))
    return Status(204, None)
