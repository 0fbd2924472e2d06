"""DAPO's dynamic sampling (Yu et al., 2025; verl's ``filter_groups``): one GRPO round of n per
prompt of a generation batch; groups whose ``dapo_filter_metric`` values are all equal are
dropped (verl's ``filter_groups.metric``; the recipe's ``acc`` by default); while fewer than B
groups carry signal and fewer than ``max_num_gen_batches`` batches were drawn (0: no limit), the
next batch of prompts is drawn. The step trains on the first B groups with signal, with GRPO's
advantage.

When the batches (or the prompt set) run out first, ``dapo_fewer_groups`` says what happens:
``train`` (the default) trains on the groups it has (fewer than B; none leaves the update empty)
and records how many batches it drew; ``raise`` fails the run naming the cap, as verl does.
Deliberate differences from verl (docs/paper-fidelity.md): a generation batch holds
``dapo_gen_batch_size`` prompts (default B; the recipe's 3B in configs/paper-dapo.toml); and
further batches come from the rest of the prompt set (``further_prompt_order``: unseen prompts
first by default), so every step keeps its own batch (the same prompts as a GRPO run of the same
seed) and a resumed run draws exactly the same ones."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import formatting as fmt
from trainer import seeds
from trainer.advantages import signal_groups, signal_values
from trainer.algorithms.base import Algorithm, BatchContext, SampledStep, StepContext, own_batch
from trainer.algorithms.sampling import sample_rounds
from trainer.charts import ChartSpec, Panel
from trainer.config import SIGNAL_METRICS
from trainer.options import Option
from trainer.result import SamplerResult
from trainer.sampler import make_sampler
from trainer.types import RoundsOutcome, count
from trainer.validation import CrossCheck
from trainer.visits import PromptVisits, own_batches_after

if TYPE_CHECKING:
    from trainer.allocation import Allocation
    from trainer.config import TrainConfig
    from trainer.types import Prompt, RoundStat


FURTHER_PROMPTS = ("unseen-first", "any")
# What a step does when the batches (or the prompt set) run out before B groups carry signal.
FEWER_GROUPS = ("train", "raise")
# The bound of an unlimited step (max_num_gen_batches = 0) when the config does not say how many
# prompts the set holds (a file): the most a built-in set holds (task_num_prompts' bound). The
# platform's launch bounds it by the prompt set's own size.
UNKNOWN_SET_PROMPTS = 1_000_000
# DAPO's options: keys of every run's config (the names and the stored JSON of the config fields
# they were before), read by DAPO alone.
OPTIONS = (
    Option("max_num_gen_batches", 10, "dapo: generation batches (of G = dapo_gen_batch_size "
           "prompts each) drawn at most per step while fewer than B groups carry signal; 0: no "
           "limit but the prompt set (verl's max_num_gen_batches, whose default is 0; the DAPO "
           "recipe's scripts set 10). dapo_fewer_groups says what happens when they run out.",
           "batches", ge=0, le=100, group="algorithm"),
    Option("dapo_fewer_groups", "train", "dapo: when max_num_gen_batches batches (or the prompt "
           "set) ran out before B groups carried signal: train (on the groups it has, fewer "
           "than B) or raise (the run fails with an error naming max_num_gen_batches, as "
           "verl).", choices=FEWER_GROUPS, group="algorithm"),
    # Runs stored before this option filtered on the shaped reward.
    Option("dapo_filter_metric", "acc", "dapo: what a group's signal is read from (verl's "
           "filter_groups.metric): acc (whether the verifier's score exceeds "
           "positive_threshold: the DAPO recipe's), score (the verifier's score), seq_reward or "
           "seq_final_reward (the reward after overlong shaping). A group whose values are all "
           "equal is dropped. The same unless overlong_buffer_len > 0.",
           choices=SIGNAL_METRICS, group="algorithm", stored_before="seq_reward"),
    Option("dapo_gen_batch_size", 0, "dapo: G, prompts per generation batch (0: B). Batch 0 is "
           "the step's own B prompts topped up to G, each further batch G more (verl's "
           "gen_batch_size; the DAPO recipe: 3B).", "prompts", ge=0, le=65_536,
           group="algorithm"),
    # Runs stored before this option drew further prompts from the whole rest of the set.
    Option("dapo_further_prompts", "unseen-first", "dapo: where further prompts come from: "
           "unseen-first (prompts no earlier step drew, and no later step's own batch holds, "
           "first; then the least drawn) or any (the whole rest of the set in a seeded order, "
           "earlier draws included: runs stored before this option).",
           choices=FURTHER_PROMPTS, group="algorithm", stored_before="any"),
)


def further_prompt_order(num_prompts: int, batch_size: int, seed: int, step: int, *,
                         visits: PromptVisits | None = None, mode: str = "unseen-first",
                         last_step: int | None = None) -> list[int]:
    """Prompt indices DAPO's further batches of ``step`` take, in order: a permutation seeded
    by (seed, step) of the prompts not in the step's own batch (``seeds.batch_indices``), so a
    step never draws a prompt twice and a resumed run draws the same ones.

    ``mode = "any"`` takes that permutation as it is: the whole rest of the set, prompts earlier
    steps drew included. ``"unseen-first"`` (the default) stably reorders it by how many earlier
    steps drew each prompt (``visits``; without it, the own batches of steps 1..step-1), fewest
    first, and among the never drawn puts first those no later step up to ``last_step`` draws
    as its own batch (``visits.own_batches_after``): fresh prompts first, then prompts the run
    would draw later anyway, then revisits, the least drawn first.

    verl draws its further batches from the data loader, so a DAPO step there consumes the next
    steps' prompts and revisits none within an epoch; here every step keeps its own batch (the
    same prompts as a GRPO run of the same seed) and further batches come from the rest of the
    set, so a run that draws more prompts than the set holds must revisit some
    (``prompts_revisited`` counts them)."""
    first = seeds.batch_indices(num_prompts, batch_size, seed, step)
    own = np.zeros(num_prompts, dtype=bool)
    own[first] = True
    perm = np.random.default_rng([seed, step, seeds.DAPO_BATCHES]).permutation(num_prompts)
    rest = perm[~own[perm]]
    if mode == "any":
        return rest.tolist()
    if mode != "unseen-first":
        raise ValueError(f"dapo_further_prompts must be one of {', '.join(FURTHER_PROMPTS)}, "
                         f"got {mode!r}")
    if visits is None:
        visits = PromptVisits.from_own_batches(num_prompts, batch_size, seed, step - 1)
    later = own_batches_after(num_prompts, batch_size, seed, step,
                              step if last_step is None else last_step)
    key = visits.counts[rest] * 2 + later[rest]
    return rest[np.argsort(key, kind="stable")].tolist()


def further_batch_indices(num_prompts: int, batch_size: int, seed: int, step: int, k: int,
                          *, gen_batch_size: int | None = None, **order: Any) -> list[int]:
    """Prompt indices of DAPO's further batch ``k`` (1-based) of ``step``: with a generation
    batch of G = ``gen_batch_size`` prompts (default B), batch 0 is the step's own B prompts
    topped up with the first G - B of ``further_prompt_order`` (``order``: its ``visits``,
    ``mode`` and ``last_step``), and batch k the next G; shorter or empty once the set runs
    out. ``further_batch_indices(..., 0)`` is the top-up of batch 0."""
    G = batch_size if gen_batch_size is None else gen_batch_size
    rest = further_prompt_order(num_prompts, batch_size, seed, step, **order)
    lo = 0 if k == 0 else G - batch_size + (k - 1) * G
    hi = G - batch_size if k == 0 else lo + G
    return rest[lo:hi]


def gen_batch_size(config: TrainConfig) -> int:
    """G: prompts per generation batch (``dapo_gen_batch_size``; 0 is B)."""
    return config.dapo_gen_batch_size or config.batch_size


def max_gen_batches(config: TrainConfig, prompt_count: int | None = None) -> int:
    """Generation batches a step draws at most: ``max_num_gen_batches``, or with 0 (no limit)
    as many as the prompt set fills, ``ceil(P / G)`` (a step never draws a prompt twice), P
    the set's ``prompt_count`` where known, else the built-in task's ``task_num_prompts``, else
    ``UNKNOWN_SET_PROMPTS``."""
    if config.max_num_gen_batches:
        return config.max_num_gen_batches
    if prompt_count is None:
        prompt_count = config.task_num_prompts if config.prompts.startswith("builtin:") \
            else UNKNOWN_SET_PROMPTS
    return max(1, math.ceil(prompt_count / gen_batch_size(config)))


def filter_values(config: TrainConfig, res: SamplerResult) -> np.ndarray:
    """Each sample's value of ``dapo_filter_metric`` (``trainer.advantages.signal_values``)."""
    return signal_values(res.rewards, res.scores, config.dapo_filter_metric,
                         config.positive_threshold, res.final_rewards)


