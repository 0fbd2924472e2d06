"""One way to read parameters from query strings and form bodies.

Django's form fields do the parsing, so every view treats odd input alike: ``str.isdigit()``
accepts "²", which ``int()`` refuses; numbers may exceed the database's integer columns;
PostgreSQL refuses strings with NUL characters. A value that does not parse, or falls outside its
range, counts as absent: views never see a malformed number or string.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
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
