"""The step metrics the dashboard reads, from the trainer's own declarations.

``trainer.types`` declares the metrics every step carries (``STEP_METRICS``) and those only some
steps carry (``OPTIONAL_STEP_METRICS``); each algorithm declares its extra ones. Everything the
dashboard knows about a metric (that it may be read, its unit, its domain) comes from there, read
when asked: an algorithm registered after this module was imported is seen all the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set

from trainer.algorithms import get_algorithm, is_algorithm, step_metric_declarations
from trainer.types import Metric, as_metric

Domain = tuple[float | None, float | None]
FRACTION: Domain = (0.0, 1.0)
COUNT: Domain = (0.0, None)

# Quantities the charts plot that are no step metric: Step columns derived in SQL, evaluation
# and pass-rate fractions, counts of prompts.
CHART_QUANTITIES: dict[str, Domain] = {
    **dict.fromkeys(("pass_rate", "eval", "lag_share"), FRACTION),
    **dict.fromkeys(("cum_samples", "cum_tokens", "wall_seconds", "step", "active", "outcome",
                     "samples_per_step", "prompts"), COUNT),
}


def algorithm_declarations(algorithm: str) -> Mapping[str, Metric | str]:
    """The extra step metrics ``algorithm``'s record declares, as declared (none for a name no
    longer registered: an imported run of a removed algorithm still draws its generic
    charts)."""
    return get_algorithm(algorithm).step_metrics if is_algorithm(algorithm) else {}


def algorithm_metrics(algorithm: str) -> dict[str, Metric]:
    """``algorithm_declarations`` as Metrics."""
    return {key: as_metric(m) for key, m in algorithm_declarations(algorithm).items()}


def algorithm_eliminates(algorithm: str) -> bool:
    """Whether ``algorithm`` retires prompts by an exit rule (Seq); GRPO, DAPO and Est sample
    every prompt in one round (DAPO: once per batch) and eliminate none."""
    return is_algorithm(algorithm) and get_algorithm(algorithm).eliminates


def algorithm_short_label(algorithm: str) -> str:
    """How a prompt's history names the algorithm that estimated or allocated: the last word of
    its label ("Est" of "Reinforce-Ada Est", "GVM-RAFT", "VADE"); the name when unregistered."""
    return get_algorithm(algorithm).label.split()[-1] if is_algorithm(algorithm) else algorithm


def declared() -> dict[str, Metric]:
    """Every step metric a run may record (``trainer.algorithms.step_metric_declarations``: the
    common ones, the optional ones and every registered algorithm's own)."""
    return {key: as_metric(m) for key, m in step_metric_declarations().items()}


def metric(key: str) -> Metric:
    return declared().get(key) or Metric(key)


def label(key: str) -> str:
    """A metric's legend name: its declared label, else its key in words."""
    return metric(key).label or key.replace("_", " ")


def domain(key: str) -> Domain:
    """(lowest, highest) of a plotted quantity, None where unbounded."""
    if key in CHART_QUANTITIES:
        return CHART_QUANTITIES[key]
    m = metric(key)
    return (m.low, m.high)


class _Keys(Set[str]):
    """A live view of the declared step metrics' keys (what ``step_series`` may read)."""

    def __contains__(self, key: object) -> bool:
        return key in declared()

    def __iter__(self) -> Iterator[str]:
        return iter(declared())

    def __len__(self) -> int:
        return len(declared())


METRIC_KEYS: Set[str] = _Keys()


class _Declared(Mapping[str, Domain]):
    """A live view: the declared metrics and the chart quantities, each with its domain."""

    def _keys(self) -> dict[str, None]:
        return dict.fromkeys([*declared(), *CHART_QUANTITIES])

    def __getitem__(self, key: str) -> Domain:
        if key not in self._keys():
            raise KeyError(key)
        return domain(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


METRIC_DOMAINS: Mapping[str, Domain] = _Declared()