class FewerGroups(RuntimeError):
    """``dapo_fewer_groups = raise``: the batches (or the prompt set) ran out before B groups
    carried signal. The message names the cap, as verl's ValueError does."""


def fewer_groups(config: TrainConfig, batches: int, with_signal: int,
                 prompts_drawn: int) -> None:
    """Raise ``FewerGroups`` where the step's rule says so (``dapo_fewer_groups``)."""
    if config.dapo_fewer_groups != "raise" or with_signal >= config.batch_size:
        return
    cap = config.max_num_gen_batches
    why = (f"after {batches} generation batches (max_num_gen_batches = {cap})" if cap
           and batches >= cap else f"after the prompt set ran out ({prompts_drawn:,} prompts "
           f"drawn in {batches} batches; max_num_gen_batches = {cap or '0, no limit'})")
    raise FewerGroups(
        f"dapo: only {with_signal} of the B = {config.batch_size} groups carried signal "
        f"(dapo_filter_metric = {config.dapo_filter_metric}) {why}; dapo_fewer_groups = raise "
        f"fails the run, as verl does. Raise max_num_gen_batches, set it to 0 (no limit), or "
        f"set dapo_fewer_groups = train to train on the groups there are.")


def select_dapo_prompts(ctx: BatchContext, count: int, taken: Collection[int]) -> list[int]:
    """DAPO's prompts of a step, in the order it takes them: the step's own batch
    (``own_batch``: the prompts a GRPO run of the same seed trains on), then the further
    prompts of ``further_prompt_order``; the next ``count`` of them not in ``taken``."""
    taken = taken if isinstance(taken, (set, frozenset, dict)) else set(taken)
    chosen = own_batch(ctx, count, taken)
    if len(chosen) == count or not ctx.prompt_set:
        return chosen
    config = ctx.config
    order = further_prompt_order(len(ctx.prompt_set), config.batch_size, config.seed, ctx.step,
                                 visits=ctx.visits, mode=config.dapo_further_prompts,
                                 last_step=config.total_steps)
    return chosen + [i for i in order if i not in taken][:count - len(chosen)]


