"""An algorithm's own options: keys of a run's config that an algorithm module declares in its
record (``Algorithm.options``) instead of ``trainer.config.TrainConfig`` declaring them for
every algorithm. Each carries what a config field carries (default, help, unit, bounds, a form
group, choices), so that the launch form, the API's validation, docs/config.md, sweeps and
clones derive from the declaration exactly as they do from the fields.

A config stores options flat, next to its fields (``{"algorithm": "ada-est", "est_alpha":
1.0, ...}``): stored configs and TOML files read the same whichever declares a key.

No imports of the trainer: ``trainer.config`` and every algorithm module import this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOUND_KEYS = ("ge", "gt", "le", "lt")
# What ``stored_before`` holds when a stored config lacking the key ran with the default.
AS_DEFAULT = object()


@dataclass(frozen=True)
class Option:
    """One option. ``type`` is written as a config field's annotation (``"int"``, ``"float"``,
    ``"bool"``, ``"str"``, ``"int | None"``...; empty: the default's type). A number has both
    bounds, ``ge``/``gt`` below (inclusive/exclusive) and ``le``/``lt`` above (a test checks:
    an unbounded value is unbounded work for a worker); a string with a fixed set of values
    lists them in ``choices`` (a dropdown on the form). ``group`` is the launch form's group
    (empty: the algorithm's own, titled with its label). ``stored_before`` is what a stored
    config lacking the key ran with, where that differs from ``default`` (the option did not
    exist yet and the code behaved one way), so that its record and a clone of it stay what
    they were."""

    name: str
    default: Any
    help: str
    unit: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    group: str = ""
    type: str = ""
    stored_before: Any = AS_DEFAULT

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"option {self.name!r}: a name must be a Python identifier (it is "
                             "read as config.<name>)")
        if not self.type:
            object.__setattr__(self, "type", _type_of(self.default, self.name))
        if self.choices and self.default not in self.choices:
            raise ValueError(f"option {self.name}: default {self.default!r} is not one of "
                             f"{', '.join(self.choices)}")

    @property
    def bounds(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in BOUND_KEYS if getattr(self, k) is not None}

    def stored_value(self) -> Any:
        """What a stored config without this key ran with."""
        return self.default if self.stored_before is AS_DEFAULT else self.stored_before


def _type_of(default: Any, name: str) -> str:
    for kind in (bool, int, float, str):
        if type(default) is kind:
            return kind.__name__
    raise ValueError(f"option {name}: give its type (the default {default!r} does not say it)")
