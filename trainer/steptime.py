"""``python -m trainer simulate-time``: a training step's wall time at the paper's scale, for GRPO
and Reinforce-Ada under each generation scheduler, on the simulated backend's clock.

The step runs the real sampler and the real schedulers (``trainer.schedulers``) on the simulated
backend: Bernoulli rewards from per-prompt pass rates, response lengths from ``LengthModel``,
generation time from ``EngineTimeModel`` (continuous batching, event by event). The update's
time is modelled too (``UpdateTimeModel``: forward and backward over the kept responses), since
the paper's step times include it. Defaults: the paper's B = 512, n = 4, M = 8, N = 4, responses
up to 2048 tokens, a 1.5B model in bf16 on one H100-class GPU; pass rates drawn from
Beta(0.5, 0.5) (``--beta``; or one per line from ``--pass-rates``). docs/schedulers.md explains
the constants and compares the result with the paper's Table 2.

``--gpus G --nodes K`` puts the step on ``G`` GPUs over ``K`` machines as a ``world_size = G``
run: ``G`` data-parallel engines (each prompt on one), the update split over the ranks by tokens
with FSDP2's collectives, and the weight sync into every engine after it
(``trainer.clustertime``); ``--model 7b`` scales every constant to Qwen2.5-Math-7B.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer import seeds
from trainer.algorithms import GRPO, baseline, get_algorithm
from trainer.asynctime import (
    LAG_ALGORITHMS,
    default_splits,
    lag_study,
    lag_table,
    parse_lags,
    parse_splits,
)
from trainer.clustertime import (
    MODELS,
    ClusterModel,
    ModelShape,
    engine_load_seconds,
    engine_time_for,
    memory_table,
    micro_batches,
    rank_memory,
    update_comm_bytes,
    update_token_seconds_for,
    weight_gather_seconds,
)
from trainer.config import ALGORITHMS as REGISTERED_NAMES
from trainer.config import EARLY_ROUNDS_CHOICES, SCHEDULERS, ConfigError, TrainConfig
from trainer.enginetime import PAPER_MAX_RESPONSE_TOKENS, EngineTimeModel, LengthModel
from trainer.pipelinetime import (
    PAPER_ANCHORS,
    PAPER_MFU,
    PAPER_PIPELINE,
    PAPER_SOLVED_FILTER,
    PipelineModel,
    PipelineTime,
    paper_engine,
    pipeline_time,
    update_token_seconds,
)
from trainer.schedulers import DEFAULT_SPECULATIVE_CAPACITY

# The algorithms the paper times in its Table 2 (the baseline, GRPO, first).
ALGORITHMS = ("grpo", "ada-pos", "ada-balance", "ada-est")
PRESETS = ("bare", "paper")
DAPO_POOL = 10   # prompts DAPO may draw further batches from, in B


@dataclass(frozen=True)
class UpdateTimeModel:
    """Seconds of the policy update: ``token_s`` per token of the kept responses (prompt +
    response). 8 x 1.5e9 FLOPs per token (6N for forward and backward, 2N for the old log-probs'
    forward) at 40% of an H100's 989 dense bf16 TFLOP/s: about 30 microseconds."""

    token_s: float = 3.0e-5


@dataclass
class StepTime:
    """Means over the simulated steps of one (algorithm, scheduler)."""

    algorithm: str
    scheduler: str
    samples: float
    tokens_generated: float       # response tokens of pooled samples plus discarded ones
    tokens_discarded: float
    kept_response_length: float  # tokens
    generation_s: float
    update_s: float              # the slowest rank's forward and backward, collectives overlapped
    update_comm_s: float = 0.0   # FSDP2's all-gathers and reduce-scatters (inside update_s)
    weight_gather_s: float = 0.0
    engine_load_s: float = 0.0
    gpus: int = 1
    # Early rounds (trainer.schedulers.run_per_prompt): the mode, and per step the rounds that
    # went in early, those aborted because their prompt exited, and the largest head start one
    # prompt's chain of rounds gained (simulated seconds).
    early_rounds: str = "off"
    early_rounds_started: float = 0.0
    early_rounds_discarded: float = 0.0
    early_rounds_saved_s: float = 0.0
    # The bound of every exact scheduler: the step's pools drawn with every round each prompt
    # needs submitted at once (as if the exit rounds were known in advance), in seconds.
    exact_bound_generation_s: float = 0.0
    # verl's driver around the step (trainer.pipelinetime; 0 without a pipeline model): its
    # seconds in all and of them the scoring; generate calls per step; KV-cache preemptions.
    pipeline_s: float = 0.0
    scoring_s: float = 0.0
    generate_calls: float = 0.0
    preemptions: float = 0.0
    kept_tokens: float = 0.0     # prompt + response tokens the update trains on
    kept_samples: float = 0.0    # responses the update trains on
    engine_busy_s: float = 0.0   # engine-seconds decoding or prefilling, summed over the engines

    @property
    def exact_bound_step_s(self) -> float:
        return self.exact_bound_generation_s + self.update_s + self.weight_sync_s \
            + self.pipeline_s

    @property
    def label(self) -> str:
        """The scheduler, with its early rounds where there are any: ``per-prompt+certain``."""
        return self.scheduler if self.early_rounds == "off" else \
            f"{self.scheduler}+{self.early_rounds}"

    @property
    def discarded_share(self) -> float:
        """Tokens discarded as a share of the tokens that reached a pool."""
        pooled = self.tokens_generated - self.tokens_discarded
        return self.tokens_discarded / pooled if pooled else 0.0

    @property
    def weight_sync_s(self) -> float:
        return self.weight_gather_s + self.engine_load_s

    @property
    def step_s(self) -> float:
        return self.generation_s + self.update_s + self.weight_sync_s + self.pipeline_s

    @property
    def samples_per_s(self) -> float:
        """Responses drawn per second of step."""
        return self.samples / self.step_s if self.step_s else 0.0


