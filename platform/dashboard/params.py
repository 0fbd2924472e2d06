"""One way to read parameters from query strings and form bodies.

Django's form fields do the parsing, so every view treats odd input alike: ``str.isdigit()``
accepts "²", which ``int()`` refuses; numbers may exceed the database's integer columns;
PostgreSQL refuses strings with NUL characters. A value that does not parse, or falls outside its
range, counts as absent: views never see a malformed number or string.

Except for what a page shows: a parameter that chooses the view itself (a chart's x axis or
metric, the heatmap's order or row range) is read with the ``require_*`` functions, and a value
that does not parse is a 400 naming the parameter and what it accepts (``BadParameter``), never
a silent default: a shared URL shows what its author saw, or says why it cannot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django import forms
from django.core.exceptions import BadRequest, ValidationError
from django.http import QueryDict

# Primary keys are PostgreSQL bigints.
MAX_ID = 2**63 - 1


def _clean(field: forms.Field, raw: Any) -> Any:
    try:
        return field.clean(raw)
    except ValidationError:
        return None


def get_int(params: QueryDict, key: str, default: int | None = None, *,
            min_value: int | None = None, max_value: int | None = None) -> int | None:
    """``params[key]`` as an int within [min_value, max_value], else ``default``."""
    value = _clean(forms.IntegerField(required=False, min_value=min_value,
                                      max_value=max_value), params.get(key))
    return default if value is None else value


def get_id(params: QueryDict, key: str) -> int | None:
    """A primary key, or None."""
    return parse_id(params.get(key))


def parse_id(raw: Any) -> int | None:
    return _clean(forms.IntegerField(required=False, min_value=1, max_value=MAX_ID), raw)


def get_ids(params: QueryDict, key: str) -> list[int]:
    """Primary keys from repeated and comma-separated values (``?runs=1,2&runs=3``), in order,
    without duplicates; values that are not ids are skipped."""
    ids = (parse_id(part.strip()) for raw in params.getlist(key) for part in raw.split(","))
    return list(dict.fromkeys(i for i in ids if i is not None))


def get_text(params: QueryDict, key: str, max_length: int = 200) -> str:
    """Free text (a search box): stripped, at most ``max_length`` characters, no NUL."""
    return _clean(forms.CharField(required=False, max_length=max_length),
                  params.get(key, "")) or ""


def get_choice(params: QueryDict | Mapping[str, Any], key: str, choices: Iterable[str]) -> str:
    """One of ``choices``, or "" (no choice)."""
    value = params.get(key, "")
    return value if value in set(choices) else ""


class BadParameter(BadRequest):
    """A view-choosing parameter that does not parse; the message names it (a 400 page shows it,
    ``webapp.views.bad_request``)."""


def require_choice(params: QueryDict, key: str, choices: Iterable[str], default: str) -> str:
    """One of ``choices`` (``default`` when the parameter is absent or empty); anything else is
    a ``BadParameter``."""
    value = params.get(key, "")
    options = list(choices)
    if value == "":
        return default
    if value not in options:
        raise BadParameter(f"{key}: {value[:40]!r} is not one of {', '.join(options)}")
    return value


def require_range(params: QueryDict, key: str) -> tuple[int, int] | None:
    """``FROM-TO`` (1-based, inclusive, FROM <= TO) or None when absent; else ``BadParameter``."""
    raw = params.get(key, "")
    if raw == "":
        return None
    lo, sep, hi = raw.partition("-")
    bounds = [_clean(forms.IntegerField(min_value=1, max_value=MAX_ID), v) for v in (lo, hi)]
    if not sep or None in bounds or bounds[0] > bounds[1]:
        raise BadParameter(f"{key}: {raw[:40]!r} is not FROM-TO with 1 <= FROM <= TO "
                           "(e.g. 1-64)")
    return bounds[0], bounds[1]
