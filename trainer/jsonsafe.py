"""Values that every store downstream accepts: text that encodes as UTF-8, finite numbers, and
nesting a reader can walk without running out of stack.

Python's ``json`` reads ``"\\ud800"`` (a lone surrogate: not Unicode text, so psycopg cannot
encode it), ``NaN``, ``Infinity`` and ``1e999`` (PostgreSQL's jsonb refuses them), and arrays
nested until the parser itself raises ``RecursionError``. A prompt file, a launch body or a
stored config is checked here once, where it enters, so a bad value is refused naming its
place instead of failing deep inside a database write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

# Deeper than any config, grid or prompt metadata needs, and far below Python's recursion limit
# (json.dumps and Django's JSON encoder recurse once per level).
MAX_DEPTH = 32


class NestingError(ValueError):
    """JSON nested deeper than its parser can go."""


def loads(text: str) -> Any:
    """``json.loads``, with nesting too deep for the parser as a ``NestingError`` (a
    ``ValueError``, like every other malformed document) instead of a ``RecursionError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NestingError(f"nested too deeply (more than {MAX_DEPTH} levels are refused)"
                           ) from None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as text (None: it can): a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"contains {text[exc.start]!r} at character {exc.start + 1}, a lone surrogate "
                "(not valid Unicode text)")
    return None


def number_problem(value: float) -> str | None:
    """Why ``value`` cannot be stored as a JSON number (None: it can)."""
    if not math.isfinite(value):
        return f"is {value}, not a finite number (JSON and the database hold finite numbers only)"
    return None


def value_problems(value: Any, path: str = "", max_depth: int = MAX_DEPTH,
                   numbers: bool = True) -> Iterator[tuple[str, str]]:
    """(path, reason) for each string (keys too) that is not valid text, each float that is not
    finite (unless ``numbers`` is False), and each container nested deeper than ``max_depth``,
    in ``value``; ``path`` joins
    keys with "." and list positions as "[i]" (``config.lr``, ``grid[0].values[2]``). Walked
    with an explicit stack, so any depth is safe to check."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            reason = text_problem(item)
            if reason:
                yield where or "value", reason
        elif isinstance(item, float) and numbers:
            reason = number_problem(item)
            if reason:
                yield where or "value", reason
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= max_depth:
                yield _cut(where) or "value", f"is nested more than {max_depth} levels deep"
                continue
            if isinstance(item, Mapping):
                children = []
                for key, child in item.items():
                    name = str(key)
                    reason = text_problem(name) if isinstance(key, str) else None
                    if reason:
                        yield where or "value", f"has a key that {reason}"
                        continue
                    children.append((child, f"{where}.{name}" if where else name, depth + 1))
            else:
                children = [(child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))


def _cut(path: str, limit: int = 60) -> str:
    # The path down 1,000 levels is itself 3,000 characters: its start says where.
    return path if len(path) <= limit else path[:limit] + "..."


def first_problem(value: Any, path: str = "", max_depth: int = MAX_DEPTH,
                  numbers: bool = True) -> tuple[str, str] | None:
    """The first of ``value_problems`` (None: the value is safe to store)."""
    return next(value_problems(value, path, max_depth, numbers), None)