def paper_pass_rates(batch_size: int, alpha: float, beta: float, seed: int,
                     solved_filter: int = 0) -> list[float]:
    """``batch_size`` pass rates drawn from Beta(alpha, beta), seeded. ``solved_filter`` k > 0
    keeps a prompt only if one of k samples at its pass rate was right, as the paper prepared
    its prompts (k = 16): the pass rates then follow Beta(alpha, beta) weighted by
    1 - (1 - p)^k."""
    rng = np.random.default_rng([seed, seeds.TOOLS, seeds.PASS_RATES])
    if not solved_filter:
        return rng.beta(alpha, beta, batch_size).tolist()
    rates: list[float] = []
    while len(rates) < batch_size:
        p = rng.beta(alpha, beta, batch_size)
        kept = p[rng.binomial(solved_filter, p) >= 1]
        rates.extend(kept[:batch_size - len(rates)].tolist())
    return rates


@dataclass
class _Run:
    """What one (algorithm, scheduler) simulation holds across its steps."""

    config: TrainConfig
    backend: Any
    prompts: list[Any]
    scorer: Any
    state: Any
    engine: EngineTimeModel
    token_s: float
    model: ModelShape
    cluster: ClusterModel
    sync: tuple[float, float]
    pipeline: PipelineModel | None
    mini_batches: int
    micro_batch_tokens: int


def update_seconds(tokens: float, token_s: float, model: ModelShape, cluster: ClusterModel,
                   mini_batches: int = 4, micro_batch_tokens: int = 6144) -> tuple[float, float]:
    """(the update's seconds, of which collectives) for ``tokens`` kept tokens on
    ``cluster``'s GPUs: the batch split over the ranks balanced by tokens; FSDP2 prefetches the
    next layer's all-gather during this one's compute, so the collectives cost only what the
    compute cannot hide."""
    g = cluster.gpus
    compute = token_s * tokens / g
    comm = cluster.collective_seconds(
        update_comm_bytes(model, micro_batches(tokens, g, mini_batches, micro_batch_tokens)))
    return max(compute, comm), comm


def simulate_step_time(algorithm: str, scheduler: str, pass_rates: Sequence[float], *,
                       group_size: int = 4, samples_per_round: int = 8, max_rounds: int = 4,
                       max_tokens: int = PAPER_MAX_RESPONSE_TOKENS, steps: int = 2, seed: int = 0,
                       lengths: LengthModel | None = None,
                       engine: EngineTimeModel | None = None,
                       update: UpdateTimeModel | None = None,
                       cluster: ClusterModel | None = None, model: ModelShape | None = None,
                       mini_batches: int = 4, micro_batch_tokens: int = 6144,
                       bucket_mb: int = 64, early_rounds: str = "off",
                       speculative_capacity: float | None = None,
                       pipeline: PipelineModel | None = None,
                       on_step: Any = None) -> StepTime:
    """Simulate ``steps`` steps of one algorithm under one scheduler; the pass rates stay fixed
    (no policy moves), each step draws fresh samples. ``cluster`` spreads the step over its
    GPUs (``trainer.clustertime``); ``engine`` and ``update`` are the 1.5B's constants, scaled
    to ``model`` when it is another. ``early_rounds``: the config's (``auto``: each
    scheduler's default), with ``speculative_capacity`` (None: the config's default).
    ``pipeline``: verl's driver around the step (``trainer.pipelinetime``; None: none)."""
    config = TrainConfig(algorithm=algorithm, scheduler=scheduler, backend="simulated",
                         verifier="exact", group_size=group_size,
                         samples_per_round=samples_per_round, max_rounds=max_rounds,
                         batch_size=len(pass_rates), max_new_tokens=max_tokens, seed=seed,
                         early_rounds=early_rounds,
                         **({} if speculative_capacity is None
                            else {"speculative_capacity": speculative_capacity}))
    config.validate()
    run = _new_run(config, pass_rates, lengths or LengthModel(max_tokens=max_tokens),
                   engine, update, cluster or ClusterModel(), model or MODELS["1.5b"],
                   bucket_mb, pipeline, mini_batches, micro_batch_tokens)
    rows, early = [], []
    for step in range(1, steps + 1):
        row, extra = _simulate_one_step(run, step)
        rows.append(row)
        early.append(extra)
        if on_step is not None:
            on_step()
    means = np.asarray(rows, dtype=np.float64).mean(axis=0).tolist()
    (started, discarded, saved, bound, pipe, scoring, calls, preempted, kept_tokens,
     kept_samples, busy) = np.asarray(early, dtype=np.float64).mean(axis=0).tolist()
    return StepTime(algorithm, scheduler, *means, gpus=run.cluster.gpus,
                    early_rounds=config.early_rounds_mode,
                    early_rounds_started=started, early_rounds_discarded=discarded,
                    early_rounds_saved_s=saved, exact_bound_generation_s=bound,
                    pipeline_s=pipe, scoring_s=scoring, generate_calls=calls,
                    preemptions=preempted, kept_tokens=kept_tokens, kept_samples=kept_samples,
                    engine_busy_s=busy)


