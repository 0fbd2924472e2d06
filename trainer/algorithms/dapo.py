"""DAPO's dynamic sampling (Yu et al., 2025; verl's ``filter_groups``): one GRPO round of n per
prompt of a generation batch; groups whose rewards are all equal are dropped; while fewer than B
groups carry signal and fewer than ``max_num_gen_batches`` batches were drawn, the next batch of
prompts is drawn. The step trains on the first B groups with signal, with GRPO's advantage.

Deliberate differences from verl (docs/paper-fidelity.md): where verl raises once the batches
run out, a step here trains on the groups it has (fewer than B; none leaves the update empty)
and records how many batches it drew; a generation batch holds ``dapo_gen_batch_size`` prompts
(default B; the recipe's 3B in configs/paper-dapo.toml); and further batches come from the rest
of the prompt set (``further_prompt_order``: unseen prompts first by default), so every step
keeps its own batch (the same prompts as a GRPO run of the same seed) and a resumed run draws
exactly the same ones."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import formatting as fmt
from trainer import seeds
from trainer.advantages import signal_groups
from trainer.algorithms.base import Algorithm, BatchContext, SampledStep, StepContext, own_batch
from trainer.algorithms.sampling import sample_rounds
from trainer.charts import ChartSpec, Panel
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
# DAPO's options: keys of every run's config (the names and the stored JSON of the config fields
# they were before), read by DAPO alone.
OPTIONS = (
    Option("max_num_gen_batches", 10, "dapo: batches of B prompts drawn at most per step while "
           "fewer than B groups carry signal (verl's max_num_gen_batches); the step then trains "
           "on what it has.", "batches", ge=1, le=100, group="algorithm"),
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
    for k in range(config.max_num_gen_batches):
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
        with_signal += int(signal_groups(res).sum())
        if with_signal >= B:
            break
    return SampledStep(concat_results(results, keep_groups=B), merge_outcomes(outcomes), None,
                       drawn, prompt_indices=indices)


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

    rule = BatchRule(target=config.batch_size, max_batches=config.max_num_gen_batches,
                     counts=group_signal_bounds)
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
    return SampledStep(concat_results(results, keep_groups=config.batch_size),
                       merge_outcomes(outcomes), None, drawn, prompt_indices=indices)


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


def concat_results(results: Sequence[SamplerResult], keep_groups: int | None = None
                   ) -> SamplerResult:
    """DAPO's step as one ``SamplerResult``: the GRPO results of its batches of prompts, batch k
    (0-based) numbered round k + 1 (so ``sample_round``, ``exit_round`` and the round stats say
    which batch a prompt came in, and ``batch`` says so plainly), prompts in draw order.

    Only groups with signal stay kept, and of those the first ``keep_groups`` in draw order
    (verl's ``filter_groups`` truncates the collected groups to the train batch size the same
    way); every other sample is not kept and its advantage 0. Advantages are each group's own
    (GRPO), so concatenating changes none of them."""
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
        weights=cat("weights", np.float64), estimator=parts[0].estimator if parts else None)
    signal = signal_groups(pools)
    chosen = signal.copy()
    if keep_groups is not None:
        chosen &= np.cumsum(signal) <= keep_groups
    kept = cat("kept", bool) & chosen[pools.sample_prompt]
    return pools.with_kept(kept, advantages=None if pools.estimator is not None
                           else np.zeros(len(kept)))


def dapo_metrics(config: TrainConfig, res: SamplerResult,
                 allocation: Allocation | None) -> dict[str, float]:
    signal = signal_groups(res)
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


# Its run page's own chart: the batches it drew, the prompts they held and how many groups came
# back with signal, against the B groups the update wants.
SAMPLING_CHART = ChartSpec(
    "dapo_sampling", "Dynamic sampling: batches drawn until B groups carry signal",
    (Panel("batches drawn (batches)", (("gen_batches", "batches of B prompts drawn"),),
           reference=lambda c: (f"at most max_num_gen_batches = {c.max_num_gen_batches}",
                                c.max_num_gen_batches)),
     Panel("prompts (prompts)", (("prompts_drawn", "prompts drawn"),
                                 ("signal_groups", "groups with signal")),
           reference=lambda c: (f"wanted: B = {fmt.count(c.batch_size, 'group')} with signal",
                                c.batch_size))),
    after="signal", tall=True)


DAPO = Algorithm(
    name="dapo", label="DAPO",
    help="DAPO dynamic sampling: GRPO groups of n, groups with all-equal rewards dropped, "
         "further batches of prompts drawn until B groups carry signal",
    sampling="batches", sample_step=sample_dapo_step, select_batch=select_dapo_prompts,
    advantage="group", std_normalize=True,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: gen_batch_size(c) * c.group_size * c.max_num_gen_batches,
    step_shape="dapo_gen_batch_size (0: batch_size) x group_size x max_num_gen_batches",
    options=OPTIONS,
    config_checks=(CrossCheck(("dapo_gen_batch_size", "batch_size"), gen_batch_holds_batch,
                              {"dapo_gen_batch_size": 16}),),
    step_metrics={
        "gen_batches": count("generation batches of G prompts drawn this step (1 + further "
                             "batches)", "batches"),
        "signal_groups": count("groups with signal (rewards not all equal) among every batch "
                               "drawn; the update takes the first B", "groups"),
        "prompts_drawn": count("prompts sampled this step over every batch", "prompts")},
    extra_metrics=dapo_metrics, charts=(SAMPLING_CHART,),
    summary_fields=("group_size", "max_num_gen_batches"))