def sample_dapo_step(ctx: StepContext) -> SampledStep:
    """Batches of G prompts until B groups carry signal or ``max_num_gen_batches`` were drawn
    (batch 0: the step's own B prompts, topped up to G; the further prompts from
    ``select_dapo_prompts`` through ``StepContext.select``); batch k's rounds are numbered
    round k + 1 (round statistics, ``exit_round``) and its prompts carry ``batch`` k + 1."""
    config = ctx.config
    B, G = config.batch_size, gen_batch_size(config)
    take = _further_prompts(ctx)
    indices = None if ctx.more_prompts is not None or ctx.batch_indices is None \
        else list(ctx.batch_indices)
    results: list[SamplerResult] = []
    outcomes: list[RoundsOutcome] = []
    drawn: list[Prompt] = []

    def next_batch(k: int) -> tuple[list[Prompt], list[tuple[int, Prompt]], int, int,
                                    Callable[[RoundStat], None]] | None:
        more = take(G - B if k == 0 else G)
        prompts = [*ctx.batch, *(p for _, p in more)] if k == 0 else [p for _, p in more]
        if not prompts:
            return None  # the prompt set ran out

        def renumbered(stat: RoundStat) -> None:
            if ctx.on_round is not None:
                ctx.on_round(dataclasses.replace(stat, round=k + 1))

        # Batch 0 draws with GRPO's seed, so its samples are a same-seed GRPO run's.
        gen_seed = seeds.derive_seed(config.seed, ctx.step, seeds.GENERATION) if k == 0 else \
            seeds.derive_seed(config.seed, ctx.step, seeds.GENERATION, k)
        return (prompts, more, gen_seed,
                seeds.derive_seed(config.seed, ctx.step, seeds.DOWNSAMPLE, k), renumbered)

    if config.early_rounds_mode != "off":
        return _sample_batches_early(ctx, next_batch, indices)
    with_signal = 0
    for k in itertools.count() if not config.max_num_gen_batches \
            else range(config.max_num_gen_batches):
        got = next_batch(k)
        if got is None:
            break
        prompts, more, gen_seed, downsample_seed, renumbered = got
        res, outcome = sample_rounds(ctx, prompts, generation_seed=gen_seed,
                                     on_round=renumbered, downsample_seed=downsample_seed)
        if res is None:
            return SampledStep(None, outcome, None, drawn)
        results.append(res)
        outcomes.append(outcome)
        drawn.extend(prompts)
        if indices is not None:
            indices.extend(i for i, _ in more)
        with_signal += int(signal_groups(res, filter_values(config, res)).sum())
        if with_signal >= B:
            break
    fewer_groups(config, len(results), with_signal, len(drawn))
    return SampledStep(concat_results(results, keep_groups=B, config=config),
                       merge_outcomes(outcomes), None, drawn, prompt_indices=indices)


