"""Prompt sets: imported from files or generated from the built-in task, streamed with
``COPY``, stored whole or not at all; deleted when no run uses them."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction

from experiments import names, selectors
from experiments.models import PromptSet
from experiments.prompt_parser import row_problem
from experiments.services.common import Conflict, LaunchError, User, check_fits_columns, gone
from trainer import jsonsafe
from trainer.digest import PromptDigest
from trainer.visible import visible_problem


def _look_alike(name: str, key: str) -> str:
    # A failed or stalled import's set gives its name up (_free_name deletes it).
    twin = selectors.prompt_sets_holding_names().select_related("owner").filter(
        name_key=key).first()
    if twin is None:
        return ""
    owner = twin.owner.username if twin.owner_id else "the platform"
    same = "is the name of" if twin.name == name else "looks like the name of"
    return (f"{same} the prompt set “{twin.name}” (id {twin.pk}, {owner}'s): choose a name "
            "that reads differently")


def prompt_set_name_error(name: str, *, platform: bool = False) -> str:
    """Why ``name`` cannot name a new prompt set ("" when it can): the visible-text rule, a
    name that looks like a stored set's (``experiments.names``: normalised, invisible
    characters dropped, confusable characters mapped), or "(built-in)" in any spelling unless
    ``platform`` (the platform's own sets: ``manage.py demo``, bundles it imports)."""
    name = name.strip()
    if not name:
        return "a prompt set needs a name"
    problem = visible_problem(name)
    if problem:
        return problem
    if not platform and names.reserved_name(name):
        return (f"“{names.RESERVED_WORDS}” is reserved for the platform's own prompt sets: "
                "choose a name without it")
    return _look_alike(name, names.name_key(name))


def import_prompt_set(*, owner: User | None, name: str, prompts: Iterable[Any],
                      source: str = PromptSet.Source.UPLOAD, description: str = "",
                      platform: bool = False) -> PromptSet:
    """Store ``prompts`` (``trainer.types.Prompt``-like: text, answer, metadata) as a new prompt
    set, whole or not at all: one transaction, rows streamed with ``COPY`` as the iterable yields
    them (never held in memory whole); an error the iterable raises midway rolls back
    everything. The name must read unlike every stored set's (``prompt_set_name_error``;
    ``platform``: the platform's own set, which may say "built-in"). A prompt past
    ``PROMPT_MAX_CHARS`` is refused with its number."""
    max_chars = settings.PROMPT_MAX_CHARS
    with transaction.atomic():
        prompt_set = _new_prompt_set(owner=owner, name=name, source=source,
                                     description=description, platform=platform)
        size = 0
        digest = PromptDigest()
        with connection.cursor() as cursor, cursor.copy(
                "COPY experiments_prompt (prompt_set_id, index, text, answer, metadata) "
                "FROM STDIN") as copy:
            for i, p in enumerate(prompts):
                # PostgreSQL's text and jsonb cannot hold NUL, a lone surrogate or NaN: refused
                # with the prompt's number, before the database would refuse the whole COPY
                # (trainer.data already names the file's line for an upload).
                problem = jsonsafe.first_problem(
                    {"text": p.text, "answer": p.answer, "metadata": dict(p.metadata or {})})
                if problem:
                    raise LaunchError("file", f"prompt {i + 1}: {problem[0]} {problem[1]}")
                if len(p.text) > max_chars:
                    raise LaunchError("file", f"prompt {i + 1} is {len(p.text):,} characters; "
                                      f"the limit is {max_chars:,} (PROMPT_MAX_CHARS)")
                metadata = json.dumps(dict(p.metadata or {}))
                if row_problem(p.text, p.answer, metadata):
                    raise LaunchError("file", f"prompt {i + 1} contains a NUL character")
                copy.write_row((prompt_set.pk, i, p.text, p.answer, metadata))
                digest.add(p.text, p.answer)
                size = i + 1
        if not size:
            raise LaunchError("file", "no prompts")
        prompt_set.size = size
        prompt_set.content_hash = digest.hexdigest()
        prompt_set.save(update_fields=["size", "content_hash"])
    return prompt_set


def _new_prompt_set(*, owner: User | None, name: str, source: str, description: str,
                    platform: bool = False, status: str = PromptSet.Status.READY) -> PromptSet:
    """A new set's row, its name checked (``prompt_set_name_error``) and taken. A set whose
    import failed or stalled gives its name up to it."""
    name = name.strip()
    key = names.name_key(name)
    _free_name(key)
    problem = prompt_set_name_error(name, platform=platform)
    if problem:
        # A name another set has (or looks like) conflicts with what is stored: 409.
        raise (Conflict if _look_alike(name, key) == problem else LaunchError)("name", problem)
    prompt_set = PromptSet(name=name, name_key=key, source=source, description=description,
                           status=status,
                           owner=owner if owner is not None and owner.is_authenticated else None)
    check_fits_columns(prompt_set)
    try:
        with transaction.atomic():
            prompt_set.save()
    except IntegrityError:
        # Another request stored a set of this name (or a look-alike) since the check.
        raise Conflict("name", _look_alike(name, key)
                       or "a prompt set of this name was stored meanwhile") from None
    return prompt_set


def _free_name(key: str) -> None:
    """Delete the sets holding the name ``key`` whose import failed or stalled
    (``prompt_import.stalled``): they have no prompts and no runs."""
    from experiments.services.prompt_import import stalled

    for ps in PromptSet.objects.filter(name_key=key).exclude(status=PromptSet.Status.READY):
        if ps.status == PromptSet.Status.FAILED or stalled(ps):
            PromptSet.objects.filter(pk=ps.pk, status=ps.status).delete()


def find_or_import_prompt_set(prompts: Sequence[Any], *, name: str, source: str,
                              description: str = "", owner: User | None = None,
                              prefer: str = "", platform: bool = False
                              ) -> tuple[PromptSet, bool]:
    """(a stored set holding exactly ``prompts`` in order, False), found by content hash
    (``trainer.digest``) whatever its name, so that runs on the same prompts share one set and
    compare prompt by prompt (among several, the one named ``prefer``, else the oldest); else
    (``prompts`` imported as a new set named ``name``, True), the name suffixed with " (2)",
    " (3)"... where another set has it."""
    digest = PromptDigest.of(prompts)
    same = list(PromptSet.objects.filter(content_hash=digest, size=len(prompts),
                                         status=PromptSet.Status.READY).order_by("pk"))
    if same:
        return next((ps for ps in same if ps.name == prefer), same[0]), False
    limit = PromptSet._meta.get_field("name").max_length
    base, unique, n = name[:limit].strip(), name[:limit].strip(), 1
    while PromptSet.objects.filter(name_key=names.name_key(unique)).exists():
        n += 1
        suffix = f" ({n})"
        unique = base[:limit - len(suffix)] + suffix
    return import_prompt_set(owner=owner, name=unique, prompts=prompts, source=source,
                             description=description, platform=platform), True


def create_prompt_set_from_upload(owner: User, name: str, upload: IO[bytes],
                                  filename: str) -> PromptSet:
    """Import an uploaded JSONL/Parquet file with the trainer's loader (the CLI's rules), parsed
    in a child process bounded in memory and CPU time and streamed into the database
    (``experiments.services.prompt_import``). Returns the set once imported (``ready``), or, when
    the import outlasts ``PROMPT_UPLOAD_WAIT_SECONDS``, while it goes on (``importing``: its page
    shows the progress, then the prompts or why the file was refused). A name that is taken, a
    file past the size limit or of an unknown type, and a file refused within the wait raise
    ``LaunchError`` naming the field, the line or row, the limit; nothing is stored."""
    from experiments.services import prompt_import
    from trainer.data import SUFFIXES

    problem = visible_problem(filename)
    if problem:  # the set's description names the file
        raise LaunchError("file", f"the file's name {problem}")
    limit = settings.PROMPT_UPLOAD_MAX_BYTES
    size = upload.seek(0, io.SEEK_END)
    upload.seek(0)
    if size > limit:
        raise LaunchError("file", f"the file is {size / 2**20:.1f} MiB; the limit is "
                          f"{limit / 2**20:.1f} MiB (PROMPT_UPLOAD_MAX_BYTES)")
    suffix = Path(filename).suffix.lower()
    if suffix not in SUFFIXES:
        raise LaunchError("file", f"{filename}: unknown file type {suffix!r}; use .jsonl or "
                          ".parquet (compressed files are not accepted)")
    fields = {"owner": owner, "name": name, "source": PromptSet.Source.UPLOAD,
              "description": f"uploaded {filename}", "status": PromptSet.Status.IMPORTING}
    if connection.in_atomic_block:
        # Imported here, in a savepoint with the set's row: a refused file leaves nothing.
        with transaction.atomic():
            prompt_set = _new_prompt_set(**fields)
            return prompt_import.start_import(prompt_set, prompt_import.spool(upload, filename),
                                              filename)
    prompt_set = _new_prompt_set(**fields)  # committed: the importing thread reads it
    try:
        path = prompt_import.spool(upload, filename)
    except BaseException:
        prompt_set.delete()
        raise
    prompt_set = prompt_import.start_import(prompt_set, path, filename)
    if prompt_set.status == PromptSet.Status.FAILED:
        # Refused while the request waited: answered as if nothing had been stored.
        PromptSet.objects.filter(pk=prompt_set.pk, status=PromptSet.Status.FAILED).delete()
        raise LaunchError("file", prompt_set.import_error)
    return prompt_set


def create_builtin_prompt_set(owner: User | None, name: str, n: int | None = None,
                              min_digits: int = 1, max_digits: int = 3, seed: int = 0, *,
                              num_prompts: int | None = None,
                              task: str = "arithmetic") -> PromptSet:
    """Generate the built-in arithmetic task (``a+b=``, answer digits reversed) or, with
    ``task="arithmetic-long"``, its long-answer variant (2-8 operands, every running sum).
    ``num_prompts`` is an alias of ``n`` (the launch form's field name)."""
    from trainer.tasks import LONG_MAX_DIGITS, arithmetic_long_prompts, arithmetic_prompts

    n = n if n is not None else num_prompts
    if n is None:
        raise LaunchError("num_prompts", "how many prompts?")

    if not 1 <= n <= 1_000_000:
        raise LaunchError("n", "must be within [1, 1,000,000]")
    if task not in ("arithmetic", "arithmetic-long"):
        raise LaunchError("task", f"must be arithmetic or arithmetic-long, got {task!r}")
    most = 9 if task == "arithmetic" else LONG_MAX_DIGITS
    if not 1 <= min_digits <= max_digits <= most:
        raise LaunchError("max_digits", f"need 1 <= min_digits <= max_digits <= {most}")
    make = arithmetic_prompts if task == "arithmetic" else arithmetic_long_prompts
    try:
        prompts = make(n, min_digits, max_digits, seed=seed)
    except ValueError as exc:  # more distinct prompts than the digits allow
        raise LaunchError("num_prompts", str(exc)) from exc
    return import_prompt_set(
        owner=owner, name=name, prompts=prompts, source=PromptSet.Source.BUILTIN,
        description=f"built-in {task}: {n} prompts, {min_digits}-{max_digits} digits, "
                    f"seed {seed}")


def delete_prompt_set(prompt_set: PromptSet, user: User) -> None:
    """Delete a prompt set and its prompts (raw SQL: Django's cascade would load a million
    prompts to delete them one by one). Only its owner or staff may; refused while a run trains
    or evaluates on it (its records point at the set's prompts): delete those runs first."""
    from experiments.services.prompt_import import stalled

    if not (user.is_authenticated and (user.is_staff or prompt_set.owner_id == user.pk)):
        raise PermissionDenied("only the prompt set's owner or staff may do this")
    if prompt_set.status == PromptSet.Status.IMPORTING and not stalled(prompt_set):
        raise Conflict("prompt_set", "still importing; delete it once the import ends")
    with transaction.atomic():
        # Locked first: a launch on the set takes the same lock (launch.lock_referenced), so
        # either its run is committed and seen here, or this delete commits first and the
        # launch is a 404.
        if not PromptSet.objects.select_for_update().filter(pk=prompt_set.pk).exists():
            raise gone("prompt set", prompt_set.pk)
        users = selectors.prompt_set_runs(prompt_set)
        if users:
            raise Conflict("prompt_set", f"used by {len(users)} run(s) ("
                           f"{', '.join(r.name for r in users[:3])}); delete them first")
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM experiments_prompt WHERE prompt_set_id = %s",
                           [prompt_set.pk])
        PromptSet.objects.filter(pk=prompt_set.pk).delete()

