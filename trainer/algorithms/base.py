"""The ``Algorithm`` record and the registry every module asks about an algorithm.

An algorithm is one frozen record: its name and label, its exit rule (or none), its advantage
estimator and std default, whether it down-samples its pools, how a step samples, its extra
step metrics and what a step can cost. Nothing outside ``trainer/algorithms/`` compares an
algorithm's name (a test checks the syntax tree); config validation, the sampler, the loop,
preflight, the simulators, the CLI and the platform read the record instead. Adding an
algorithm is one module that builds a record and calls ``register_algorithm``
(docs/architecture.md, "Adding an algorithm").

Light imports only (numpy and the sampling modules, which import neither torch nor Django):
``trainer.config`` imports the registry, and the web process imports ``trainer.config``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import seeds

if TYPE_CHECKING:
    from trainer.allocation import Allocation
    from trainer.config import TrainConfig
    from trainer.sampler import SamplerResult
    from trainer.schedulers import RoundsOutcome, Scorer
    from trainer.types import Metric, Prompt, RoundStat
    from trainer.visits import PromptVisits

# Per-prompt positive and negative counts and the exit counts (K_pos, K_neg) -> whether each
# prompt's exit rule is met. Vectorised over prompts.
ExitRule = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]
# (resolved, positives, pool sizes, n) -> how many positives each prompt's update group aims for.
PositiveTarget = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


@dataclass(frozen=True)
class CrossCheck:
    """A check of a relation between config fields (M >= n, mini-batch <= B), as (field,
    reason) pairs. It runs only when every one of ``inputs`` passed its own checks (type,
    bounds, choices, and the caller's: a launch form field that did not parse): an error
    derived from a value already reported wrong only repeats it, as "ppo_mini_batch_size: must
    be <= batch_size (-5)" did. ``inputs`` must name every field ``check`` reads.

    ``example``: values over the defaults (and the algorithm's name, for an algorithm's check)
    that fail the check. tests/trainer/test_cross_checks.py makes every check fail with it, then
    breaks each input in turn and asserts the check, and every other derived error, goes
    quiet."""

    inputs: tuple[str, ...]
    check: Callable[[TrainConfig], Iterator[tuple[str, str]]]
    example: Mapping[str, Any]

    @property
    def name(self) -> str:
        return getattr(self.check, "__name__", repr(self.check))

# How a step samples (``Algorithm.sampling``):
#   "group"      one round of n responses per prompt (GRPO);
#   "rounds"     up to N rounds of M per prompt, until the exit rule holds (Seq);
#   "batches"    one round of n per prompt of a batch, further batches of prompts while too few
#                groups carry signal; ``exit_round`` numbers the batch a prompt came in (DAPO);
#   "allocation" one round of a per-prompt number of samples, planned from persistent per-run
#                state (Est).
SAMPLING_KINDS = ("group", "rounds", "batches", "allocation")


@dataclass
class SampledStep:
    """One step's sampling: the finalized sampler (None when cancelled), what the scheduler
    drew, Est's allocation (None for the other algorithms) and the prompts sampled, in the
    result's order (DAPO: every batch it drew; the others: the step's batch)."""

    result: SamplerResult | None
    outcome: RoundsOutcome
    allocation: Allocation | None = None
    prompts: list[Prompt] = field(default_factory=list)
    # Their indices in the run's training set, where the algorithm drew beyond its batch (DAPO
    # from ``StepContext.prompt_set``); None: the step's batch alone (the loop knows those).
    prompt_indices: list[int] | None = None


@dataclass
class StepContext:
    """What an algorithm's ``sample_step`` may use. ``state`` is the algorithm's persistent
    per-run state (``Algorithm.make_state``; Est's pass-rate estimator), None for the others.
    ``prompt_set`` is the run's whole training set, from which an algorithm that draws further
    batches of prompts (DAPO) takes them; ``more_prompts(k)``, where given, overrides that
    choice with further batch k (1-based; an empty list once the prompts run out). ``visits``
    counts how many earlier steps drew each prompt of ``prompt_set`` (``trainer.visits``)."""

    config: TrainConfig
    batch: Sequence[Prompt]
    backend: Any
    scorer: Scorer
    step: int
    state: Any = None
    on_round: Callable[[RoundStat], None] | None = None
    should_stop: Callable[[], bool] | None = None
    more_prompts: Callable[[int], Sequence[Prompt]] | None = None
    prompt_set: Sequence[Prompt] = ()
    visits: PromptVisits | None = None


def no_exit_counts(group_size: int) -> tuple[int, int]:
    """(K_pos, K_neg) of an algorithm without an exit rule."""
    return 0, 0


def balanced_target(resolved: np.ndarray, positives: np.ndarray, pool: np.ndarray,
                    n: int) -> np.ndarray:
    """The down-sample aims for ``n//2`` positives (and ``n - n//2`` negatives)."""
    return np.full(np.shape(positives), n // 2, dtype=np.int64)


def no_extra_metrics(config: TrainConfig, result: SamplerResult,
                     allocation: Allocation | None) -> dict[str, float]:
    return {}


def no_sampler_options(config: TrainConfig) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Algorithm:
    """One algorithm, everything the rest of the code asks about it.

    ``sample_step(ctx) -> SampledStep`` samples one training step (``sample_rounds`` below is
    the common case: the step's batch through the scheduler and the ``AdaptiveSampler``).
    The sampler reads ``exit_rule``, ``default_exit_counts``, ``sampling``, ``downsample``,
    ``positive_target``, ``advantage``, ``std_normalize`` and ``sampler_options``."""

    name: str                       # the config's ``algorithm`` value
    label: str                      # how the dashboard names it
    help: str                       # one clause for the config field's help text
    sampling: str                   # SAMPLING_KINDS
    sample_step: Callable[[StepContext], SampledStep]
    # A step's responses at most: with B prompts, per prompt and in all (the launch's work cap,
    # the smallint columns, preflight's bounds).
    max_samples_per_prompt: Callable[[TrainConfig], int]
    max_samples_per_step: Callable[[TrainConfig], int]
    step_shape: str                 # max_samples_per_step in the config's words
    exit_rule: ExitRule | None = None   # None: no elimination (every prompt takes one round)
    default_exit_counts: Callable[[int], tuple[int, int]] = no_exit_counts
    advantage: str = "global"       # a key of trainer.advantages.ADVANTAGE_ESTIMATORS
    std_normalize: bool = False     # default of ``std_normalize`` (empty in the config)
    downsample: bool = True         # pools are down-sampled to n (False: train on every sample)
    positive_target: PositiveTarget = balanced_target
    sampler_options: Callable[[TrainConfig], dict[str, Any]] = no_sampler_options
    # Extra keys of its steps' metrics, with their meanings, and the function computing them
    # (its values replace the common metrics of the same key: DAPO's ``dropped_groups``).
    # A declaration is a ``trainer.types.Metric`` (unit and domain: the dashboard's axes) or a
    # plain description.
    step_metrics: Mapping[str, Metric | str] = field(default_factory=dict)
    extra_metrics: Callable[[TrainConfig, SamplerResult, Allocation | None],
                            dict[str, float]] = no_extra_metrics
    # Persistent per-run state (Est's estimator): made once per run, passed to every step in
    # ``StepContext.state``, saved in every checkpoint under ``state_key`` (``state_dict()`` /
    # ``load_state_dict()``).
    make_state: Callable[[TrainConfig], Any] | None = None
    state_key: str = ""
    # Its own checks across config fields (Seq: M >= n, exit counts that can be met).
    config_checks: tuple[CrossCheck, ...] = ()
    schedulers: tuple[str, ...] | None = None   # None: every scheduler
    schedulers_reason: str = ""     # why only ``schedulers``, for the config error
    label_shows_group_size: bool = False   # GRPO n=16 is another budget, not another n
    # The group sizes the launch preflight predicts it at besides the run's own n.
    preflight_group_sizes: tuple[int, ...] = ()
    aka: str = ""                   # another name users know it by ("v1/v2: ada-pos")
    summary_fields: tuple[str, ...] = ()   # config fields that describe its sampling
    baseline: bool = False          # the algorithm others are measured against (GRPO)

    def __post_init__(self) -> None:
        if self.sampling not in SAMPLING_KINDS:
            raise ValueError(f"{self.name}: sampling must be one of {', '.join(SAMPLING_KINDS)}, "
                             f"got {self.sampling!r}")
        if (self.sampling == "rounds") != (self.exit_rule is not None):
            raise ValueError(f"{self.name}: an exit rule goes with sampling 'rounds'")
        if self.make_state is not None and not self.state_key:
            raise ValueError(f"{self.name}: persistent state needs a state_key")

    @property
    def eliminates(self) -> bool:
        """Whether a prompt can stop before the last round (its exit rule): Seq."""
        return self.exit_rule is not None

    @property
    def allocates(self) -> bool:
        """Whether its single round draws a planned number of samples per prompt (Est)."""
        return self.sampling == "allocation"

    @property
    def draws_batches(self) -> bool:
        """Whether a step may draw further batches of prompts (DAPO)."""
        return self.sampling == "batches"

    @property
    def choice_label(self) -> str:
        return f"{self.label} ({self.aka})" if self.aka else self.label

    def label_for(self, group_size: int | None = None) -> str:
        """Its label; with ``group_size``, GRPO's says it ("GRPO n=16")."""
        return f"{self.label} n={group_size}" if group_size and self.label_shows_group_size \
            else self.label

    def new_state(self, config: TrainConfig) -> Any:
        return None if self.make_state is None else self.make_state(config)


# --- the registry --------------------------------------------------------------------------

_REGISTRY: dict[str, Algorithm] = {}


def register_algorithm(algorithm: Algorithm, *, replace: bool = False) -> Algorithm:
    """Add ``algorithm`` to the registry (its name must be new unless ``replace``)."""
    if algorithm.name in _REGISTRY and not replace:
        raise ValueError(f"algorithm {algorithm.name!r} is registered already")
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def unregister_algorithm(name: str) -> None:
    """Remove an algorithm (tests that register one of their own)."""
    _REGISTRY.pop(name, None)


class UnknownAlgorithm(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def get_algorithm(name: str | Algorithm) -> Algorithm:
    """The record of ``name`` (a record is returned as it is)."""
    if isinstance(name, Algorithm):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownAlgorithm(f"unknown algorithm {name!r}; choose one of "
                               f"{', '.join(_REGISTRY)}") from None


def is_algorithm(name: object) -> bool:
    return isinstance(name, str) and name in _REGISTRY


def algorithms() -> list[Algorithm]:
    """Every registered algorithm, in registration order (the baseline first)."""
    return list(_REGISTRY.values())


def baseline() -> Algorithm:
    """The algorithm the others are measured against (GRPO)."""
    return next(a for a in _REGISTRY.values() if a.baseline)


class AlgorithmNames(Sequence[str]):
    """The registered names, read live: a choice list that also offers an algorithm registered
    after it was imported (config validation, the launch form's dropdown)."""

    def __getitem__(self, index: Any) -> Any:
        return list(_REGISTRY)[index]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __iter__(self) -> Iterator[str]:
        return iter(list(_REGISTRY))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in _REGISTRY

    def __repr__(self) -> str:
        return repr(tuple(_REGISTRY))


ALGORITHM_NAMES = AlgorithmNames()


def step_metric_declarations() -> dict[str, Metric | str]:
    """Every step metric key a run may record, with its meaning: the common ones
    (``trainer.types.STEP_METRICS``), the optional ones, and each algorithm's own."""
    from trainer.types import OPTIONAL_STEP_METRICS, STEP_METRICS

    out = dict(STEP_METRICS) | dict(OPTIONAL_STEP_METRICS)
    for algorithm in _REGISTRY.values():
        out |= dict(algorithm.step_metrics)
    return out


# --- the common way a step samples ---------------------------------------------------------

def sample_rounds(ctx: StepContext, prompts: Sequence[Prompt], *, downsample_seed: int,
                  generation_seed: int, allocation: Sequence[int] | np.ndarray | None = None,
                  on_round: Callable[[RoundStat], None] | None = None
                  ) -> tuple[SamplerResult | None, RoundsOutcome]:
    """``prompts`` through the run's scheduler and a fresh ``AdaptiveSampler``: the rounds of
    the config's algorithm, then the down-sample and the advantages. A cancelled step comes
    back as (None, outcome)."""
    from trainer.sampler import make_sampler
    from trainer.schedulers import run_scheduler

    sampler = make_sampler(ctx.config, len(prompts), downsample_seed, allocation=allocation)
    outcome = run_scheduler(ctx.config.scheduler, sampler, prompts, ctx.backend, ctx.scorer,
                            seed=generation_seed,
                            on_round=ctx.on_round if on_round is None else on_round,
                            should_stop=ctx.should_stop,
                            early_rounds=ctx.config.early_rounds_mode,
                            speculative_capacity=ctx.config.speculative_capacity)
    if outcome.cancelled:
        return None, outcome
    return sampler.finalize(), outcome


def sample_batch(ctx: StepContext) -> SampledStep:
    """A step of the algorithms that sample their batch once (GRPO, Seq): its rounds, with the
    step's generation and down-sampling seeds."""
    res, outcome = sample_rounds(
        ctx, ctx.batch, downsample_seed=seeds.derive_seed(ctx.config.seed, ctx.step,
                                                          seeds.DOWNSAMPLE),
        generation_seed=seeds.derive_seed(ctx.config.seed, ctx.step, seeds.GENERATION))
    return SampledStep(res, outcome, None, list(ctx.batch))
