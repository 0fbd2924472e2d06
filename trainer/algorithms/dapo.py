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
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import seeds
from trainer.advantages import signal_groups
from trainer.algorithms.base import (
    Algorithm,
    CrossCheck,
    SampledStep,
    StepContext,
    sample_rounds,
)
from trainer.types import count
from trainer.visits import PromptVisits, own_batches_after

if TYPE_CHECKING:
    from trainer.allocation import Allocation
    from trainer.config import TrainConfig
    from trainer.sampler import SamplerResult
    from trainer.schedulers import RoundsOutcome
    from trainer.types import Prompt, RoundStat


FURTHER_PROMPTS = ("unseen-first", "any")


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


def sample_dapo_step(ctx: StepContext) -> SampledStep:
    """Batches of G prompts until B groups carry signal or ``max_num_gen_batches`` were drawn
    (batch 0: the step's own B prompts, topped up to G); batch k's rounds are numbered round
    k + 1 (round statistics, ``exit_round``)."""
    config = ctx.config
    B, G = config.batch_size, gen_batch_size(config)
    indices: list[int] | None = None
    if ctx.more_prompts is not None:
        stream = _chained(ctx.more_prompts)
    elif ctx.prompt_set:
        order = further_prompt_order(
            len(ctx.prompt_set), B, config.seed, ctx.step, visits=ctx.visits,
            mode=config.dapo_further_prompts, last_step=config.total_steps)
        stream = iter([(i, ctx.prompt_set[i]) for i in order])
        indices = list(seeds.batch_indices(len(ctx.prompt_set), B, config.seed, ctx.step))
    else:
        stream = iter(())
    results: list[SamplerResult] = []
    outcomes: list[RoundsOutcome] = []
    drawn: list[Prompt] = []

    def next_batch(k: int) -> tuple[list[Prompt], list[tuple[int, Prompt]], int, int,
                                    Callable[[RoundStat], None]] | None:
        more = list(itertools.islice(stream, G - B if k == 0 else G))
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
    from trainer.sampler import make_sampler
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
    from trainer.schedulers import RoundsOutcome

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
    which batch a prompt came in), prompts in draw order.

    Only groups with signal stay kept, and of those the first ``keep_groups`` in draw order
    (verl's ``filter_groups`` truncates the collected groups to the train batch size the same
    way); every other sample is not kept and its advantage 0. Advantages are each group's own
    (GRPO), so concatenating changes none of them."""
    from trainer.sampler import SamplerResult

    parts = list(results)
    counts = [r.num_prompts for r in parts]
    offsets = np.concatenate([[0], np.cumsum([int(r.offsets[-1]) for r in parts])]
                             ).astype(np.int64)
    first_prompt = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(r, name) for r in parts]) if parts else np.zeros(0)

    sample_prompt = np.concatenate(
        [r.sample_prompt + first_prompt[k] for k, r in enumerate(parts)]
    ).astype(np.int64) if parts else np.zeros(0, np.int64)
    signal = np.concatenate([signal_groups(r) for r in parts]) if parts \
        else np.zeros(0, bool)
    chosen = signal.copy()
    if keep_groups is not None:
        chosen &= np.cumsum(signal) <= keep_groups
    kept = cat("kept").astype(bool) & chosen[sample_prompt]
    advantages = np.where(kept, cat("advantages"), 0.0)
    batch_of = np.repeat(np.arange(len(parts)), counts).astype(np.int64)
    kept_pos = np.where(chosen, cat("kept_positives"), 0).astype(np.int64)
    kept_neg = np.where(chosen, cat("kept_negatives"), 0).astype(np.int64)
    return SamplerResult(
        sample_prompt=sample_prompt,
        sample_pool_index=cat("sample_pool_index").astype(np.int64),
        sample_round=np.concatenate([np.full(int(r.offsets[-1]), k + 1, np.int64)
                                     for k, r in enumerate(parts)]) if parts
        else np.zeros(0, np.int64),
        sample_order=np.concatenate([r.sample_order + offsets[k] for k, r in enumerate(parts)]
                                    ).astype(np.int64) if parts else np.zeros(0, np.int64),
        rewards=cat("rewards").astype(np.float64), positive=cat("positive").astype(bool),
        kept=kept, advantages=advantages, samples=cat("samples").astype(np.int64),
        positives=cat("positives").astype(np.int64), negatives=cat("negatives").astype(np.int64),
        rounds_used=cat("rounds_used").astype(np.int64), exit_round=batch_of + 1,
        missing=[m for r in parts for m in r.missing], baseline=cat("baseline"),
        kept_positives=kept_pos, kept_negatives=kept_neg,
        first_round_positives=cat("first_round_positives").astype(np.int64),
        first_round_samples=cat("first_round_samples").astype(np.int64),
        offsets=np.concatenate([[0], np.cumsum(cat("samples"))]).astype(np.int64))


def dapo_metrics(config: TrainConfig, res: SamplerResult,
                 allocation: Allocation | None) -> dict[str, float]:
    signal = signal_groups(res)
    P = res.num_prompts
    return {"gen_batches": float(res.exit_round.max()) if P else 0.0,
            "signal_groups": float(signal.sum()),
            "prompts_drawn": float(P),
            # Every group drawn without signal is dropped, passive filtering or not.
            "dropped_groups": float(np.sum(~signal))}


def gen_batch_holds_batch(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.dapo_gen_batch_size and c.dapo_gen_batch_size < c.batch_size:
        yield "dapo_gen_batch_size", (f"must be 0 (B) or at least batch_size "
                                      f"({c.batch_size:,}): the first generation batch holds "
                                      f"the step's own B prompts; got {c.dapo_gen_batch_size:,}")


DAPO = Algorithm(
    name="dapo", label="DAPO",
    help="DAPO dynamic sampling: GRPO groups of n, groups with all-equal rewards dropped, "
         "further batches of prompts drawn until B groups carry signal",
    sampling="batches", sample_step=sample_dapo_step,
    advantage="group", std_normalize=True,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: gen_batch_size(c) * c.group_size * c.max_num_gen_batches,
    step_shape="dapo_gen_batch_size (0: batch_size) x group_size x max_num_gen_batches",
    config_checks=(CrossCheck(("dapo_gen_batch_size", "batch_size"), gen_batch_holds_batch,
                              {"dapo_gen_batch_size": 16}),),
    step_metrics={
        "gen_batches": count("generation batches of G prompts drawn this step (1 + further "
                             "batches)", "batches"),
        "signal_groups": count("groups with signal (rewards not all equal) among every batch "
                               "drawn; the update takes the first B", "groups"),
        "prompts_drawn": count("prompts sampled this step over every batch", "prompts")},
    extra_metrics=dapo_metrics,
    summary_fields=("group_size", "max_num_gen_batches"))
