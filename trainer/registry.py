"""The registry of algorithms: every module asks it about an algorithm by name
(``get_algorithm``, ``algorithms()``, ``ALGORITHM_NAMES``); the records themselves are
``trainer.algorithms.Algorithm``.

The registry imports no algorithm and no config, so that ``trainer.config`` can ask it (the
choices of ``algorithm``, an algorithm's own options and checks) while every algorithm module
imports ``trainer.config`` freely. The algorithms fill it: importing ``trainer`` (any module of
it) imports ``trainer.algorithms``, which registers the built-ins and then imports the modules
named in the ``RADA_ALGORITHMS`` environment variable (comma-separated module paths, each
registering its record when imported: how a deployment adds its own algorithms to the web
process, the workers and the command line alike; docs/architecture.md, "Adding an
algorithm").

Light imports only: the web process imports this module through ``trainer.config``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.options import Option
    from trainer.types import Metric

# Module paths of the deployment's own algorithms, imported after the built-ins.
PLUGINS_ENV = "RADA_ALGORITHMS"

_REGISTRY: dict[str, Any] = {}


def load_plugins() -> None:
    """Import the modules ``RADA_ALGORITHMS`` names (each registers its algorithm): after the
    built-ins, so that those come first in every list."""
    for module in os.environ.get(PLUGINS_ENV, "").split(","):
        if module.strip():
            importlib.import_module(module.strip())


def register_algorithm(algorithm: Any, *, replace: bool = False) -> Any:
    """Add ``algorithm`` (a ``trainer.algorithms.Algorithm``) to the registry; its name must be
    new unless ``replace``, and its options and charts must not be declared otherwise by another
    one."""
    if algorithm.name in _REGISTRY and not replace:
        raise ValueError(f"algorithm {algorithm.name!r} is registered already")
    for option in algorithm.options:
        other = _option_owner(option.name, besides=algorithm.name)
        if other is not None and other[1] != option:
            raise ValueError(f"{algorithm.name}: option {option.name!r} is declared otherwise "
                             f"by {other[0]}")
    for chart in algorithm.charts:
        owner = next((a.name for a in _REGISTRY.values() if a.name != algorithm.name
                      for c in a.charts if c.name == chart.name and c != chart), None)
        if owner is not None:
            raise ValueError(f"{algorithm.name}: chart {chart.name!r} is declared otherwise "
                             f"by {owner}")
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def unregister_algorithm(name: str) -> None:
    """Remove an algorithm (tests that register one of their own)."""
    _REGISTRY.pop(name, None)


class UnknownAlgorithm(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def get_algorithm(name: Any) -> Any:
    """The record of ``name`` (a record is returned as it is)."""
    if not isinstance(name, str) and hasattr(name, "sample_step"):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownAlgorithm(f"unknown algorithm {name!r}; choose one of "
                               f"{', '.join(_REGISTRY)}") from None


def is_algorithm(name: object) -> bool:
    return isinstance(name, str) and name in _REGISTRY


def algorithms() -> list[Any]:
    """Every registered algorithm, in registration order (the baseline first)."""
    return list(_REGISTRY.values())


def baseline() -> Any:
    """The algorithm the others are measured against (GRPO)."""
    return next(a for a in algorithms() if a.baseline)


class AlgorithmNames(Sequence[str]):
    """The registered names, read live: a choice list that also offers an algorithm registered
    after it was imported (config validation, the launch form's dropdown, the CLI's choices)."""

    def _names(self) -> list[str]:
            return list(_REGISTRY)

    def __getitem__(self, index: Any) -> Any:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
            return isinstance(name, str) and name in _REGISTRY

    def __repr__(self) -> str:
        return repr(tuple(self._names()))


ALGORITHM_NAMES = AlgorithmNames()


def step_metric_declarations() -> dict[str, Metric | str]:
    """Every step metric key a run may record, with its meaning: the common ones
    (``trainer.types.STEP_METRICS``), the optional ones, and each algorithm's own."""
    from trainer.types import OPTIONAL_STEP_METRICS, STEP_METRICS

    out = dict(STEP_METRICS) | dict(OPTIONAL_STEP_METRICS)
    for algorithm in algorithms():
        out |= dict(algorithm.step_metrics)
    return out


def option_specs() -> list[tuple[Any, Option]]:
    """(the first algorithm declaring it, the option) for every option of every registered
    algorithm, in registration and declaration order; an option two algorithms share (the
    same declaration) once."""
    out: dict[str, tuple[Any, Option]] = {}
    for algorithm in algorithms():
        for option in algorithm.options:
            out.setdefault(option.name, (algorithm, option))
    return list(out.values())


def chart_specs() -> list[tuple[Any, tuple[str, ...]]]:
    """(the chart, a ``trainer.charts.ChartSpec``; the algorithms declaring it) for every chart a
    registered algorithm declares, in registration and declaration order; a chart two
    algorithms share (the same declaration) once."""
    out: dict[str, tuple[Any, tuple[str, ...]]] = {}
    for algorithm in algorithms():
        for chart in algorithm.charts:
            spec, names = out.get(chart.name, (chart, ()))
            out[chart.name] = (spec, (*names, algorithm.name))
    return list(out.values())


def _option_owner(name: str, *, besides: str) -> tuple[str, Option] | None:
    for algorithm in _REGISTRY.values():
        if algorithm.name == besides:
            continue
        for option in algorithm.options:
            if option.name == name:
                return algorithm.name, option
    return None
