"""The ``Algorithm`` record: everything the rest of the code asks about an algorithm.

An algorithm is one frozen record: its name and label, which prompts a step trains on
(``select_batch``), how many responses a prompt draws (``draws``, its rounds and exit rule),
which of them the update keeps and with what loss weight (``keep``), its advantage estimator,
how a step samples (``sample_step``), what it learns from the update (``after_update``), its own
config options and metrics, and what a step can cost. Nothing outside ``trainer/algorithms/``
compares an algorithm's name (a test checks the syntax tree); config validation, the sampler,
the loop, preflight, the simulators, the CLI and the platform read the record instead, found by
name in the registry (``trainer.registry``). Adding an algorithm is one module that builds a
record and calls ``register_algorithm`` (docs/architecture.md, "Adding an algorithm").

The seams, in the order of a step (``trainer.loop.train``):

1. ``select_batch(ctx, count, taken)``: the next prompts to admit, from the whole prompt set,
   with the algorithm's persistent state at hand (default: the seeded epoch permutation's
   batch, ``own_batch``). The loop asks it for the step's B prompts; an algorithm that draws
   further prompts within the step (DAPO) asks it again with what it has taken; an
   asynchronous producer may ask it one prompt at a time.
2. ``draws`` and the exit rule: how many responses each prompt draws, in how many rounds;
   ``keep``: which of them enter the update, with what weight (``SamplerResult.with_kept``
   changes what is kept and recomputes everything derived from it).
3. the per-sample loss weights of the kept responses reach every ``loss_agg_mode``
   (``trainer.update``) and every record (``SampleRecord.weight``).
4. ``after_update(feedback)``: the update's per-prompt statistics (each prompt's loss and its
   share of the loss's gradient), on one process or across ranks.
5. ``options``: the algorithm's own config keys (``trainer.options.Option``), which the form,
   the API, validation, docs/config.md and clones take as they take the config's fields.
6. ``match_budget``: the config keys under which a step draws a given number of responses per
   prompt (``budget_match``: exactly, at most, or per generation batch), so that a sweep's
   ``budget`` puts every algorithm at one sampling budget (``trainer.budget``).

Its own run-page charts are declared here too, as data (``charts``: ``trainer.charts.ChartSpec``,
drawn by the dashboard's generic builder).

Light imports only (numpy and the registry): the web process validates configs against these
records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import seeds
from trainer.charts import ChartSpec
from trainer.config import config_fields
from trainer.options import Option
from trainer.registry import (
    ALGORITHM_NAMES,
    UnknownAlgorithm,
    algorithms,
    baseline,
    get_algorithm,
    is_algorithm,
    register_algorithm,
    step_metric_declarations,
    unregister_algorithm,
)
from trainer.validation import CrossCheck

if TYPE_CHECKING:
    from trainer.allocation import Allocation
    from trainer.config import TrainConfig
    from trainer.result import SamplerResult
    from trainer.types import (
        Metric,
        Prompt,
        PromptUpdateStats,
        RoundsOutcome,
        RoundStat,
        Scorer,
    )
    from trainer.visits import PromptVisits

__all__ = ["ALGORITHM_NAMES", "BUDGET_MATCHES", "MAX_NAME_CHARS", "SAMPLING_KINDS", "Algorithm",
           "BatchContext", "CrossCheck",
           "SampledStep", "StepContext", "UnknownAlgorithm", "UpdateFeedback", "algorithms",
           "balanced_target", "baseline", "choose_batch", "get_algorithm", "is_algorithm",
           "own_batch", "register_algorithm", "step_metric_declarations",
           "unregister_algorithm"]

# Per-prompt positive and negative counts and the exit counts (K_pos, K_neg) -> whether each
# prompt's exit rule is met. Vectorised over prompts.
ExitRule = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]
# (resolved, positives, pool sizes, n) -> how many positives each prompt's update group aims for.
PositiveTarget = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]
# (the step's pools with nothing kept, n, the step's down-sample seed) -> which samples the
# update takes (a bool per sample), or (that, a loss weight per sample).
KeepRule = Callable[["SamplerResult", int, int], "np.ndarray | tuple[np.ndarray, np.ndarray]"]

# How a step samples (``Algorithm.sampling``):
#   "group"      one round of ``draws`` (default n) responses per prompt (GRPO);
#   "rounds"     up to N rounds of M per prompt, until the exit rule holds (Seq);
#   "batches"    one round of n per prompt of a batch, further batches of prompts while too few
#                groups carry signal (DAPO; ``SamplerResult.batch`` says which batch a prompt
#                came in, and its round is numbered by its batch);
#   "allocation" one round of a per-prompt number of samples, planned from persistent per-run
#                state (Est).
SAMPLING_KINDS = ("group", "rounds", "batches", "allocation")
# How a matched budget holds (``Algorithm.budget_match``):
#   "exact"  every step draws B x budget responses (GRPO, VADE, PODS, Est);
#   "cap"    a step draws at most B x budget; what it spends below that depends on the pass
#            rates, which the preflight predicts (Seq);
#   "batch"  each generation batch draws budget per prompt; how many batches a step draws
#            depends on how many groups carry signal, which the preflight predicts (DAPO).
BUDGET_MATCHES = ("exact", "cap", "batch")
# Run.algorithm is a CharField(max_length=16) (platform/experiments/models.py; a platform test
# checks the two agree). A name is also a sweep value and a URL query value: letters, digits,
# '-', '_' and '.'.
MAX_NAME_CHARS = 16
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")


@dataclass(kw_only=True)
class BatchContext:
    """What an algorithm's ``select_batch`` may use: the run's config, the step (1-based), the
    run's whole training set, the algorithm's persistent state (``Algorithm.make_state``; None
    without) and how many earlier steps drew each prompt of the set (``trainer.visits``)."""

    config: TrainConfig
    step: int
    prompt_set: Sequence[Prompt] = ()
    state: Any = None
    visits: PromptVisits | None = None


@dataclass(kw_only=True)
class StepContext(BatchContext):
    """What an algorithm's ``sample_step`` may use: the step's batch (``batch``; its indices
    in ``prompt_set`` are ``batch_indices``, None where the batch is not from a set), the
    generation backend, the scorer, and the loop's hooks. ``select(count, taken)`` asks the
    algorithm's ``select_batch`` for further prompts of the set; ``more_prompts(k)``, where
    given, overrides that with further batch k (1-based; an empty list once the prompts run
    out: the simulator's endless copies of its prompts)."""

    batch: Sequence[Prompt]
    backend: Any
    scorer: Scorer
    batch_indices: Sequence[int] | None = None
    on_round: Callable[[RoundStat], None] | None = None
    should_stop: Callable[[], bool] | None = None
    more_prompts: Callable[[int], Sequence[Prompt]] | None = None

    def select(self, count: int, taken: Collection[int]) -> list[int]:
        """The next ``count`` prompts of the set the algorithm admits, none of ``taken``."""
        return get_algorithm(self.config.algorithm).select_batch(self, count, taken)


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
    # from ``StepContext.select``); None: the step's batch alone (the loop knows those).
    prompt_indices: list[int] | None = None
    # Per sample, in the result's order: the policy version (optimiser steps applied to the
    # weights) that generated it; None: the step's own weights (synchronous training).
    versions: np.ndarray | None = None


@dataclass
class UpdateFeedback:
    """What ``after_update`` receives once a step's update is done: the step, the algorithm's
    persistent state, the prompts sampled (``prompts``, their indices in the training set
    ``prompt_indices``), the sampling (``result``), the mask the update took (``kept``), and
    ``stats``, the learner's per-prompt statistics (None where nothing trains: the simulated
    backend)."""

    config: TrainConfig
    step: int
    state: Any
    prompts: Sequence[Prompt]
    prompt_indices: Sequence[int]
    result: SamplerResult
    kept: np.ndarray
    stats: PromptUpdateStats | None


def own_batch(ctx: BatchContext, count: int, taken: Collection[int]) -> list[int]:
    """The step's batch of the seeded epoch permutation (``seeds.batch_indices``: a function of
    seed and step), in its order, without ``taken``: every algorithm's default."""
    taken = taken if isinstance(taken, (set, frozenset, dict)) else set(taken)
    own = seeds.batch_indices(len(ctx.prompt_set), ctx.config.batch_size, ctx.config.seed,
                              ctx.step)
    return [i for i in own if i not in taken][:count]


def choose_batch(config: TrainConfig, prompt_set: Sequence[Prompt], step: int, *,
                 state: Any = None, visits: PromptVisits | None = None) -> list[int]:
    """The B prompts of ``step`` as the config's algorithm selects them (its ``select_batch``):
    what the loop, the simulators and a rebuild of the visit counts train or simulate."""
    ctx = BatchContext(config=config, step=step, prompt_set=prompt_set, state=state,
                       visits=visits)
    return get_algorithm(config.algorithm).select_batch(ctx, config.batch_size, ())


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


def admit_without_plan(config: TrainConfig, state: Any, prompts: Sequence[Prompt]
                       ) -> Allocation | None:
    return None


def always_ready(config: TrainConfig, result: SamplerResult) -> bool:
    return True


def nothing_learned(config: TrainConfig, state: Any, prompts: Sequence[Prompt],
                    result: SamplerResult) -> None:
    return None


@dataclass(frozen=True)
class Algorithm:
    """One algorithm, everything the rest of the code asks about it.

    ``sample_step(ctx) -> SampledStep`` samples one training step (``sample_batch`` is the
    common case: the step's batch through the scheduler and the ``AdaptiveSampler``).
    The sampler reads ``exit_rule``, ``default_exit_counts``, ``sampling``, ``draws``,
    ``keep`` (or ``downsample`` and ``positive_target``), ``advantage``, ``std_normalize`` and
    ``sampler_options``; config validation ``options`` and ``config_checks``."""

    name: str                       # the config's ``algorithm`` value (MAX_NAME_CHARS)
    label: str                      # how the dashboard names it
    help: str                       # one clause for the config field's help text
    sampling: str                   # SAMPLING_KINDS
    sample_step: Callable[[StepContext], SampledStep]
    # A step's responses at most: with B prompts, per prompt and in all (the launch's work cap,
    # the smallint columns, preflight's bounds).
    max_samples_per_prompt: Callable[[TrainConfig], int]
    max_samples_per_step: Callable[[TrainConfig], int]
    step_shape: str                 # max_samples_per_step in the config's words
    # Which prompts a step trains on: (context, how many, the indices already taken this step)
    # -> the next prompts of ``ctx.prompt_set`` to admit, in order (fewer once none are left).
    select_batch: Callable[[BatchContext, int, Collection[int]], list[int]] = own_batch
    exit_rule: ExitRule | None = None   # None: no elimination (every prompt takes one round)
    default_exit_counts: Callable[[int], tuple[int, int]] = no_exit_counts
    # Responses a prompt draws in its one round (an algorithm without an exit rule that does
    # not allocate); None: n.
    draws: Callable[[TrainConfig], int] | None = None
    advantage: str = "global"       # a key of trainer.advantages.ADVANTAGE_ESTIMATORS
    std_normalize: bool = False     # default of ``std_normalize`` (empty in the config)
    # Which samples the update keeps, and their loss weights (``KeepRule``); None: each pool
    # down-sampled to n aiming at ``positive_target`` positives, or with ``downsample=False``
    # the whole pool.
    keep: KeepRule | None = None
    downsample: bool = True
    positive_target: PositiveTarget = balanced_target
    sampler_options: Callable[[TrainConfig], dict[str, Any]] = no_sampler_options
    # Extra keys of its steps' metrics, with their meanings, and the function computing them
    # (its values replace the common metrics of the same key: DAPO's ``dropped_groups``).
    # A declaration is a ``trainer.types.Metric`` (unit and domain: the dashboard's axes) or a
    # plain description.
    step_metrics: Mapping[str, Metric | str] = field(default_factory=dict)
    extra_metrics: Callable[[TrainConfig, SamplerResult, Allocation | None],
                            dict[str, float]] = no_extra_metrics
    # Its own run-page charts of step metrics, as data (``trainer.charts.ChartSpec``): the
    # dashboard draws them on its runs' pages. Metrics no chart draws get the generic chart of
    # an algorithm's metrics anyway.
    charts: tuple[ChartSpec, ...] = ()
    # Persistent per-run state (Est's estimator): made once per run, passed to every step in
    # ``StepContext.state``, saved in every checkpoint under ``state_key`` (``state_dict()`` /
    # ``load_state_dict()``).
    make_state: Callable[[TrainConfig], Any] | None = None
    state_key: str = ""
    # Called after every step's update with its per-prompt statistics (``UpdateFeedback``);
    # None: the learner computes none.
    after_update: Callable[[UpdateFeedback], None] | None = None
    # Its own config keys, beside TrainConfig's fields (``trainer.options.Option``).
    options: tuple[Option, ...] = ()
    # Its own checks across config keys (Seq: M >= n, exit counts that can be met; Est: an
    # allocation that can meet its budget; ``trainer.validation.CrossCheck``).
    config_checks: tuple[CrossCheck, ...] = ()
    # Asynchronous training (``trainer.asyncloop``, max_policy_lag > 0), which admits prompts
    # through ``select_batch`` and drives each through its rounds (``draws``, the exit rule):
    # ``async_admit(config, state, prompts)`` plans what prompts admitted together draw (Est's
    # allocation from the estimator at admission; None: the sampler's own rule);
    # ``async_ready(config, result)`` says whether a prompt done sampling enters the ready
    # buffer (DAPO: only a group with signal; one without is filtered and another admitted);
    # ``async_trained(config, state, prompts, result)`` learns from the prompts an update took
    # (Est: the estimator takes their counts when they are trained).
    async_admit: Callable[[TrainConfig, Any, Sequence[Prompt]], Allocation | None] = \
        admit_without_plan
    async_ready: Callable[[TrainConfig, SamplerResult], bool] = always_ready
    async_trained: Callable[[TrainConfig, Any, Sequence[Prompt], SamplerResult], None] = \
        nothing_learned
    schedulers: tuple[str, ...] | None = None   # None: every scheduler
    schedulers_reason: str = ""     # why only ``schedulers``, for the config error
    label_shows_group_size: bool = False   # GRPO n=16 is another budget, not another n
    # The group sizes the launch preflight predicts it at besides the run's own n.
    preflight_group_sizes: tuple[int, ...] = ()
    # A matched sampling budget (issue 31; a sweep's ``budget``, ``trainer.budget``):
    # ``match_budget(config, samples_per_prompt)`` -> the config keys to set so that a step
    # draws that many responses per prompt of its batch, B x that per step, in the sense
    # ``budget_match`` names (``BUDGET_MATCHES``); ``budget_note`` says how, in words. None: it
    # cannot be matched, and ``budget_note`` says why (the sweep refuses it by name with that).
    match_budget: Callable[[TrainConfig, int], dict[str, Any]] | None = None
    budget_match: str = ""
    budget_note: str = ""
    aka: str = ""                   # another name users know it by ("v1/v2: ada-pos")
    summary_fields: tuple[str, ...] = ()   # config fields that describe its sampling
    baseline: bool = False          # the algorithm others are measured against (GRPO)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or len(self.name) > MAX_NAME_CHARS \
                or not NAME_PATTERN.match(self.name):
            raise ValueError(f"algorithm name {self.name!r}: 1 to {MAX_NAME_CHARS} characters "
                             "(the runs' algorithm column), lower-case letters, digits, '-', "
                             "'_' and '.', starting with a letter or digit")
        if self.sampling not in SAMPLING_KINDS:
            raise ValueError(f"{self.name}: sampling must be one of {', '.join(SAMPLING_KINDS)}, "
                             f"got {self.sampling!r}")
        if (self.sampling == "rounds") != (self.exit_rule is not None):
            raise ValueError(f"{self.name}: an exit rule goes with sampling 'rounds'")
        if self.draws is not None and self.sampling != "group":
            raise ValueError(f"{self.name}: a draws rule goes with sampling 'group' (rounds "
                             "draw M, an allocation plans its own, batches draw n)")
        if self.match_budget is not None and self.budget_match not in BUDGET_MATCHES:
            raise ValueError(f"{self.name}: budget_match must be one of "
                             f"{', '.join(BUDGET_MATCHES)}, got {self.budget_match!r}")
        if self.make_state is not None and not self.state_key:
            raise ValueError(f"{self.name}: persistent state needs a state_key")
        names = [o.name for o in self.options]
        clash = sorted(set(names) & config_fields()) or sorted(
            {n for n in names if names.count(n) > 1})
        if clash:
            raise ValueError(f"{self.name}: option {clash[0]!r} is a config field or declared "
                             "twice")
        self._check_charts()

    def _check_charts(self) -> None:
        from trainer.types import OPTIONAL_STEP_METRICS, STEP_METRICS

        names = [c.name for c in self.charts]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{self.name}: chart {twice[0]!r} declared twice")
        declared = {*STEP_METRICS, *OPTIONAL_STEP_METRICS, *self.step_metrics}
        for chart in self.charts:
            unknown = [k for k in chart.keys if k not in declared]
            if unknown:
                raise ValueError(f"{self.name}: chart {chart.name!r} draws {unknown[0]!r}, "
                                 "which is no step metric (declare it in step_metrics)")

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