def _further_prompts(ctx: StepContext) -> Callable[[int], list[tuple[int, Prompt]]]:
    """``take(count)``: the step's next ``count`` further prompts as (index in the set,
    prompt), from the caller's ``more_prompts`` (index -1) where given, else from the set
    through the algorithm's ``select_batch``; fewer once they run out."""
    if ctx.more_prompts is not None:
        stream = _chained(ctx.more_prompts)
        return lambda count: list(itertools.islice(stream, count))
    taken: set[int] = set(ctx.batch_indices or ())

    def take(count: int) -> list[tuple[int, Prompt]]:
        if count <= 0 or not ctx.prompt_set:
            return []
        chosen = ctx.select(count, taken)
        taken.update(chosen)
        return [(i, ctx.prompt_set[i]) for i in chosen]

    return take


def group_signal_bounds(rewards: Sequence[float], outstanding: int) -> tuple[bool, bool]:
    """Whether a group whose ``rewards`` are back and ``outstanding`` samples still out carries
    signal (rewards not all equal, ``signal_groups``) for sure, and whether it still may."""
    sure = len(rewards) > 1 and max(rewards) > min(rewards)
    return sure, sure or outstanding > 0


def _sample_batches_early(ctx: StepContext, next_batch: Callable[[int], Any],
                          indices: list[int] | None) -> SampledStep:
    """DAPO's batches with further batches drawn early (``early_rounds`` certain or
    speculative, ``trainer.schedulers.run_batches``): exactly the batches, samples and kept
    groups of drawing them one after another."""
    from trainer.schedulers import Batch, BatchRule, request_engine, run_batches

    config = ctx.config

    def make_batch(k: int) -> Batch | None:
        got = next_batch(k)
        if got is None:
            return None
        prompts, more, gen_seed, downsample_seed, renumbered = got
        return Batch(make_sampler(config, len(prompts), downsample_seed), prompts, gen_seed,
                     on_round=renumbered, tag=more)

    rule = BatchRule(target=config.batch_size, max_batches=max_gen_batches(config, 1 << 62),
                     counts=group_signal_bounds, value=filter_value(config))
    drawn_out = run_batches(make_batch, rule, request_engine(config.scheduler, ctx.backend),
                            ctx.scorer, early_rounds=config.early_rounds_mode,
                            speculative_capacity=config.speculative_capacity,
                            should_stop=ctx.should_stop)
    outcomes = [o for _, o in drawn_out.batches]
    drawn = [p for b, _ in drawn_out.batches for p in b.prompts]
    if drawn_out.cancelled:
        outcome = merge_outcomes(outcomes)
        outcome.cancelled = True
        return SampledStep(None, outcome, None, drawn)
    results = [b.sampler.finalize() for b, _ in drawn_out.batches]
    if indices is not None:
        for b, _ in drawn_out.batches:
            indices.extend(i for i, _ in b.tag)  # type: ignore[attr-defined]
    fewer_groups(config, len(results),
                 sum(int(signal_groups(r, filter_values(config, r)).sum()) for r in results),
                 len(drawn))
    return SampledStep(concat_results(results, keep_groups=config.batch_size, config=config),
                       merge_outcomes(outcomes), None, drawn, prompt_indices=indices)


def filter_value(config: TrainConfig) -> Callable[[float, float], float]:
    """One sample's ``dapo_filter_metric`` value from its reward and verifier score (the early
    batches' scheduler decides on arrival)."""
    metric, threshold = config.dapo_filter_metric, config.positive_threshold
    return lambda reward, score: float(signal_values(np.array([reward]), np.array([score]),
                                                     metric, threshold)[0])


