"""Uploaded files are held to their view's limit while the request body streams in.

Django caps a request's non-file data (``DATA_UPLOAD_MAX_MEMORY_SIZE``) but streams files of any
size to memory or a temporary file before a view sees them. ``FileSizeLimitHandler`` runs first
among the upload handlers: a file posted to a view that does not accept files, or larger than the
limit its view declares with ``@accepts_files("SETTING")``, is skipped (the rest of it is read and
dropped, nothing is stored), and ``rejected_files(request)`` tells the view why, so its form can
show the limit and the size next to the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.http import HttpRequest

LIMIT_ATTRIBUTE = "upload_limit_setting"


def accepts_files(setting: str) -> Callable[[Any], Any]:
    """Mark a view as accepting files up to ``settings.<setting>`` bytes (read per request)."""
    def mark(view: Any) -> Any:
        setattr(view, LIMIT_ATTRIBUTE, setting)
        return view
    return mark


def rejected_files(request: HttpRequest) -> dict[str, str]:
    """Field name -> why its file was not accepted."""
    return getattr(request, "rejected_files", {})


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


class FileSizeLimitHandler(FileUploadHandler):
    def __init__(self, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self.body_length: int | None = None
        self.received = 0
        match = getattr(request, "resolver_match", None)
        self.setting = getattr(match.func, LIMIT_ATTRIBUTE, None) if match else None
        self.limit = int(getattr(settings, self.setting)) if self.setting else 0

    def handle_raw_input(self, input_data: Any, META: Any, content_length: int, boundary: Any,
                         encoding: str | None = None) -> None:
        self.body_length = content_length or None  # None: chunked, size unknown up front

    def _reject(self, reason: str) -> SkipFile:
        if self.request is not None:
            self.request.rejected_files = {**rejected_files(self.request),
                                           self.field_name: reason}
        return SkipFile(reason)

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, *args, **kwargs)
        self.received = 0
        if not self.setting:
            raise self._reject("this page accepts no files")
        # The body is the file plus a few form fields (capped by DATA_UPLOAD_MAX_MEMORY_SIZE):
        # a body past both limits holds a file past its own, rejected before a byte is stored.
        fields_cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
        if self.body_length and self.body_length > self.limit + fields_cap:
            raise self._reject(f"the upload is {_mib(self.body_length)}; the limit is "
                               f"{_mib(self.limit)} ({self.setting})")

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            raise self._reject(f"the file is larger than the limit of {_mib(self.limit)} "
                               f"({self.setting})")
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler (memory or temporary file) keeps the file
