"""What every service shares: the error a refused write raises, who may change a run, and
the check that values fit their columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError

from experiments.models import Run
from trainer import jsonsafe

User = AbstractBaseUser | AnonymousUser
# Unicode's bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069).
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


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
    # A name shown in lists and links must read as what it is: a bidirectional override
    # ("invoice\u202egnp.exe" displays as "invoiceexe.png") is refused.
    name = getattr(obj, "name", None)
    if isinstance(name, str):
        found = next((c for c in name if c in BIDI_CONTROLS), None)
        if found:
            raise LaunchError("name", f"contains the bidirectional control U+{ord(found):04X}, "
                              "which makes a name display otherwise than it is written")
    try:
        obj.clean_fields(exclude=relations)
    except ValidationError as exc:
        field, errors = next(iter(exc.message_dict.items()))
        raise LaunchError(field, " ".join(errors)) from exc


def derived_run_name(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` (" (relaunch)", " (clone)"), shortened to fit the column."""
    limit = Run._meta.get_field("name").max_length
    return name[:limit - len(suffix)].rstrip() + suffix