def _chained(more_prompts: Callable[[int], Sequence[Prompt]]) -> Iterator[tuple[int, Prompt]]:
    """A caller's further batches 1, 2, ... as one stream of (-1, prompt) (no set index)."""
    for k in itertools.count(1):
        batch = list(more_prompts(k))
        if not batch:
            return
        yield from ((-1, p) for p in batch)


def merge_outcomes(outcomes: Sequence[RoundsOutcome]) -> RoundsOutcome:
    """The batches' outcomes as one, batch k's round statistics numbered round k + 1."""
    return RoundsOutcome(
        generations=[g for o in outcomes for g in o.generations],
        rewards=[r for o in outcomes for r in o.rewards],
        errors=[e for o in outcomes for e in o.errors],
        round_stats=[dataclasses.replace(st, round=k + 1)
                     for k, o in enumerate(outcomes) for st in o.round_stats],
        time_generation=sum(o.time_generation for o in outcomes),
        time_scoring=sum(o.time_scoring for o in outcomes),
        tokens_discarded=sum(o.tokens_discarded for o in outcomes),
        early_rounds_started=sum(o.early_rounds_started for o in outcomes),
        early_rounds_discarded=sum(o.early_rounds_discarded for o in outcomes),
        early_rounds_saved_s=sum(o.early_rounds_saved_s for o in outcomes))


def concat_results(results: Sequence[SamplerResult], keep_groups: int | None = None,
                   config: TrainConfig | None = None) -> SamplerResult:
    """DAPO's step as one ``SamplerResult``: the GRPO results of its batches of prompts, batch k
    (0-based) numbered round k + 1 (so ``sample_round``, ``exit_round`` and the round stats say
    which batch a prompt came in, and ``batch`` says so plainly), prompts in draw order.

    Only groups with signal stay kept, and of those the first ``keep_groups`` in draw order
    (verl's ``filter_groups`` truncates the collected groups to the train batch size the same
    way); every other sample is not kept and its advantage 0. Advantages are each group's own
    (GRPO), so concatenating changes none of them. Signal is read from ``config``'s
    ``dapo_filter_metric`` (without a config: the rewards)."""
    parts = list(results)
    counts = [r.num_prompts for r in parts]
    sizes = [len(r.rewards) for r in parts]
    first_prompt = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    first_sample = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def cat(name: str, dtype: Any, shift: np.ndarray | None = None) -> np.ndarray:
        arrays = [getattr(r, name) + (0 if shift is None else shift[k])
                  for k, r in enumerate(parts)]
        return np.concatenate(arrays).astype(dtype) if parts else np.zeros(0, dtype)

    batch_of = np.repeat(np.arange(len(parts)), counts).astype(np.int64) + 1
    pools = SamplerResult.of_pools(
        num_prompts=sum(counts), sample_prompt=cat("sample_prompt", np.int64, first_prompt),
        sample_pool_index=cat("sample_pool_index", np.int64),
        sample_round=np.repeat(np.arange(len(parts)), sizes).astype(np.int64) + 1,
        sample_order=cat("sample_order", np.int64, first_sample),
        rewards=cat("rewards", np.float64), positive=cat("positive", bool),
        rounds_used=cat("rounds_used", np.int64), exit_round=batch_of,
        missing=[m for r in parts for m in r.missing],
        first_round_positives=cat("first_round_positives", np.int64),
        first_round_samples=cat("first_round_samples", np.int64), batch=batch_of,
        weights=cat("weights", np.float64), estimator=parts[0].estimator if parts else None,
        scores=cat("scores", np.float64))
    signal = signal_groups(pools, None if config is None else filter_values(config, pools))
    chosen = signal.copy()
    if keep_groups is not None:
        chosen &= np.cumsum(signal) <= keep_groups
    kept = cat("kept", bool) & chosen[pools.sample_prompt]
    return pools.with_kept(kept, advantages=None if pools.estimator is not None
                           else np.zeros(len(kept)))


def has_signal(config: TrainConfig, res: SamplerResult) -> bool:
    """Asynchronous DAPO: a finished group enters the ready buffer only with signal (its
    ``dapo_filter_metric`` not all equal); another prompt is admitted in its place."""
    return bool(signal_groups(res, filter_values(config, res)).all())


