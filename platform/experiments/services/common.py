"""What every service shares: the error a refused write raises, who may change a run, and
the check that values fit their columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import CharField
from django.http import Http404

from experiments.models import Run
from trainer import jsonsafe
from trainer.visible import visible_problem

User = AbstractBaseUser | AnonymousUser


class LaunchError(ValidationError):
    """A run that cannot be launched. Like the CLI's ``ConfigError`` it names the field
    (``.field``, ``.reason``: the first error), and as a ``ValidationError`` with an error dict
    a form can attach every error to its field (``form.add_error(None, exc)``). ``pairs`` holds
    every (field, reason), ``more`` the ones after the first."""

    def __init__(self, field: str, reason: str,
                 more: Sequence[tuple[str, str]] = ()) -> None:
        self.pairs = [(field, reason), *more]
        by_field: dict[str, list[str]] = {}
        for name, why in self.pairs:
            by_field.setdefault(name, []).append(why)
        super().__init__(by_field)
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class Conflict(LaunchError):
    """A change the object's present state refuses, typically because another request changed
    it first (two retries of one failed run, an upload of a name another upload just took, a
    prompt set a run now uses): the API answers 409, naming the field, with a sentence."""


class Gone(Http404):
    """The object the request names was deleted by another request while this one ran: a 404
    with a sentence (the dashboard's 404 page and the API both show it), never Django's
    "Run matching query does not exist." nor a database error."""


def gone(what: str, object_id: int | None) -> Gone:
    return Gone(f"no {what} with id {object_id}: it was deleted (by another request, or "
                "before this one)")


class LimitReached(LaunchError):
    """A launch past the user's share of the platform (``RUN_MAX_ACTIVE_PER_USER``): nothing
    is wrong with the run itself; it may be launched once some of the user's runs end. The API
    answers 429."""


def check_active_runs(owner: User, adding: int) -> None:
    """Refuse ``adding`` more runs when ``owner`` would then have more than
    ``RUN_MAX_ACTIVE_PER_USER`` queued or running. Call inside the transaction that stores
    them: the owner's row is locked, so two launches at once cannot both take the last
    place."""
    limit = settings.RUN_MAX_ACTIVE_PER_USER
    if not limit or owner.pk is None:
        return
    get_user_model().objects.select_for_update().filter(pk=owner.pk).exists()
    active = Run.objects.filter(owner_id=owner.pk, status__in=Run.ACTIVE_STATUSES).count()
    if active + adding > limit:
        what = "this run" if adding == 1 else f"these {adding:,} runs"
        raise LimitReached("runs", (
            f"you have {active:,} runs queued or running; {what} would make "
            f"{active + adding:,}, and a user may have at most {limit:,} "
            "(RUN_MAX_ACTIVE_PER_USER): wait for some to finish, or cancel some"))


def can_modify_run(run: Run, user: User) -> bool:
    """Only a run's owner or staff may cancel, delete or relaunch it."""
    return bool(user.is_authenticated and (user.is_staff or run.owner_id == user.pk))


def _check_can_modify(run: Run, user: User) -> None:
    if not can_modify_run(run, user):
        raise PermissionDenied("only the run's owner or staff may do this")


def _raise_all(errors: Sequence[tuple[str, str]]) -> None:
    if errors:
        raise LaunchError(*errors[0], more=errors[1:])


def check_fits_columns(obj: Any) -> None:
    """Every value of ``obj`` (an unsaved model instance) fits its column: a run name of 201
    characters or a number past the column's integer range is a ``LaunchError`` naming the
    field, not a database error. Foreign keys are left out (the caller passes objects)."""
    relations = {f.name for f in obj._meta.concrete_fields if f.is_relation}
    # Text and JSON the database cannot take (a lone surrogate psycopg cannot encode, NaN that
    # jsonb refuses, nesting past jsonsafe.MAX_DEPTH) whoever the writer (form, API, import).
    for f in obj._meta.concrete_fields:
        if f.name not in relations:
            problem = jsonsafe.first_problem(getattr(obj, f.attname), f.name)
            if problem:
                raise LaunchError(*problem)
    # A name or model shown in lists and links must read as what it is (trainer.visible: no
    # control characters, no bidirectional controls, no invisible characters, something
    # visible): one line of text, whichever field and whoever writes it.
    for f in obj._meta.concrete_fields:
        value = getattr(obj, f.attname)
        if isinstance(f, CharField) and f.name not in relations and isinstance(value, str):
            problem = visible_problem(value)
            if problem:
                raise LaunchError(f.name, problem)
    try:
        obj.clean_fields(exclude=relations)
    except ValidationError as exc:
        field, errors = next(iter(exc.message_dict.items()))
        raise LaunchError(field, " ".join(errors)) from exc


def derived_run_name(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` (" (relaunch)", " (clone)"), shortened to fit the column."""
    limit = Run._meta.get_field("name").max_length
    return name[:limit - len(suffix)].rstrip() + suffix