def simulate_paper_step(algorithm: str, model: str = "1.5b", *, steps: int = 1,
                        mfu: float = PAPER_MFU, pipeline: PipelineModel = PAPER_PIPELINE,
                        update_model: str | None = None) -> StepTime:
    """``simulate_step_time`` in the paper's setting, as ``--preset paper`` runs it: B = 512 of
    its pass-rate mix (the one-of-16 solved filter), 8 GPUs, verl's driver (``pipeline``), the
    engine at the authors' settings and the update at ``mfu``. ``update_model``: whose update
    throughput the update takes (default ``model``'s)."""
    shape, cluster = MODELS[model], ClusterModel(gpus=8)
    rates = paper_pass_rates(512, 0.5, 0.5, 0, solved_filter=PAPER_SOLVED_FILTER)
    return simulate_step_time(
        algorithm, "round", rates, steps=steps, cluster=cluster, model=shape, pipeline=pipeline,
        engine=paper_engine(EngineTimeModel(), shape, cluster),
        update=UpdateTimeModel(token_s=update_token_seconds(MODELS[update_model or model], mfu)))


def _new_run(config: TrainConfig, pass_rates: Sequence[float], lengths: LengthModel,
             engine: EngineTimeModel | None, update: UpdateTimeModel | None,
             cluster: ClusterModel, model: ModelShape, bucket_mb: int,
             pipeline: PipelineModel | None, mini_batches: int,
             micro_batch_tokens: int) -> _Run:
    from trainer.backends.simulated import SimulatedBackend
    from trainer.loop import make_scorer
    from trainer.types import Prompt

    engine = engine_time_for(model, engine)
    # DAPO draws further batches from prompts the step has not seen: a pool of DAPO_POOL x B,
    # the pass rates repeated (each prompt id its own draws).
    size = len(pass_rates) * (DAPO_POOL if get_algorithm(config.algorithm).sampling == "batches"
                              else 1)
    prompts = [Prompt(id=str(i), text=f"simulated prompt {i}", answer="1",
                      metadata={"pass_rate": float(pass_rates[i % len(pass_rates)])})
               for i in range(size)]
    backend = SimulatedBackend(
        config, lengths=dataclasses.replace(lengths, max_tokens=config.max_new_tokens),
        engine_time=engine, engines=cluster.gpus)
    return _Run(config=config, backend=backend, prompts=prompts, scorer=make_scorer(config),
                state=get_algorithm(config.algorithm).new_state(config), engine=engine,
                token_s=update_token_seconds_for(model, (update or UpdateTimeModel()).token_s),
                model=model, cluster=cluster,
                sync=(weight_gather_seconds(model, cluster, bucket_mb),
                      engine_load_seconds(model, cluster)),
                pipeline=pipeline, mini_batches=mini_batches,
                micro_batch_tokens=micro_batch_tokens)