def dapo_metrics(config: TrainConfig, res: SamplerResult,
                 allocation: Allocation | None) -> dict[str, float]:
    signal = signal_groups(res, filter_values(config, res))
    P = res.num_prompts
    return {"gen_batches": float(res.batch.max()) if P else 0.0,
            "signal_groups": float(signal.sum()),
            "prompts_drawn": float(P),
            # Every group drawn without signal is dropped, passive filtering or not.
            "dropped_groups": float(np.sum(~signal))}


def gen_batch_holds_batch(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.dapo_gen_batch_size and c.dapo_gen_batch_size < c.batch_size:
        yield "dapo_gen_batch_size", (f"must be 0 (B) or at least batch_size "
                                      f"({c.batch_size:,}): the first generation batch holds "
                                      f"the step's own B prompts; got {c.dapo_gen_batch_size:,}")


def kl_in_reward_after_filter(c: TrainConfig) -> Iterator[tuple[str, str]]:
    # The filter reads each generation batch as it comes back; the KL in the reward is measured
    # on the step's whole pools after sampling.
    if c.use_kl_in_reward and c.dapo_filter_metric == "seq_final_reward":
        yield "dapo_filter_metric", ("seq_final_reward with use_kl_in_reward: the batches are "
                                     "filtered while sampling, before the KL in the reward is "
                                     "measured; use seq_reward (the same reward without the "
                                     "KL)")


# Its run page's own chart: the batches it drew, the prompts they held and how many groups came
# back with signal, against the B groups the update wants.
SAMPLING_CHART = ChartSpec(
    "dapo_sampling", "Dynamic sampling: batches drawn until B groups carry signal",
    (Panel("batches drawn (batches)",
           (("gen_batches", "batches of G = dapo_gen_batch_size prompts drawn"),),
           # max_num_gen_batches = 0: no limit, no line.
           reference=lambda c: (f"at most max_num_gen_batches = {c.max_num_gen_batches}",
                                c.max_num_gen_batches) if c.max_num_gen_batches else None),
     Panel("prompts (prompts)", (("prompts_drawn", "prompts drawn"),
                                 ("signal_groups", "groups with signal")),
           reference=lambda c: (f"wanted: B = {fmt.count(c.batch_size, 'group')} with signal",
                                c.batch_size))),
    after="signal", tall=True)


DAPO = Algorithm(
    name="dapo", label="DAPO",
    help="DAPO dynamic sampling: GRPO groups of n, groups with all-equal accuracy (or "
         "dapo_filter_metric) dropped, "
         "further batches of prompts drawn until B groups carry signal",
    sampling="batches", sample_step=sample_dapo_step, select_batch=select_dapo_prompts,
    async_ready=has_signal,
    advantage="group", std_normalize=True,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: gen_batch_size(c) * c.group_size * max_gen_batches(c),
    step_shape="dapo_gen_batch_size (0: batch_size) x group_size x max_num_gen_batches (0: "
               "the prompt set's size / dapo_gen_batch_size)",
    options=OPTIONS,
    match_budget=lambda c, budget: {"group_size": budget}, budget_match="batch",
    budget_note="group_size = budget: each generation batch draws budget responses per prompt; "
                "further batches are drawn while fewer than B groups carry signal (at most "
                "max_num_gen_batches), so a step spends that or a multiple of it",
    config_checks=(CrossCheck(("dapo_gen_batch_size", "batch_size"), gen_batch_holds_batch,
                              {"dapo_gen_batch_size": 16}),
                   CrossCheck(("use_kl_in_reward", "dapo_filter_metric"),
                              kl_in_reward_after_filter,
                              {"use_kl_in_reward": True, "backend": "hf",
                               "dapo_filter_metric": "seq_final_reward"})),
    step_metrics={
        "gen_batches": count("generation batches of G prompts drawn this step (1 + further "
                             "batches)", "batches"),
        "signal_groups": count("groups with signal (dapo_filter_metric not all equal) among "
                               "every batch drawn; the update takes the first B", "groups"),
        "prompts_drawn": count("prompts sampled this step over every batch", "prompts")},
    extra_metrics=dapo_metrics, charts=(SAMPLING_CHART,),
    summary_fields=("group_size", "max_num_gen_batches"))
