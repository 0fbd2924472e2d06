"""Uploaded prompt files, imported off the request thread in bounded memory (issue 32).

The file is parsed by a child process that caps its own memory and CPU time
(``experiments/prompt_parser.py``); this side streams the rows it writes into PostgreSQL with
``COPY`` (never decoding them), in one transaction: a set's prompts appear all at once when its
status turns ``ready``, or not at all. The request waits ``PROMPT_UPLOAD_WAIT_SECONDS`` for the
import and answers with the outcome when it is done by then (an upload of a few thousand prompts
is); a longer one goes on in a thread of the web process, reporting rows read, how far through
the file and a heartbeat on the set's row, which the prompt set page polls. A file refused after
the request answered leaves the set ``failed`` with the reason (the line or row, the limit).

An upload made inside a transaction (a test's, a script's) is imported in the caller's thread
instead: another thread's connection could not see the set it belongs to.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.utils import timezone

from experiments.models import PromptSet
from experiments.prompt_parser import FRAME_HEADER
from experiments.services.common import LaunchError

log = logging.getLogger(__name__)
ROOT = Path(settings.BASE_DIR)
# The rows of a frame are at most a record's worth past FRAME_BYTES, escaped; anything larger
# is not the parser talking.
MAX_FRAME_BYTES = 64 * 2**20
# How often the importer writes its progress and heartbeat.
PROGRESS_SECONDS = 0.5


def parser_limits() -> dict[str, Any]:
    """What the child process is bounded by: ``trainer.data.Limits``' fields, its memory and
    its CPU time, from the settings."""
    return {"max_rows": settings.PROMPT_UPLOAD_MAX_ROWS,
            "max_uncompressed_bytes": settings.PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES,
            "max_record_bytes": settings.PROMPT_UPLOAD_MAX_RECORD_BYTES,
            "max_prompt_chars": settings.PROMPT_MAX_CHARS,
            "memory_bytes": settings.PROMPT_IMPORT_MAX_MEMORY_BYTES,
            "cpu_seconds": settings.PROMPT_IMPORT_MAX_CPU_SECONDS}


def parser_env() -> dict[str, str]:
    """The child's whole environment: no secret (it reads hostile input), one thread for Arrow
    and the system allocator (whose address space grows only with what is allocated, so the
    address-space cap measures the file's cost)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "platform"))),
            "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8",
            "ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2",
            "OMP_NUM_THREADS": "1"}


def spool(upload: IO[bytes], filename: str) -> Path:
    """A copy of the uploaded file the import owns (Django deletes its own when the request
    ends), with the upload's suffix (the parser picks the format by it)."""
    fd, name = tempfile.mkstemp(prefix="rada-upload-", suffix=Path(filename).suffix.lower()[:16])
    with os.fdopen(fd, "wb") as out:
        upload.seek(0)
        shutil.copyfileobj(upload, out, 2**20)
    return Path(name)


def start_import(prompt_set: PromptSet, path: Path, filename: str) -> PromptSet:
    """Import ``path`` into ``prompt_set`` (stored, ``importing``) and wait for it at most
    ``PROMPT_UPLOAD_WAIT_SECONDS``; the set as it then is. Inside a transaction the import runs
    here to its end and a refused file raises ``LaunchError("file", ...)``."""
    if connection.in_atomic_block:
        try:
            run_import(prompt_set.pk, path, filename)
        finally:
            path.unlink(missing_ok=True)
        prompt_set.refresh_from_db()
        return prompt_set
    worker = threading.Thread(target=_import_in_thread, args=(prompt_set.pk, path, filename),
                              name=f"prompt-import-{prompt_set.pk}", daemon=True)
    worker.start()
    worker.join(settings.PROMPT_UPLOAD_WAIT_SECONDS)
    prompt_set.refresh_from_db()
    return prompt_set


def _import_in_thread(set_id: int, path: Path, filename: str) -> None:
    try:
        run_import(set_id, path, filename, report=True)
    except LaunchError as exc:
        _fail(set_id, exc.reason)
    except Exception:
        log.exception("importing prompt set %s failed", set_id)
        _fail(set_id, "server error: the failure is logged for the operator")
    finally:
        path.unlink(missing_ok=True)
        connection.close()  # this thread's own connection


def _fail(set_id: int, reason: str) -> None:
    PromptSet.objects.filter(pk=set_id, status=PromptSet.Status.IMPORTING).update(
        status=PromptSet.Status.FAILED, import_error=reason, import_updated_at=timezone.now())


