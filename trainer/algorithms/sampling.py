"""The common way a step samples: prompts through the run's scheduler and a fresh
``AdaptiveSampler``, then the algorithm's keep rule and advantages (``sample_rounds``), with
the step's generation and down-sampling seeds (``sample_batch``). Most records use
``sample_batch`` as their ``sample_step``, or wrap it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from trainer import seeds
from trainer.algorithms.base import SampledStep, StepContext
from trainer.result import SamplerResult
from trainer.sampler import make_sampler
from trainer.schedulers import run_scheduler
from trainer.types import Prompt, RoundsOutcome, RoundStat


def sample_rounds(ctx: StepContext, prompts: Sequence[Prompt], *, downsample_seed: int,
                  generation_seed: int, allocation: Sequence[int] | np.ndarray | None = None,
                  on_round: Callable[[RoundStat], None] | None = None
                  ) -> tuple[SamplerResult | None, RoundsOutcome]:
    """``prompts`` through the run's scheduler and a fresh ``AdaptiveSampler``: the rounds of
    the config's algorithm, then what it keeps and the advantages. A cancelled step comes back
    as (None, outcome)."""
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
