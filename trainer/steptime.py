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
from trainer.algorithms import baseline, get_algorithm
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
from trainer.schedulers import DEFAULT_SPECULATIVE_CAPACITY

# The algorithms the paper times in its Table 2 (the baseline, GRPO, first).
ALGORITHMS = ("grpo", "ada-pos", "ada-balance", "ada-est")


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

    @property
    def exact_bound_step_s(self) -> float:
        return self.exact_bound_generation_s + self.update_s + self.weight_sync_s

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
        return self.generation_s + self.update_s + self.weight_sync_s


def paper_pass_rates(batch_size: int, alpha: float, beta: float, seed: int) -> list[float]:
    """``batch_size`` pass rates drawn from Beta(alpha, beta), seeded."""
    return np.random.default_rng([seed, seeds.TOOLS, seeds.PASS_RATES]).beta(
        alpha, beta, batch_size).tolist()


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
                       on_step: Any = None) -> StepTime:
    """Simulate ``steps`` steps of one algorithm under one scheduler; the pass rates stay fixed
    (no policy moves), each step draws fresh samples. ``cluster`` spreads the step over its
    GPUs (``trainer.clustertime``); ``engine`` and ``update`` are the 1.5B's constants, scaled
    to ``model`` when it is another. ``early_rounds``: the config's (``auto``: each
    scheduler's default), with ``speculative_capacity`` (None: the config's default)."""
    from trainer.algorithms import choose_batch
    from trainer.backends.simulated import SimulatedBackend
    from trainer.loop import make_scorer, sample_step
    from trainer.types import Prompt

    config = TrainConfig(algorithm=algorithm, scheduler=scheduler, backend="simulated",
                         verifier="exact", group_size=group_size,
                         samples_per_round=samples_per_round, max_rounds=max_rounds,
                         batch_size=len(pass_rates), max_new_tokens=max_tokens, seed=seed,
                         early_rounds=early_rounds,
                         **({} if speculative_capacity is None
                            else {"speculative_capacity": speculative_capacity}))
    config.validate()
    lengths = lengths or LengthModel(max_tokens=max_tokens)
    cluster = cluster or ClusterModel()
    model = model or MODELS["1.5b"]
    engine = engine_time_for(model, engine)
    token_s = update_token_seconds_for(model, (update or UpdateTimeModel()).token_s)
    g = cluster.gpus
    prompts = [Prompt(id=str(i), text=f"simulated prompt {i}", answer="1",
                      metadata={"pass_rate": float(r)}) for i, r in enumerate(pass_rates)]
    backend = SimulatedBackend(config, lengths=dataclasses.replace(lengths, max_tokens=max_tokens),
                               engine_time=engine, engines=g)
    scorer = make_scorer(config)
    state = get_algorithm(algorithm).new_state(config)
    sync = (weight_gather_seconds(model, cluster, bucket_mb), engine_load_seconds(model, cluster))
    rows = []
    early = []
    for step in range(1, steps + 1):
        before = backend.sim_seconds
        # The batch the algorithm selects (every prompt unless it selects fewer than B of
        # them), in the pass rates' order.
        chosen = sorted(choose_batch(config, prompts, step, state=state))
        sampled = sample_step(config, [prompts[i] for i in chosen], backend, scorer, step,
                              state, prompt_set=prompts, batch_indices=chosen)
        res, outcome = sampled.result, sampled.outcome
        lens = np.array([len(g.response_token_ids) for gs in outcome.generations for g in gs],
                        dtype=np.float64)
        kept = lens[res.kept]
        tokens = kept.sum() + len(kept) * engine.prompt_tokens
        # The kept batch is split over the ranks balanced by tokens; FSDP2 prefetches the next
        # layer's all-gather during this one's compute, so the collectives cost only what the
        # compute cannot hide.
        compute = token_s * tokens / g
        comm = cluster.collective_seconds(
            update_comm_bytes(model, micro_batches(tokens, g, mini_batches, micro_batch_tokens)))
        rows.append((len(lens), lens.sum() + outcome.tokens_discarded, outcome.tokens_discarded,
                     kept.mean() if len(kept) else 0.0, backend.sim_seconds - before,
                     max(compute, comm), comm, *sync))
        early.append((outcome.early_rounds_started, outcome.early_rounds_discarded,
                      outcome.early_rounds_saved_s,
                      all_at_once_seconds(backend, sampled.prompts, outcome.generations)))
        if on_step is not None:
            on_step()
    means = np.asarray(rows, dtype=np.float64).mean(axis=0).tolist()
    started, discarded, saved, bound = np.asarray(early, dtype=np.float64).mean(axis=0).tolist()
    return StepTime(algorithm, scheduler, *means, gpus=g, early_rounds=config.early_rounds_mode,
                    early_rounds_started=started, early_rounds_discarded=discarded,
                    early_rounds_saved_s=saved, exact_bound_generation_s=bound)


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
             "step (s) | step / GRPO round |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r.algorithm} | {r.label} | {r.samples:.0f} | "
                     f"{r.tokens_generated / 1e6:.2f} | {r.tokens_discarded / 1e6:.2f} | "
                     f"{r.discarded_share:.1%} | {r.early_rounds_started:.0f} | "
                     f"{r.early_rounds_discarded:.0f} | "
                     f"{r.exact_bound_step_s / base_s:.2f}x | "
                     f"{r.kept_response_length:.0f} | {r.generation_s:.1f} | {r.update_s:.1f} | "
                     f"{min(r.update_comm_s, r.update_s):.2f} | {r.weight_sync_s:.2f} | "
                     f"{r.weight_sync_s / r.step_s:.1%} | {r.step_s:.1f} | "
                     f"{ratios[(r.algorithm, r.label)]:.2f}x |")
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
    parser.add_argument("--steps", type=int, default=2,
                        help="simulated steps per algorithm and scheduler (default 2)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                        help="comma-separated, of the registered algorithms "
                        f"({', '.join(REGISTERED_NAMES)}; default the paper's Table 2: "
                        f"{','.join(ALGORITHMS)})")
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
    parser.add_argument("--engine", action="append", default=[], metavar="FIELD=VALUE",
                        help="an EngineTimeModel constant, e.g. --engine max_num_seqs=256 "
                        "(repeatable): " + ", ".join(f.name for f in
                                                     dataclasses.fields(EngineTimeModel)))
    parser.add_argument("--length", action="append", default=[], metavar="FIELD=VALUE",
                        help="a LengthModel constant: correct, wrong (median fractions of "
                        "--max-tokens), spread (repeatable)")
    parser.add_argument("--update-token-s", type=float, default=UpdateTimeModel.token_s,
                        help="update seconds per kept token (default "
                        f"{UpdateTimeModel.token_s:g})")
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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _constants(items: Sequence[str], cls: type, flag: str) -> dict[str, Any]:
    from trainer.cli import parse_overrides

    values = parse_overrides(items)
    known = {f.name: f.type for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(flag, f"unknown constant {key!r}; choose one of "
                              f"{', '.join(known)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(flag, f"{key} must be a number >= 0, got {value!r}")
        if known[key] == "int":
            if value != int(value) or value < 1:
                raise ConfigError(flag, f"{key} must be a whole number >= 1, got {value!r}")
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


def run_cli(args: argparse.Namespace) -> int:
    try:
        inputs = _inputs(args)
    except ConfigError as exc:
        flag = exc.field.replace("_", "-")
        print(f"error: {flag}: {exc.reason}", file=sys.stderr)
        return 2
    results = study(inputs.rates, algorithms=inputs.algorithms, schedulers=inputs.schedulers,
                    early_rounds=inputs.early_rounds,
                    speculative_capacity=args.speculative_capacity,
                    progress=not args.no_progress, group_size=args.group_size,
                    samples_per_round=args.samples_per_round, max_rounds=args.max_rounds,
                    max_tokens=args.max_tokens, steps=args.steps, seed=args.seed,
                    lengths=inputs.lengths, engine=inputs.engine,
                    update=UpdateTimeModel(token_s=args.update_token_s), cluster=inputs.cluster,
                    model=MODELS[args.model], mini_batches=args.mini_batches,
                    micro_batch_tokens=args.micro_batch_tokens, bucket_mb=args.bucket_mb)
    memory = rank_memory(
        MODELS[args.model], args.gpus, micro_batch_tokens=args.micro_batch_tokens,
        concurrent_sequences=min(inputs.engine.max_num_seqs,
                                 -(-len(inputs.rates) * args.samples_per_round // args.gpus)),
        sequence_tokens=inputs.engine.prompt_tokens + args.max_tokens,
        activation_checkpointing=not args.no_activation_checkpointing)
    if args.json:
        print(json.dumps(_json_report(args, inputs, results, memory)))
    else:
        _print_report(args, inputs, results, memory)
    return 0


def _inputs(args: argparse.Namespace) -> _Inputs:
    """The flags checked, in the order a user reads them; a ``ConfigError`` names the flag."""
    from trainer.cli import read_pass_rates

    if args.pass_rates:
        rates = read_pass_rates(args.pass_rates)
    else:
        try:
            a, b = (float(x) for x in args.beta.split(","))
        except ValueError:
            raise ConfigError("beta", f"expected A,B (two numbers), got {args.beta!r}") from None
        if a <= 0 or b <= 0:
            raise ConfigError("beta", "A and B must be > 0")
        if args.batch_size < 1:
            raise ConfigError("batch-size", f"must be >= 1, got {args.batch_size}")
        rates = paper_pass_rates(args.batch_size, a, b, args.seed)
    if args.steps < 1:
        raise ConfigError("steps", f"must be >= 1, got {args.steps}")
    if args.max_tokens < 1:
        raise ConfigError("max-tokens", f"must be >= 1, got {args.max_tokens}")
    # Any registered algorithm; the paper's by default.
    algorithms = _names(args.algorithms, list(REGISTERED_NAMES), "algorithms")
    if baseline().name not in algorithms:
        algorithms.insert(0, baseline().name)  # the ratios' baseline
    schedulers = _names(args.schedulers, SCHEDULERS, "schedulers")
    if "round" not in schedulers:
        schedulers.insert(0, "round")
    early_rounds = _names(args.early_rounds, EARLY_ROUNDS_CHOICES, "early_rounds")
    if not 0 < args.speculative_capacity <= 1:
        raise ConfigError("speculative_capacity", f"must be within (0, 1], got "
                          f"{args.speculative_capacity:g}")
    engine = EngineTimeModel(**_constants(args.engine, EngineTimeModel, "engine"))
    length_values = _constants(args.length, LengthModel, "length")
    if "max_tokens" in length_values:
        raise ConfigError("length", "set the longest response with --max-tokens")
    lengths = LengthModel(max_tokens=args.max_tokens, **length_values)
    cluster = _cluster(args, len(rates))
    for name in ("correct", "wrong"):
        if not 0 < getattr(lengths, name) <= 1:
            raise ConfigError("length", f"{name} must be within (0, 1]")
    # Each algorithm's config checks (Seq: M >= n, ...) before minutes of simulation.
    for algorithm in algorithms:
        TrainConfig(algorithm=algorithm, backend="simulated", group_size=args.group_size,
                    samples_per_round=args.samples_per_round, max_rounds=args.max_rounds,
                    batch_size=len(rates)).validate()
    return _Inputs(rates, algorithms, schedulers, early_rounds, engine, lengths, cluster)


def _cluster(args: argparse.Namespace, batch_size: int) -> ClusterModel:
    cluster_values = _constants(args.cluster, ClusterModel, "cluster")
    if {"gpus", "nodes"} & set(cluster_values):
        raise ConfigError("cluster", "set GPUs and machines with --gpus and --nodes")
    for flag in ("gpus", "nodes", "mini_batches", "micro_batch_tokens", "bucket_mb"):
        if getattr(args, flag) < 1:
            raise ConfigError(flag, f"must be >= 1, got {getattr(args, flag)}")
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
            "update_token_s": args.update_token_s,
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
                         "ratio_to_grpo": ratios[(r.algorithm, r.label)]}
                        for r in results]}


def _print_report(args: argparse.Namespace, inputs: _Inputs, results: Sequence[StepTime],
                  memory: Any) -> None:
    where = (f"{args.gpus} GPU{'s' if args.gpus > 1 else ''}"
             + (f" on {args.nodes} machines" if args.nodes > 1 else ""))
    print(f"{MODELS[args.model].name} on {where}; B = {len(inputs.rates)}, "
          f"n = {args.group_size}, M = {args.samples_per_round}, N = {args.max_rounds}, "
          f"responses up to {args.max_tokens} tokens; means over {args.steps} simulated "
          "steps\n")
    print(table(results))
    print(f"\nMemory per rank (GiB; activation checkpointing "
          f"{'off' if args.no_activation_checkpointing else 'on'}, micro-batches of "
          f"{args.micro_batch_tokens} tokens, KV cache for "
          f"{memory.kv_cache / memory.kv_per_sequence:.0f} full-length sequences at "
          "once):\n")
    print(memory_table([memory], inputs.cluster.hbm_gib))