def _simulate_one_step(run: _Run, step: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """One step: (the StepTime row's leading fields, the extra means: early rounds, the exact
    bound, the pipeline's seconds and its scoring, generate calls, preemptions, kept tokens and
    samples, engine-seconds busy)."""
    from trainer.algorithms import choose_batch
    from trainer.loop import sample_step

    backend, config = run.backend, run.config
    before = backend.sim_seconds
    calls_before, requests_before = len(backend.generate_samples), backend.request_samples
    preempted_before, busy_before = backend.preemptions, backend.engine_busy_s
    # The batch the algorithm selects (every prompt unless it selects fewer than B of them), in
    # the pass rates' order.
    chosen = sorted(choose_batch(config, run.prompts, step, state=run.state))
    sampled = sample_step(config, [run.prompts[i] for i in chosen], backend, run.scorer, step,
                          run.state, prompt_set=run.prompts, batch_indices=chosen)
    res, outcome = sampled.result, sampled.outcome
    lens = np.array([len(g.response_token_ids) for gs in outcome.generations for g in gs],
                    dtype=np.float64)
    kept = lens[res.kept]
    tokens = kept.sum() + len(kept) * run.engine.prompt_tokens
    update_s, comm = update_seconds(tokens, run.token_s, run.model, run.cluster,
                                    run.mini_batches, run.micro_batch_tokens)
    row = (len(lens), lens.sum() + outcome.tokens_discarded, outcome.tokens_discarded,
           kept.mean() if len(kept) else 0.0, backend.sim_seconds - before, update_s, comm,
           *run.sync)
    # Request-engine schedulers (per-prompt, streaming) count as one call per step.
    calls = list(backend.generate_samples[calls_before:])
    if backend.request_samples > requests_before:
        calls.append(backend.request_samples - requests_before)
    pipe = _pipeline_seconds(run, calls, len(kept))
    extra = (outcome.early_rounds_started, outcome.early_rounds_discarded,
             outcome.early_rounds_saved_s,
             all_at_once_seconds(backend, sampled.prompts, outcome.generations),
             pipe.total_s if pipe else 0.0, pipe.scoring_s if pipe else 0.0, len(calls),
             backend.preemptions - preempted_before, tokens, len(kept),
             backend.engine_busy_s - busy_before)
    return row, extra


def _pipeline_seconds(run: _Run, calls: Sequence[int], kept: int) -> PipelineTime | None:
    if run.pipeline is None:
        return None
    record = get_algorithm(run.config.algorithm)
    return pipeline_time(run.pipeline, calls, kept, rescore=record.eliminates,
                         model=run.model, weight_sync_s=sum(run.sync))


def all_at_once_seconds(backend: Any, prompts: Sequence[Any],
                        pools: Sequence[Sequence[Any]]) -> float:
    """Simulated seconds to generate ``pools`` (prompt i's responses) with every request
    submitted at time 0, each prompt on its own engine: what an exact scheduler that knew every
    prompt's exit round in advance would take, the bound of early rounds (no chain of rounds,
    no wait, not one token wasted)."""
    from trainer.enginetime import EventEngine

    engines = [EventEngine(backend.engine_time) for _ in range(backend.engines)]
    for i, (prompt, pool) in enumerate(zip(prompts, pools, strict=True)):
        engine = engines[backend.engine_of(prompt)]
        for j, g in enumerate(pool):
            engine.submit((i, j), len(g.response_token_ids), prompt.id)
    for engine in engines:
        engine.run_to_completion()
    return max(engine.clock for engine in engines)


def study(pass_rates: Sequence[float], *, algorithms: Sequence[str] = ALGORITHMS,
          schedulers: Sequence[str] = SCHEDULERS, early_rounds: Sequence[str] = ("auto",),
          progress: bool = True, **kwargs: Any) -> list[StepTime]:
    """Every (algorithm, scheduler, early rounds) that can run, with a tqdm bar over the
    simulated steps: ``round`` takes only ``off``, an algorithm of one round (GRPO, Est) has no
    next round to draw early, so it runs each scheduler once."""
    from tqdm import tqdm

    steps = int(kwargs.get("steps", 2))
    runs = []
    for a in algorithms:
        record = get_algorithm(a)
        for s in schedulers:
            if record.schedulers is not None and s not in record.schedulers:
                continue
            modes = {"off" if s == "round" or not record.eliminates else
                     TrainConfig(backend="simulated", scheduler=s, early_rounds=e
                                 ).early_rounds_mode: None for e in early_rounds}
            runs.extend((a, s, e) for e in modes)
    with tqdm(total=len(runs) * steps, unit="step", file=sys.stderr, disable=not progress,
              desc="simulated steps") as bar:
        return [simulate_step_time(a, s, pass_rates, early_rounds=e,
                                   on_step=lambda: bar.update(1), **kwargs)
                for a, s, e in runs]


def ratio_to_grpo(results: Sequence[StepTime]) -> dict[tuple[str, str], float]:
    """Each result's step time over round-based GRPO's (the baseline as the paper runs it)."""
    name = baseline().name
    base = next(r.step_s for r in results if r.algorithm == name and r.scheduler == "round")
    return {(r.algorithm, r.label): r.step_s / base for r in results}


def table(results: Sequence[StepTime]) -> str:
    """A Markdown table of the results."""
    ratios = ratio_to_grpo(results)
    name = baseline().name
    base_s = next(r.step_s for r in results if r.algorithm == name and r.scheduler == "round")
    lines = ["| algorithm | scheduler | samples/step | tokens generated (M) | tokens discarded "
             "(M) | discarded / pooled tokens | early rounds started | early rounds discarded | "
             "exact bound / GRPO round | kept response length (tokens) | generation (s) | "
             "update (s) | of which collectives (s) | weight sync (s) | weight sync share | "
             "driver (s) | of which scoring (s) | KV preemptions | "
             "step (s) | samples/s | step / GRPO round |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r.algorithm} | {r.label} | {r.samples:.0f} | "
                     f"{r.tokens_generated / 1e6:.2f} | {r.tokens_discarded / 1e6:.2f} | "
                     f"{r.discarded_share:.1%} | {r.early_rounds_started:.0f} | "
                     f"{r.early_rounds_discarded:.0f} | "
                     f"{r.exact_bound_step_s / base_s:.2f}x | "
                     f"{r.kept_response_length:.0f} | {r.generation_s:.1f} | {r.update_s:.1f} | "
                     f"{min(r.update_comm_s, r.update_s):.2f} | {r.weight_sync_s:.2f} | "
                     f"{r.weight_sync_s / r.step_s:.1%} | {r.pipeline_s:.1f} | "
                     f"{r.scoring_s:.1f} | {r.preemptions:.0f} | {r.step_s:.1f} | "
                     f"{r.samples_per_s:.0f} | {ratios[(r.algorithm, r.label)]:.2f}x |")
    return "\n".join(lines)


# --- CLI ------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, default=512, help="B (default 512)")
    parser.add_argument("--group-size", type=int, default=4, help="n (default 4)")
    parser.add_argument("--samples-per-round", type=int, default=8, help="M (default 8)")
    parser.add_argument("--max-rounds", type=int, default=4, help="N (default 4)")
    parser.add_argument("--max-tokens", type=int, default=PAPER_MAX_RESPONSE_TOKENS,
                        help=f"longest response in tokens (default {PAPER_MAX_RESPONSE_TOKENS})")
    parser.add_argument("--beta", default="0.5,0.5", metavar="A,B",
                        help="pass rates drawn from Beta(A, B) (default 0.5,0.5)")
    parser.add_argument("--pass-rates", metavar="FILE",
                        help="one pass rate per line instead of --beta (B = the line count)")
    parser.add_argument("--steps", type=int, default=None,
                        help="simulated steps per algorithm and scheduler (default 2); with "
                        "--max-policy-lag the updates measured after the pipeline fills "
                        "(default 6)")
    parser.add_argument("--algorithms", default=None,
                        help="comma-separated, of the registered algorithms "
                        f"({', '.join(REGISTERED_NAMES)}; default the paper's Table 2: "
                        f"{','.join(ALGORITHMS)}; with --max-policy-lag "
                        f"{','.join(LAG_ALGORITHMS)})")
    parser.add_argument("--max-policy-lag", default=None, metavar="K[,K...]",
                        help="asynchronous training: generation runs ahead of the update by at "
                        "most K policy versions on --split's GPUs (e.g. 0,1,2; "
                        "trainer/asynctime.py, docs/schedulers.md); reports step time, "
                        "throughput, idle shares and lag per algorithm, split and K")
    parser.add_argument("--split", default=None, metavar="SPLIT[,SPLIT...]",
                        help="with --max-policy-lag: colocated (every GPU generates, then "
                        "trains: synchronous, K = 0 only) or R+T (R GPUs generate, T train, "
                        "R + T = --gpus); default colocated plus 3/4 and 1/2 of the GPUs "
                        "generating (8 GPUs: colocated,6+2,4+4)")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS),
                        help=f"comma-separated (default {','.join(SCHEDULERS)})")
    parser.add_argument("--early-rounds", default="auto",
                        help="comma-separated early-rounds modes of the per-prompt schedulers: "
                        f"{', '.join(EARLY_ROUNDS_CHOICES)} (default auto: certain; round runs "
                        "off only)")
    parser.add_argument("--speculative-capacity", type=float,
                        default=DEFAULT_SPECULATIVE_CAPACITY,
                        help="early rounds speculate while the engine runs fewer requests than "
                        f"this share of max_num_seqs (default {DEFAULT_SPECULATIVE_CAPACITY:g})")
    _add_model_arguments(parser)
    _add_cluster_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The time models' flags: engine, lengths, update, preset and pipeline."""
    parser.add_argument("--engine", action="append", default=[], metavar="FIELD=VALUE",
                        help="an EngineTimeModel constant, e.g. --engine max_num_seqs=256 "
                        "(repeatable): " + ", ".join(f.name for f in
                                                     dataclasses.fields(EngineTimeModel)))
    parser.add_argument("--length", action="append", default=[], metavar="FIELD=VALUE",
                        help="a LengthModel constant: correct, wrong (median fractions of "
                        "--max-tokens), spread (repeatable)")
    parser.add_argument("--update-token-s", type=float, default=None,
                        help="update seconds per kept token of the 1.5B (scaled to --model; "
                        f"default {UpdateTimeModel.token_s:g}, with --preset paper "
                        f"{update_token_seconds(MODELS['1.5b'], PAPER_MFU):.3g}: 10 N FLOPs a "
                        f"token at {PAPER_MFU:.0%} MFU)")
    parser.add_argument("--preset", default="bare", choices=PRESETS,
                        help="bare (default): the engines, the update and the weight sync only; "
                        "paper: also verl's driver as the paper ran it (scoring every response "
                        "one after another, a weight sync and wake/sleep per generate call, the "
                        "kept batch scored again), vLLM's KV-cache limit and chunked prefill, "
                        "the paper's one-of-16 prompt filter; its unmeasured constants are "
                        "fitted to the paper's Table 2 (docs/schedulers.md)")
    parser.add_argument("--solved-filter", type=int, default=None, metavar="K",
                        help="keep a prompt only if one of K samples at its pass rate was right "
                        f"(0: off; default 0, with --preset paper {PAPER_SOLVED_FILTER})")
    parser.add_argument("--pipeline", action="append", default=[], metavar="FIELD=VALUE",
                        help="a PipelineModel constant, e.g. --pipeline score_processes=16 "
                        "(repeatable; adds the pipeline to --preset bare): " + ", ".join(
                            f.name for f in dataclasses.fields(PipelineModel)))


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the step runs: GPUs, machines, the model, the update's shape, lags and splits."""
    parser.add_argument("--gpus", type=int, default=1,
                        help="GPUs the run spans (world_size; default 1): one engine each, the "
                        "update sharded over them")
    parser.add_argument("--nodes", type=int, default=1,
                        help="machines the GPUs are on, the same number on each (default 1)")
    parser.add_argument("--model", default="1.5b", choices=sorted(MODELS),
                        help="the model every constant is scaled to (default 1.5b: "
                        "Qwen2.5-Math-1.5B; 7b: Qwen2.5-Math-7B)")
    parser.add_argument("--mini-batches", type=int, default=4,
                        help="optimiser steps per training step (default 4: B = 512 in "
                        "mini-batches of 128)")
    parser.add_argument("--micro-batch-tokens", type=int, default=6144,
                        help="tokens per micro-batch per GPU (default 6144: the authors' "
                        "actor_ppo_max_token_len)")
    parser.add_argument("--bucket-mb", type=int, default=64,
                        help="weight-sync bucket size in MiB (fsdp_bucket_mb; default 64)")
    parser.add_argument("--cluster", action="append", default=[], metavar="FIELD=VALUE",
                        help="a ClusterModel constant, e.g. --cluster internode_gb_s=25 "
                        "(repeatable): " + ", ".join(f.name for f in dataclasses.fields(
                            ClusterModel) if f.name not in ("gpus", "nodes")))
    parser.add_argument("--no-activation-checkpointing", action="store_true",
                        help="per-rank memory without activation checkpointing")
    parser.add_argument("--lora-rank", type=int, default=0,
                        help="per-rank memory of a LoRA run of this rank on every linear layer "
                        "(lora_rank; default 0: full fine-tuning); the step time is full "
                        "fine-tuning's")