def run_import(set_id: int, path: Path, filename: str, report: bool = False) -> None:
    """Parse ``path`` in the bounded child and ``COPY`` its rows into the set, then mark it
    ready, in one transaction. A refused file (or a child that died) raises
    ``LaunchError("file", reason)`` and nothing is stored. ``report``: write progress and a
    heartbeat on the set's row as it goes (from a connection of its own: the import's
    transaction is invisible until it commits)."""
    limits = parser_limits()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.prompt_parser", str(path), filename,
             str(set_id), "--limits", json.dumps(limits)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, cwd=ROOT,
            env=parser_env(), start_new_session=True)
        assert proc.stdout is not None
        progress = _Progress(set_id) if report else None
        try:
            with transaction.atomic():
                result = _copy_frames(proc, progress, set_id)
                if "error" in result:
                    raise LaunchError("file", str(result["error"]))
                PromptSet.objects.filter(pk=set_id).update(
                    status=PromptSet.Status.READY, size=int(result["rows"]),
                    content_hash=str(result["digest"]), import_rows=int(result["rows"]),
                    import_fraction=1.0, import_error="", import_updated_at=timezone.now())
        except _ParserDied:
            proc.wait()
            errors.seek(0)
            raise LaunchError("file", _death(proc.returncode, errors.read().decode(
                errors="replace"), filename, limits)) from None
        except _ParserTimedOut:
            raise LaunchError("file", f"{filename}: parsing it took longer than "
                              f"{settings.PROMPT_IMPORT_MAX_SECONDS:,.0f} s, the limit "
                              "(PROMPT_IMPORT_MAX_SECONDS)") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            if progress is not None:
                progress.close()


class _ParserDied(Exception):
    pass


class _ParserTimedOut(Exception):
    pass


def _copy_frames(proc: subprocess.Popen[bytes], progress: _Progress | None,
                 prompt_set_id: int) -> dict[str, Any]:
    """Stream the child's rows into ``COPY``; its result frame (logged, with the child's
    peak memory)."""
    with connection.cursor() as cursor, cursor.copy(
            "COPY experiments_prompt (prompt_set_id, index, text, answer, metadata) "
            "FROM STDIN") as copy:
        for kind, payload in _frames(proc.stdout, progress):  # type: ignore[arg-type]
            if kind == b"D":
                copy.write(payload)
            elif kind == b"P" and progress is not None:
                progress.update(json.loads(payload))
            elif kind == b"R":
                result = json.loads(payload)
                log.info("prompt file parsed for set %s: %s; parser peak %s MiB", prompt_set_id,
                         result.get("error") or f"{result.get('rows')} prompts",
                         result.get("peak_rss_mib"))
                if "error" in result:
                    # Leaving the block with an exception aborts the COPY.
                    raise LaunchError("file", str(result["error"]))
                return dict(result)
    raise _ParserDied()


def _frames(stream: IO[bytes], progress: _Progress | None) -> Iterator[tuple[bytes, bytes]]:
    """The child's frames until it closes stdout; a heartbeat while it is quiet (a large
    batch decoding). A child quiet past PROMPT_IMPORT_MAX_SECONDS in all is given up on: the
    CPU limit cannot stop one that waits (a lock in a native library)."""
    fd = stream.fileno()
    deadline = time.monotonic() + settings.PROMPT_IMPORT_MAX_SECONDS
    while True:
        while not select.select([fd], [], [], PROGRESS_SECONDS)[0]:
            if progress is not None:
                progress.beat()
            if time.monotonic() > deadline:
                raise _ParserTimedOut()
        header = _read(stream, FRAME_HEADER.size)
        if header is None:
            return
        kind, length = FRAME_HEADER.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise _ParserDied()
        payload = _read(stream, length)
        if payload is None:
            raise _ParserDied()
        yield kind, payload


def _read(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def _death(code: int | None, stderr: str, filename: str, limits: dict[str, Any]) -> str:
    bounds = (f"its limits are {limits['memory_bytes'] / 2**20:,.0f} MiB of memory "
              f"(PROMPT_IMPORT_MAX_MEMORY_BYTES) and {limits['cpu_seconds']:,} s of CPU time "
              "(PROMPT_IMPORT_MAX_CPU_SECONDS)")
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{filename}: the process parsing it was stopped by {name}; {bounds}"
    last = stderr.strip().splitlines()[-1:] or ["no message"]
    log.error("prompt parser exited %s: %s", code, stderr[-4000:])
    return f"{filename}: the process parsing it failed ({last[0][:300]}); {bounds}"


class _Progress:
    """Rows read, how far through the file, and a heartbeat, written on the set's row at most
    every PROGRESS_SECONDS from a connection of its own (autocommit)."""

    def __init__(self, set_id: int) -> None:
        self.set_id = set_id
        self.rows = 0
        self.fraction: float | None = None
        self.written = 0.0
        self.db = connections.create_connection("default")

    def update(self, values: dict[str, Any]) -> None:
        self.rows = int(values.get("rows") or 0)
        fraction = values.get("fraction")
        self.fraction = min(max(float(fraction), 0.0), 1.0) if fraction is not None else None
        self.beat()

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.written < PROGRESS_SECONDS:
            return
        self.written = now
        with self.db.cursor() as cursor:
            cursor.execute(
                "UPDATE experiments_promptset SET import_rows = %s, import_fraction = %s, "
                "import_updated_at = now() WHERE id = %s AND status = %s",
                [self.rows, self.fraction, self.set_id, PromptSet.Status.IMPORTING])

    def close(self) -> None:
        self.db.close()


def stalled(prompt_set: PromptSet) -> bool:
    """An ``importing`` set whose importer gave no sign of life for PROMPT_IMPORT_STALE_SECONDS
    (the web worker running it died): it will never finish."""
    if prompt_set.status != PromptSet.Status.IMPORTING:
        return False
    last = prompt_set.import_updated_at or prompt_set.created_at
    return (timezone.now() - last).total_seconds() > settings.PROMPT_IMPORT_STALE_SECONDS