def _constants(items: Sequence[str], cls: type, flag: str) -> dict[str, Any]:
    from trainer.cli import parse_overrides

    values = parse_overrides(items)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(flag, f"unknown constant {key!r}; choose one of "
                              f"{', '.join(fields)}")
        kind, default = fields[key].type, fields[key].default
        if kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(flag, f"{key} must be true or false, got {value!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(flag, f"{key} must be a number >= 0, got {value!r}")
        if kind == "int":
            least = 0 if default == 0 else 1   # 0 turns off a limit that is off by default
            if value != int(value) or value < least:
                raise ConfigError(flag, f"{key} must be a whole number >= {least}, "
                                  f"got {value!r}")
            values[key] = int(value)
    return values


def _names(text: str, allowed: Sequence[str], flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ConfigError(flag, f"unknown {bad[0]!r}; choose from {', '.join(allowed)}"
                          if bad else "give at least one")
    return names


@dataclass
class _Inputs:
    """What ``simulate-time``'s flags ask for, checked."""

    rates: list[float]
    algorithms: list[str]
    schedulers: list[str]
    early_rounds: list[str]
    engine: EngineTimeModel
    lengths: LengthModel
    cluster: ClusterModel
    pipeline: PipelineModel | None
    update_token_s: float
    solved_filter: int


def run_cli(args: argparse.Namespace) -> int:
    try:
        inputs = _inputs(args)
        lag = _lag_inputs(args) if args.max_policy_lag is not None else None
    except ConfigError as exc:
        flag = exc.field.replace("_", "-")
        print(f"error: {flag}: {exc.reason}", file=sys.stderr)
        return 2
    if lag is not None:
        return _run_lag(args, inputs, *lag)
    results = study(inputs.rates, algorithms=inputs.algorithms, schedulers=inputs.schedulers,
                    early_rounds=inputs.early_rounds,
                    speculative_capacity=args.speculative_capacity,
                    progress=not args.no_progress, **_simulation_kwargs(args, inputs))
    memory = rank_memory(
        MODELS[args.model], args.gpus, micro_batch_tokens=args.micro_batch_tokens,
        concurrent_sequences=min(inputs.engine.max_num_seqs,
                                 -(-len(inputs.rates) * args.samples_per_round // args.gpus)),
        sequence_tokens=inputs.engine.prompt_tokens + args.max_tokens,
        activation_checkpointing=not args.no_activation_checkpointing, lora_rank=args.lora_rank)
    if args.json:
        print(json.dumps(_json_report(args, inputs, results, memory)))
    else:
        _print_report(args, inputs, results, memory)
    return 0


def _lag_inputs(args: argparse.Namespace) -> tuple[list[int], list[Any]]:
    """``--max-policy-lag`` and ``--split``, checked; the platform's own loop only (verl's
    driver of ``--preset paper`` is not what the asynchronous trainer runs)."""
    lags = parse_lags(args.max_policy_lag)
    if args.preset != "bare" or args.pipeline:
        raise ConfigError("max-policy-lag", "models the platform's own loop: use it with "
                          "--preset bare and no --pipeline")
    splits = parse_splits(args.split or default_splits(args.gpus), args.gpus)
    if args.nodes != 1:
        raise ConfigError("max-policy-lag", "splits GPUs of one machine: use --nodes 1")
    return lags, splits


def _run_lag(args: argparse.Namespace, inputs: _Inputs, lags: list[int],
             splits: list[Any]) -> int:
    kwargs = _simulation_kwargs(args, inputs)
    del kwargs["steps"], kwargs["pipeline"]
    results = lag_study(inputs.rates, algorithms=inputs.algorithms, lags=lags, splits=splits,
                        steps=_steps(args), progress=not args.no_progress, **kwargs)
    if args.json:
        print(json.dumps({
            "batch_size": len(inputs.rates), "gpus": args.gpus, "model": args.model,
            "max_policy_lag": lags, "splits": [s.label for s in splits],
            "measured_updates": _steps(args),
            "results": [{**dataclasses.asdict(r), "ratio_to_own_sync": r.ratio_to_own_sync,
                         "ratio_to_grpo_sync": r.ratio_to_grpo_sync} for r in results]}))
        return 0
    print(f"{MODELS[args.model].name} on {args.gpus} GPUs; B = {len(inputs.rates)}, "
          f"n = {args.group_size}, M = {args.samples_per_round}, N = {args.max_rounds}, "
          f"responses up to {args.max_tokens} tokens; max_policy_lag "
          f"{','.join(map(str, lags))}; steady state over {_steps(args)} updates after the "
          "pipeline fills (colocated: the synchronous simulator, round scheduler)\n")
    print(lag_table(results))
    return 0


def _steps(args: argparse.Namespace) -> int:
    if args.steps is not None:
        return args.steps
    return 6 if args.max_policy_lag is not None else 2


def _simulation_kwargs(args: argparse.Namespace, inputs: _Inputs) -> dict[str, Any]:
    """``simulate_step_time``'s keyword arguments from the flags."""
    return dict(group_size=args.group_size, samples_per_round=args.samples_per_round,
                max_rounds=args.max_rounds, max_tokens=args.max_tokens, steps=_steps(args),
                seed=args.seed, lengths=inputs.lengths, engine=inputs.engine,
                update=UpdateTimeModel(token_s=inputs.update_token_s), cluster=inputs.cluster,
                model=MODELS[args.model], mini_batches=args.mini_batches,
                micro_batch_tokens=args.micro_batch_tokens, bucket_mb=args.bucket_mb,
                pipeline=inputs.pipeline)


def _rates(args: argparse.Namespace, solved_filter: int) -> list[float]:
    from trainer.cli import read_pass_rates

    if args.pass_rates:
        return read_pass_rates(args.pass_rates)
    try:
        a, b = (float(x) for x in args.beta.split(","))
    except ValueError:
        raise ConfigError("beta", f"expected A,B (two numbers), got {args.beta!r}") from None
    if a <= 0 or b <= 0:
        raise ConfigError("beta", "A and B must be > 0")
    if args.batch_size < 1:
        raise ConfigError("batch-size", f"must be >= 1, got {args.batch_size}")
    return paper_pass_rates(args.batch_size, a, b, args.seed, solved_filter=solved_filter)


def _inputs(args: argparse.Namespace) -> _Inputs:
    """The flags checked, in the order a user reads them; a ``ConfigError`` names the flag."""
    paper = args.preset == "paper"
    solved_filter = args.solved_filter if args.solved_filter is not None else \
        (PAPER_SOLVED_FILTER if paper else 0)
    if solved_filter < 0:
        raise ConfigError("solved-filter", f"must be >= 0, got {solved_filter}")
    rates = _rates(args, solved_filter)
    if _steps(args) < 1:
        raise ConfigError("steps", f"must be >= 1, got {_steps(args)}")
    if args.split is not None and args.max_policy_lag is None:
        raise ConfigError("split", "goes with --max-policy-lag")
    if args.max_tokens < 1:
        raise ConfigError("max-tokens", f"must be >= 1, got {args.max_tokens}")
    # Any registered algorithm; the paper's by default (issue 29's with --max-policy-lag).
    default = LAG_ALGORITHMS if args.max_policy_lag is not None else ALGORITHMS
    algorithms = _names(args.algorithms or ",".join(default), list(REGISTERED_NAMES),
                        "algorithms")
    if baseline().name not in algorithms:
        algorithms.insert(0, baseline().name)  # the ratios' baseline
    schedulers = _names(args.schedulers, SCHEDULERS, "schedulers")
    if "round" not in schedulers:
        schedulers.insert(0, "round")
    early_rounds = _names(args.early_rounds, EARLY_ROUNDS_CHOICES, "early_rounds")
    if not 0 < args.speculative_capacity <= 1:
        raise ConfigError("speculative_capacity", f"must be within (0, 1], got "
                          f"{args.speculative_capacity:g}")
    cluster = _cluster(args, len(rates))
    engine, lengths, pipeline, token_s = _time_models(args, cluster)
    # Each algorithm's config checks (Seq: M >= n, ...) before minutes of simulation.
    for algorithm in algorithms:
        TrainConfig(algorithm=algorithm, backend="simulated", group_size=args.group_size,
                    samples_per_round=args.samples_per_round, max_rounds=args.max_rounds,
                    batch_size=len(rates)).validate()
    return _Inputs(rates, algorithms, schedulers, early_rounds, engine, lengths, cluster,
                   pipeline, token_s, solved_filter)


def _time_models(args: argparse.Namespace, cluster: ClusterModel
                 ) -> tuple[EngineTimeModel, LengthModel, PipelineModel | None, float]:
    """The engine, length and pipeline models and the update's seconds per token, from the
    preset and the ``--engine``, ``--length``, ``--pipeline`` and ``--update-token-s`` flags."""
    paper = args.preset == "paper"
    engine = EngineTimeModel(**_constants(args.engine, EngineTimeModel, "engine"))
    if paper:
        engine = paper_engine(engine, MODELS[args.model], cluster)
    if engine.kv_capacity_tokens and engine.kv_capacity_tokens < \
            engine.prompt_tokens + args.max_tokens:
        raise ConfigError("engine", f"kv_capacity_tokens {engine.kv_capacity_tokens} cannot hold "
                          f"one full-length sequence ({engine.prompt_tokens} + "
                          f"{args.max_tokens} tokens)")
    length_values = _constants(args.length, LengthModel, "length")
    if "max_tokens" in length_values:
        raise ConfigError("length", "set the longest response with --max-tokens")
    lengths = LengthModel(max_tokens=args.max_tokens, **length_values)
    for name in ("correct", "wrong"):
        if not 0 < getattr(lengths, name) <= 1:
            raise ConfigError("length", f"{name} must be within (0, 1]")
    pipeline_values = _constants(args.pipeline, PipelineModel, "pipeline")
    pipeline = None
    if paper or pipeline_values:
        pipeline = dataclasses.replace(PAPER_PIPELINE if paper else PipelineModel(),
                                       **pipeline_values)
    token_s = args.update_token_s
    if token_s is None:
        token_s = update_token_seconds(MODELS["1.5b"], PAPER_MFU) if paper else \
            UpdateTimeModel.token_s
    if token_s <= 0:
        raise ConfigError("update-token-s", f"must be > 0, got {token_s:g}")
    return engine, lengths, pipeline, token_s


def _cluster(args: argparse.Namespace, batch_size: int) -> ClusterModel:
    cluster_values = _constants(args.cluster, ClusterModel, "cluster")
    if {"gpus", "nodes"} & set(cluster_values):
        raise ConfigError("cluster", "set GPUs and machines with --gpus and --nodes")
    for flag in ("gpus", "nodes", "mini_batches", "micro_batch_tokens", "bucket_mb"):
        if getattr(args, flag) < 1:
            raise ConfigError(flag, f"must be >= 1, got {getattr(args, flag)}")
    if not 0 <= args.lora_rank <= 1024:  # lora_rank's bounds (trainer.config)
        raise ConfigError("lora_rank", f"must be within [0, 1,024], got {args.lora_rank}")
    if args.gpus % args.nodes:
        raise ConfigError("nodes", f"{args.gpus} GPUs do not split evenly over "
                          f"{args.nodes} machines")
    if args.gpus > batch_size:
        raise ConfigError("gpus", f"more GPUs ({args.gpus}) than prompts per step "
                          f"({batch_size}): an engine would have nothing to draw")
    return ClusterModel(gpus=args.gpus, nodes=args.nodes, **cluster_values)


def _json_report(args: argparse.Namespace, inputs: _Inputs, results: Sequence[StepTime],
                 memory: Any) -> dict[str, Any]:
    ratios = ratio_to_grpo(results)
    return {"batch_size": len(inputs.rates), "group_size": args.group_size,
            "samples_per_round": args.samples_per_round,
            "max_rounds": args.max_rounds, "max_tokens": args.max_tokens,
            "engine": dataclasses.asdict(inputs.engine),
            "lengths": dataclasses.asdict(inputs.lengths),
            "update_token_s": inputs.update_token_s,
            "preset": args.preset, "solved_filter": inputs.solved_filter,
            "pipeline": dataclasses.asdict(inputs.pipeline) if inputs.pipeline else None,
            "anchors": _anchor_rows(args, inputs, results),
            "model": dataclasses.asdict(MODELS[args.model]),
            "cluster": dataclasses.asdict(inputs.cluster),
            "memory_per_rank_gib": {**dataclasses.asdict(memory),
                                    "training": memory.training,
                                    "generation": memory.generation,
                                    "peak": memory.peak},
            "results": [{**dataclasses.asdict(r), "step_s": r.step_s,
                         "weight_sync_s": r.weight_sync_s,
                         "discarded_share": r.discarded_share,
                         "exact_bound_step_s": r.exact_bound_step_s,
                         "samples_per_s": r.samples_per_s,
                         "ratio_to_grpo": ratios[(r.algorithm, r.label)]}
                        for r in results]}


def _anchor_rows(args: argparse.Namespace, inputs: _Inputs,
                 results: Sequence[StepTime]) -> list[dict[str, Any]]:
    """The published figures this run can be compared with: only at the paper's setting (B =
    512, n = 4, M = 8, N = 4, responses up to 2,048 tokens, 8 GPUs on one machine, the round
    scheduler)."""
    setting = (len(inputs.rates), args.group_size, args.samples_per_round, args.max_rounds,
               args.max_tokens, args.gpus, args.nodes)
    if setting != (512, 4, 8, 4, PAPER_MAX_RESPONSE_TOKENS, 8, 1):
        return []
    steps = {r.algorithm: r.step_s for r in results if r.scheduler == "round"}
    rows = []
    for a in PAPER_ANCHORS:
        if a.model != args.model or a.algorithm not in steps:
            continue
        use = "calibration" if a.calibrated else "held out"
        if a.step_s is not None:
            rows.append({"algorithm": a.algorithm, "what": "step", "source": a.source,
                         "use": use, "published": a.step_s, "simulated": steps[a.algorithm],
                         "error": steps[a.algorithm] / a.step_s - 1})
        # The paper states its ratios relative to GRPO's step.
        if a.ratio is not None and a.algorithm != GRPO.name and GRPO.name in steps:
            ratio = steps[a.algorithm] / steps[GRPO.name]
            rows.append({"algorithm": a.algorithm, "what": "ratio", "source": a.source,
                         "use": use, "published": a.ratio, "simulated": ratio,
                         "error": ratio / a.ratio - 1})
    return rows


def _print_report(args: argparse.Namespace, inputs: _Inputs, results: Sequence[StepTime],
                  memory: Any) -> None:
    where = (f"{args.gpus} GPU{'s' if args.gpus > 1 else ''}"
             + (f" on {args.nodes} machines" if args.nodes > 1 else ""))
    print(f"{MODELS[args.model].name} on {where}; B = {len(inputs.rates)}, "
          f"n = {args.group_size}, M = {args.samples_per_round}, N = {args.max_rounds}, "
          f"responses up to {args.max_tokens} tokens; means over {_steps(args)} simulated "
          "steps")
    print("preset paper: verl's driver as the paper ran it, vLLM's KV-cache limit "
          f"({inputs.engine.kv_capacity_tokens:,} tokens an engine) and chunked prefill, "
          f"prompts kept if one of {inputs.solved_filter} samples was right; fitted to the "
          "paper's Table 2 (docs/schedulers.md)\n" if args.preset == "paper" else
          "preset bare: the engines, the update and the weight sync only (--preset paper adds "
          "verl's driver as the paper ran it; docs/schedulers.md)\n")
    print(table(results))
    anchors = _anchor_rows(args, inputs, results)
    if anchors:
        print("\nAgainst the published step times (seconds; ratios to GRPO's step):\n")
        print("| algorithm | source | used for | published | simulated | error |")
        print("| --- | --- | --- | ---: | ---: | ---: |")
        for a in anchors:
            unit = "s" if a["what"] == "step" else "x"
            print(f"| {a['algorithm']} ({a['what']}) | {a['source']} | {a['use']} | "
                  f"{a['published']:.2f} {unit} | {a['simulated']:.2f} {unit} | "
                  f"{a['error']:+.1%} |")
    print(f"\nMemory per rank (GiB; activation checkpointing "
          f"{'off' if args.no_activation_checkpointing else 'on'}, micro-batches of "
          f"{args.micro_batch_tokens} tokens, KV cache for "
          f"{memory.kv_cache / memory.kv_per_sequence:.0f} full-length sequences at "
          "once):\n")
    print(memory_table([memory], inputs.cluster.hbm_gib))
