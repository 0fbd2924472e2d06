"""Preflight: measure a policy's pass rates on a few prompts, then predict what each algorithm's
sampling will cost and how much signal it will get, before a run is launched.

1. ``sample_pass_rates``: ``k`` responses for each prompt of a seeded subset, scored with the
   run's verifier (a worker does this with the run's model, backend and generation settings);
2. ``predict``: those pass rates fed to the simulator, the code of ``python -m trainer simulate``
   (``trainer.cli.simulate``), for every registered algorithm (``trainer.algorithms``) at the
   run's B, n, M and N (and GRPO at larger n, the sample-matched baseline); and
   ``predict_at_budget``: every algorithm at one matched budget of responses per prompt
   (``trainer.budget``, a sweep's ``budget``), what each is predicted to spend there;
3. ``preflight_warnings``: pass rates that carry no signal, or a verifier that raises.

A prompt never solved in ``k`` samples is simulated as never solved: with k = 16 a prompt of
pass rate below about 1/16 may look like one. Pure python/numpy: the web process computes
predictions; only sampling needs a backend.

How sure a prediction is: samples per step comes with a 95% interval over the sampled prompts
(``spend_interval``, a bootstrap: the measured prompts drawn again with replacement), the
spread that measuring other prompts of the set could have given. It does not cover what
sampling cannot see: the policy changing while it trains, or each pass rate's own error from
k responses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer import seeds
from trainer.algorithms import algorithms, get_algorithm
from trainer.config import MAX_SEED, ConfigError, TrainConfig
from trainer.types import Prompt

# Each algorithm's record names the group sizes predicted besides the run's own n
# (``Algorithm.preflight_group_sizes``): GRPO's 4, 8 and 16, a larger group being GRPO's answer
# to signal collapse, at a budget comparable to Reinforce-Ada's.
# Warn when at least this fraction of the sampled prompts was never or always solved...
NO_SIGNAL_FRACTION = 0.9
# ... or when the verifier raised on at least this fraction of the responses.
VERIFIER_ERROR_FRACTION = 0.1
# Prompt draws simulated per prediction (the measured prompts repeated with fresh seeds), so that
# the expectation does not depend on one Bernoulli draw per prompt...
SIMULATED_DRAWS = 512
# ... and at most this many simulated responses per algorithm, so that a prediction for a large
# M x N stays a fraction of a second (fewer draws, each still a whole pass over the prompts).
SIMULATED_RESPONSES = 1 << 17
# An algorithm with persistent state (Est allocates from an estimate built over earlier visits)
# is predicted from the second half of this many simulated steps over the same prompts (the first
# half lets the state form; a single step of Est would only show the prior's uniform allocation).
STATEFUL_SIMULATED_STEPS = 10
# The bootstrap of samples per step: the measured prompts drawn again with replacement this many
# times (numpy over the simulated draws already made: no further simulation), and the share of
# the resampled figures its interval holds.
BOOTSTRAP_RESAMPLES = 1000
INTERVAL_LEVEL = 0.95
# The keys of a prediction row that say how sure its samples per step is.
INTERVAL_KEYS = ("samples_per_step_low", "samples_per_step_high", "spend_fixed")
# What the interval means, where it is shown.
INTERVAL_NOTE = (
    "the range that 95% of the bootstrap figures fell in: the sampled prompts drawn again with "
    "replacement 1,000 times, each time the same simulation's samples per group kept for the "
    "update over the prompts drawn. It says how much the figure depends on which prompts of "
    "the set were sampled (fewer prompts: a wider range); it does not cover the policy changing "
    "while it trains (a run that learns solves prompts sooner, and Seq then spends less) nor "
    "each pass rate's own error from k responses. \"exact\": every simulated step spent the "
    "algorithm's fixed budget (GRPO's B x n, Est's B x budget_per_prompt)")

Scorer = Callable[[Prompt, list[str]], tuple[list[float], list[str | None]]]


@dataclass(frozen=True)
class Column:
    """A figure of ``predict``'s rows: its key, its name in a table, its unit ("samples", "x",
    "fraction", "seconds") and what it means, the same for every algorithm's row."""

    key: str
    header: str
    unit: str
    definition: str


PREDICTION_COLUMNS: tuple[Column, ...] = (
    Column("samples_per_step", "samples per step", "samples",
           "responses drawn per step, expected: B x the mean drawn per prompt of the batch "
           "(DAPO's further batches included); beside it, its 95% interval over the sampled "
           "prompts (a bootstrap)"),
    Column("multiple_of_grpo", "x GRPO's B x n", "x",
           "samples per step divided by GRPO's B x n at the run's n"),
    Column("zero_adv_frac", "zero-advantage kept groups", "fraction",
           "of the groups kept for the update, the share whose advantages are all zero (all "
           "rewards equal: no gradient); the step's zero_adv_frac metric"),
    Column("discarded_frac", "groups discarded", "fraction",
           "of the groups drawn, the share left out of the update: DAPO's groups without "
           "signal and those beyond the B it trains on, GVM-RAFT's prompts that accepted "
           "nothing in its first stage (no second stage to train on); the other algorithms "
           "keep every group (down-sampling a pool keeps its group)"),
    Column("unresolved_frac", "unresolved prompts", "fraction",
           "of the prompts drawn, the share whose exit rule still did not hold after the last "
           "round (Seq); algorithms without an exit rule resolve every prompt in its round"),
    Column("missing_pos_frac", "missing positives", "fraction",
           "unresolved for want of positives, as a share of the prompts drawn"),
    Column("missing_neg_frac", "missing negatives", "fraction",
           "unresolved for want of negatives, as a share of the prompts drawn"),
    Column("step_seconds", "step time (generation + scoring)", "seconds",
           "samples per step x the measured generation and scoring seconds per sample; the "
           "policy update is not included"),
)


def choose_prompts(num_available: int, count: int, seed: int) -> list[int]:
    """Indices of a seeded uniform subset of ``count`` prompts (all of them when fewer)."""
    rng = np.random.default_rng([seed, seeds.TOOLS, seeds.PREFLIGHT_PROMPTS])
    if count >= num_available:
        return list(range(num_available))
    return sorted(rng.choice(num_available, size=count, replace=False).tolist())


@dataclass
class PassRateSample:
    """``rewards[i]``: the k rewards of ``prompt_ids[i]``; ``errors[i]``: how many of its
    responses the verifier raised on (scored 0)."""

    prompt_ids: list[str] = field(default_factory=list)
    rewards: list[list[float]] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    tokens: int = 0
    time_generation: float = 0.0
    time_scoring: float = 0.0
    cancelled: bool = False

    @property
    def samples(self) -> int:
        return sum(len(r) for r in self.rewards)


def sample_pass_rates(backend: Any, prompts: Sequence[Prompt], k: int, score: Scorer, *,
                      seed: int, chunk_size: int = 8,
                      on_progress: Callable[[int, PassRateSample], None] | None = None,
                      should_stop: Callable[[], bool] | None = None) -> PassRateSample:
    """Draw ``k`` responses per prompt, ``chunk_size`` prompts per ``backend.generate`` call,
    and score them. ``on_progress(prompts done, sample so far)`` follows every chunk;
    ``should_stop`` is polled before each one (a cancelled sample keeps what it has)."""
    from trainer.seeds import derive_seed

    out = PassRateSample()
    for start in range(0, len(prompts), chunk_size):
        if should_stop is not None and should_stop():
            out.cancelled = True
            break
        chunk = list(prompts[start:start + chunk_size])
        t0 = time.perf_counter()
        drawn = backend.generate(chunk, [k] * len(chunk), seed=derive_seed(seed, start))
        t1 = time.perf_counter()
        for prompt, gens in zip(chunk, drawn, strict=True):
            rewards, errors = score(prompt, [g.text for g in gens])
            out.prompt_ids.append(prompt.id)
            out.rewards.append([float(r) for r in rewards])
            out.errors.append(sum(e is not None for e in errors))
            out.tokens += sum(len(g.response_token_ids) for g in gens)
        out.time_generation += t1 - t0
        out.time_scoring += time.perf_counter() - t1
        if on_progress is not None:
            on_progress(len(out.rewards), out)
    return out


def pass_rates(rewards: Sequence[Sequence[float]], threshold: float = 0.5) -> list[float]:
    """Per prompt: the fraction of its responses whose reward exceeds ``threshold``."""
    return [sum(r > threshold for r in rs) / len(rs) if rs else 0.0 for rs in rewards]


def preflight_warnings(rewards: Sequence[Sequence[float]], errors: Sequence[int],
                       threshold: float = 0.5) -> list[str]:
    """What makes a launch pointless, in words: prompts whose k samples were all negative or all
    positive (no gradient signal for any algorithm's groups), or a verifier that raises."""
    out: list[str] = []
    measured = [rs for rs in rewards if rs]
    if measured:
        never = sum(all(r <= threshold for r in rs) for rs in measured)
        always = sum(all(r > threshold for r in rs) for rs in measured)
        if never + always >= NO_SIGNAL_FRACTION * len(measured):
            k = max(len(rs) for rs in measured)
            out.append(f"Rewards will carry no signal: of {len(measured)} sampled prompts, "
                       f"{never} were never solved and {always} always solved in {k} samples "
                       f"each. Check the model, the prompt set and the answer format first.")
    total = sum(len(rs) for rs in rewards)
    failed = sum(errors)
    if total and failed >= VERIFIER_ERROR_FRACTION * total:
        out.append(f"The verifier raised on {failed} of {total} responses "
                   f"({failed / total:.0%}); they score 0. Check the verifier and the answers.")
    return out


def spend_interval(spent: Sequence[float], kept: Sequence[float], *,
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                   level: float = INTERVAL_LEVEL) -> tuple[float, float] | None:
    """The bootstrap interval of the samples spent per group kept for the update, over prompts.

    ``spent[i]``: the samples all simulated draws of prompt i cost (its further batches' draws
    included); ``kept[i]``: how many of its groups were kept. Each of ``resamples`` resamples
    draws len(spent) prompts with replacement and takes sum(spent) / sum(kept) over them (the
    ratio of sums: DAPO's cost per group with signal, Seq's mean per prompt, where every group
    is kept); the interval is the central ``level`` of those ratios (percentiles). A resample
    with no kept group costs infinitely much per kept group (``inf``). None without prompts or
    with nothing kept at all. Seeded: the same arguments give the same interval."""
    a = np.asarray(spent, dtype=np.float64)
    k = np.asarray(kept, dtype=np.float64)
    if a.size == 0 or k.sum() <= 0:
        return None
    rng = np.random.default_rng([seed, seeds.TOOLS, seeds.PREFLIGHT_BOOTSTRAP])
    # How often each prompt is drawn in each resample (a multinomial of len(a) draws).
    counts = rng.multinomial(a.size, np.full(a.size, 1 / a.size), size=resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (counts @ a) / (counts @ k)
    ratios = np.where(counts @ k > 0, ratios, np.inf)
    tail = (1 - level) / 2
    # Empirical quantiles (no interpolation: a resample may cost ``inf``).
    low, high = np.quantile(ratios, [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)


def variants(group_size: int) -> list[tuple[str, int]]:
    """The (algorithm, n) pairs a preflight predicts: every registered algorithm at the run's n,
    and those with ``preflight_group_sizes`` (GRPO) at those sizes too."""
    return [(a.name, n) for a in algorithms()
            for n in (sorted({group_size, *a.preflight_group_sizes})
                      if a.preflight_group_sizes else [group_size])]


def predict(rates: Sequence[float], *, batch_size: int, group_size: int,
            samples_per_round: int, max_rounds: int, seconds_per_sample: float | None = None,
            seed: int = 0, draws: int = SIMULATED_DRAWS) -> list[dict[str, Any]]:
    """Expected per-step figures of every variant on prompts of pass rates ``rates``.

    Per row, the figures of ``PREDICTION_COLUMNS`` (each defined there, the same for every
    algorithm), ``samples_per_prompt``, and how sure samples per step is:
    ``samples_per_step_low`` / ``_high`` (its ``INTERVAL_LEVEL`` interval over the measured
    prompts: ``spend_interval`` scaled to the step, at most the algorithm's maximum) and
    ``spend_fixed`` (every simulated step spent the algorithm's maximum, its fixed budget: the
    interval is the figure). A variant the simulator rejects comes back with ``error`` set
    instead. The expectation is over ``draws`` simulated prompt draws, fewer when M x N is large
    (at most ``SIMULATED_RESPONSES`` responses).
    """
    if not rates:
        return []
    passes = _passes(rates, draws, samples_per_round * max_rounds, seed)
    rows: list[dict[str, Any]] = []
    for algorithm, n in variants(group_size):
        row: dict[str, Any] = {"algorithm": algorithm, "group_size": n, "error": None}
        try:
            runs, results, steps = _simulate(algorithm, n, passes, max(samples_per_round, n),
                                             max_rounds, seed)
        except (ConfigError, ValueError) as exc:  # e.g. an algorithm without simulator support
            row["error"] = str(exc)
        else:
            row.update(_figures(algorithm, n, runs, results, steps, batch_size=batch_size,
                                group_size=group_size,
                                samples_per_round=max(samples_per_round, n),
                                max_rounds=max_rounds, seconds_per_sample=seconds_per_sample,
                                seed=seed))
        rows.append(row)
    return rows


def predict_at_budget(rates: Sequence[float], *, budget: int, batch_size: int,
                      config: dict[str, Any] | None = None,
                      seconds_per_sample: float | None = None, seed: int = 0,
                      draws: int = SIMULATED_DRAWS) -> list[dict[str, Any]]:
    """Every registered algorithm at ``budget`` responses per prompt (``trainer.budget``),
    predicted on prompts of pass rates ``rates``: what a sweep ``algorithm=...; budget=b``
    launches, each row what that algorithm will spend.

    ``config``: the base the budget is set on (its n, M, the algorithms' options; default the
    config's defaults). Per row: ``algorithm``, ``budget``, ``budget_match`` (exact, cap,
    batch: ``trainer.algorithms.base.BUDGET_MATCHES``), ``budget_note``, ``matched`` (the keys
    the budget set), ``max_samples_per_step`` (the record's bound at them: B x budget for the
    exact and capped, more for DAPO's further batches) and the figures of ``predict``'s rows,
    ``multiple_of_grpo`` against GRPO at n = budget (B x budget); or ``error``: the reason it
    cannot be matched, or not at this budget."""
    from trainer.budget import budget_overrides, check_budget

    budget = check_budget(budget)
    if not rates:
        return []
    base = dict(config or {})
    rows: list[dict[str, Any]] = []
    for record in algorithms():
        row: dict[str, Any] = {"algorithm": record.name, "budget": budget,
                               "budget_match": record.budget_match,
                               "budget_note": record.budget_note, "error": None}
        rows.append(row)
        try:
            matched = budget_overrides({**base, "algorithm": record.name}, budget)
            cfg = TrainConfig.from_stored({**base, **matched, "algorithm": record.name,
                                           "batch_size": batch_size})
            # The simulator's config: the run's shape and the algorithm's own keys, on the
            # simulated backend (the base's model and data are not the simulator's).
            keys = {"K_pos": cfg.K_pos, "K_neg": cfg.K_neg,
                    **{o.name: getattr(cfg, o.name) for o in record.options}, **matched}
            n, m, rounds = cfg.group_size, cfg.samples_per_round, cfg.max_rounds
            passes = _passes(rates, draws, max(m * rounds, cfg.max_samples_per_prompt), seed)
            runs, results, steps = _simulate(record.name, n, passes, m, rounds, seed,
                                             overrides=keys)
        except (ConfigError, ValueError) as exc:
            row["error"] = exc.reason if isinstance(exc, ConfigError) else str(exc)
            continue
        row["matched"] = matched
        row["max_samples_per_step"] = cfg.max_samples_per_step
        row.update(_figures(record.name, n, runs, results, steps, batch_size=batch_size,
                            group_size=budget, samples_per_round=m, max_rounds=rounds,
                            seconds_per_sample=seconds_per_sample, seed=seed,
                            overrides=keys))
    return rows


def _passes(rates: Sequence[float], draws: int, responses_per_prompt: int,
            seed: int) -> list[list[float]]:
    """The prompts' pass rates the simulations draw: whole passes over the prompts while the
    response budget allows; past it, one pass over a seeded random subset (still an unbiased
    estimate of the per-prompt mean, just noisier)."""
    draws = max(1, min(draws, SIMULATED_RESPONSES // max(responses_per_prompt, 16)))
    passes = [list(rates)] * max(1, -(-draws // len(rates)))
    if draws < len(rates):
        rng = np.random.default_rng([seed, seeds.TOOLS, seeds.PREFLIGHT_SUBSET])
        passes = [[rates[i] for i in rng.choice(len(rates), size=draws, replace=False)]]
    return passes


def _simulate(algorithm: str, n: int, passes: list[list[float]], samples_per_round: int,
              max_rounds: int, seed: int, overrides: dict[str, Any] | None = None
              ) -> tuple[list[list[float]], list[dict[str, Any]], int]:
    """(the passes simulated, their results, steps per simulation) of ``algorithm`` at n (and
    ``overrides``: further config keys): one step each, or ``STATEFUL_SIMULATED_STEPS`` for an
    algorithm with persistent state."""
    from trainer.cli import simulate
    from trainer.seeds import derive_seed

    steps = STATEFUL_SIMULATED_STEPS if get_algorithm(algorithm).make_state is not None else 1
    # Counted steps each draw every prompt once: fewer passes give as many draws.
    runs = passes[:max(1, len(passes) // (steps - steps // 2))]
    results = [simulate(algorithm, chosen, group_size=n, samples_per_round=samples_per_round,
                        max_rounds=max_rounds,
                        # A config seed is an int32 (MAX_SEED).
                        seed=derive_seed(seed, r) % (MAX_SEED + 1), steps=steps,
                        overrides=overrides)
               for r, chosen in enumerate(runs)]
    return runs, results, steps


def _figures(algorithm: str, n: int, runs: list[list[float]], results: list[dict[str, Any]],
             steps: int, *, batch_size: int, group_size: int, samples_per_round: int,
             max_rounds: int, seconds_per_sample: float | None, seed: int,
             overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A variant's row of figures (``PREDICTION_COLUMNS`` and how sure) from its simulations:
    the steps past the first half of a stateful simulation count, every step of the others."""
    record = get_algorithm(algorithm)
    counted = [(step, len(chosen)) for res, chosen in zip(results, runs, strict=True)
               for step in (res["steps"][steps // 2:] if steps > 1 else [res])]
    drawn = [p for step, _ in counted for p in step["prompts"]]
    # Per prompt of the step's batch, drawn or not (DPPO prunes some before generating; for
    # the others every prompt of the batch is drawn and this is the mean over them).
    samples = sum(step["total_samples"] for step, _ in counted) / sum(s for _, s in counted)
    if record.draws_batches:
        # Per prompt of the step's batch: the further batches' samples count too (DAPO).
        samples = sum(r["total_samples"] for r in results) / sum(len(c) for c in runs)
    kept = [p for p in drawn if p["advantages"]]
    # The most a step can spend per prompt of its batch, at the run's shape (not validated
    # again: the simulation has checked it).
    most = record.max_samples_per_step(TrainConfig(**{
        "algorithm": algorithm, "group_size": n, "samples_per_round": samples_per_round,
        "max_rounds": max_rounds, **(overrides or {}), "batch_size": batch_size})) / batch_size
    fixed = all(step["total_samples"] == most * size for step, size in counted)
    low, high = (samples, samples) if fixed else _spend_bounds(runs, drawn, samples, most, seed)
    return dict(
        samples_per_prompt=samples,
        samples_per_step=batch_size * samples,
        samples_per_step_low=batch_size * low,
        samples_per_step_high=batch_size * high,
        spend_fixed=fixed,
        multiple_of_grpo=samples / group_size,
        # Over the groups kept for the update, for every algorithm alike (None: none kept).
        zero_adv_frac=(sum(all(abs(a) <= 1e-12 for a in p["advantages"]) for p in kept)
                       / len(kept)) if kept else None,
        discarded_frac=1 - len(kept) / len(drawn),
        unresolved_frac=sum(not p["resolved"] for p in drawn) / len(drawn),
        missing_pos_frac=sum(p["missing"] == "positives" for p in drawn) / len(drawn),
        missing_neg_frac=sum(p["missing"] == "negatives" for p in drawn) / len(drawn),
        step_seconds=(batch_size * samples * seconds_per_sample
                      if seconds_per_sample is not None else None))


def _spend_bounds(runs: list[list[float]], drawn: list[dict[str, Any]], samples: float,
                  most: float, seed: int) -> tuple[float, float]:
    """Samples per prompt at the ends of the interval of ``spend_interval`` over the measured
    prompts, at most ``most``: the resampled cost per kept group, relative to the simulation's
    own, scales the figure."""
    spent = np.zeros(max(len(c) for c in runs))
    groups = np.zeros_like(spent)
    for p in drawn:  # by measured prompt (its position in the simulated list)
        spent[p["index"]] += p["samples"]
        groups[p["index"]] += bool(p["advantages"])
    drawn_ones = np.flatnonzero(spent)
    interval = spend_interval(spent[drawn_ones], groups[drawn_ones], seed=seed)
    per_kept = spent.sum() / groups.sum() if groups.sum() else None
    if interval is None or not per_kept:
        return samples, samples
    low, high = (min(most, samples * r / per_kept) for r in interval)
    return low, high


# --- asynchronous training: the chosen lag's step beside the synchronous one ----------------------

# The asynchronous prediction simulates whole updates of B prompts (trainer.asynctime), a few
# seconds of the web process's time at B = 256; past that the panel gives the command instead.
ASYNC_MAX_BATCH = 256
# Updates measured after the pipeline fills (``simulate-time --max-policy-lag`` measures 6 by
# default; 3 keeps the panel quick and the steady state already shows).
ASYNC_MEASURED_UPDATES = 3

ASYNC_COLUMNS: tuple[Column, ...] = (
    Column("step_s", "step time", "seconds",
           "simulated seconds between two updates in the steady state (generation, update "
           "and weight sync, overlapped where the scheme overlaps them)"),
    Column("ratio_to_sync", "÷ synchronous step", "x",
           "this row's step time divided by the synchronous colocated step's (below 1: faster)"),
    Column("engine_idle", "engine idle", "fraction",
           "share of the generating GPUs' time with nothing to run (colocated: the update "
           "and the weight sync)"),
    Column("trainer_idle", "trainer idle", "fraction",
           "share of the training GPUs' time not updating (colocated: the generation)"),
    Column("mean_lag", "mean lag", "versions",
           "policy versions between the weights that drew a trained sample and those it "
           "trains, averaged over the trained samples (at most max_policy_lag)"),
    Column("stale_dropped", "stale dropped per update", "samples",
           "samples drawn but dropped for the lag bound, per update"),
)


def async_model(name: str) -> str:
    """The key of ``trainer.clustertime.MODELS`` whose shape the model ``name`` has (its name
    within ``name``: "Qwen/Qwen2.5-Math-7B" is the 7B); the 1.5B, the simulator's reference,
    otherwise."""
    from trainer.clustertime import MODELS

    for key, shape in MODELS.items():
        if shape.name.lower() in name.lower():
            return key
    return "1.5b"


def async_split(gpus: int) -> Any:
    """The rollout + train split the prediction assumes on ``gpus`` GPUs (at least 2): three
    quarters generating, at least one training (2: 1+1, 4: 3+1, 8: 6+2), ``default_splits``'
    first."""
    from trainer.asynctime import Split

    gpus = max(2, gpus)
    rollout = min(gpus - 1, max(1, gpus * 3 // 4))
    return Split(rollout, gpus - rollout)


def predict_async(rates: Sequence[float], *, algorithm: str, max_policy_lag: int,
                  batch_size: int, group_size: int, samples_per_round: int, max_rounds: int,
                  max_tokens: int, world_size: int = 1, rollout_ranks: int = 0,
                  model: str = "1.5b", seed: int = 0) -> dict[str, Any]:
    """What ``max_policy_lag`` = k buys ``algorithm`` on prompts of pass rates ``rates``: the
    step time and the engine and trainer idle shares (``ASYNC_COLUMNS``) of three rows, from
    ``trainer.asynctime.lag_study``:

    1. synchronous, colocated: today's step (every GPU generates, then every GPU trains);
    2. the rollout + train split (the run's, or ``async_split``'s) at k = 0: separate GPUs, no
       overlap;
    3. the split at the chosen k: generation runs ahead of the update.

    The batch is the measured pass rates repeated to B. GPUs: the run's world_size, at least 2
    (a split needs one of each). The split: the run's own where it sets ``rollout_ranks`` (its
    rollout ranks generating, the rest training), else ``async_split``'s. Returns ``gpus``,
    ``split``, ``model``, ``rows`` (each with ``label`` and the columns' keys), ``command``
    (the same study from the command line) and ``error`` (a reason, with no rows, where the
    prediction is not made)."""
    from trainer.asynctime import Split, lag_study
    from trainer.clustertime import MODELS, ClusterModel

    split = (Split(rollout_ranks, world_size - rollout_ranks)
             if 0 < rollout_ranks < world_size else async_split(world_size))
    gpus = split.rollout + split.train
    out: dict[str, Any] = {"gpus": gpus, "split": split.label, "model": MODELS[model].name,
                           "max_policy_lag": max_policy_lag, "rows": [], "error": None,
                           "command": (
                               f"python -m trainer simulate-time --preset bare "
                               f"--algorithms {algorithm} --max-policy-lag 0,{max_policy_lag} "
                               f"--split colocated,{split.label} --gpus {gpus} --model {model} "
                               f"--group-size {group_size} --samples-per-round "
                               f"{samples_per_round} --max-rounds {max_rounds} --max-tokens "
                               f"{max_tokens} --steps {ASYNC_MEASURED_UPDATES} --seed {seed} "
                               f"--pass-rates FILE")}
    if max_policy_lag < 1 or not rates:
        out["error"] = "synchronous (max_policy_lag = 0)" if rates else "no pass rates"
        return out
    if batch_size > ASYNC_MAX_BATCH:
        out["error"] = (f"batch_size {batch_size} is above the {ASYNC_MAX_BATCH} prompts this "
                        f"panel simulates; run the command below with the B pass rates in FILE")
        return out
    batch = [rates[i % len(rates)] for i in range(batch_size)]
    try:
        results = lag_study(batch, algorithms=[algorithm], lags=[0, max_policy_lag],
                            splits=[Split(0, 0), split], steps=ASYNC_MEASURED_UPDATES,
                            progress=False, group_size=group_size,
                            samples_per_round=max(samples_per_round, group_size),
                            max_rounds=max_rounds, max_tokens=max_tokens, seed=seed,
                            cluster=ClusterModel(gpus=gpus), model=MODELS[model])
    except (ConfigError, ValueError, RuntimeError) as exc:  # e.g. no simulator support
        out["error"] = str(exc)
        return out
    labels = {("colocated", 0): "synchronous, colocated (k = 0)",
              (split.label, 0): f"split {split.label}, synchronous (k = 0)",
              (split.label, max_policy_lag): f"split {split.label}, asynchronous "
                                             f"(k = {max_policy_lag})"}
    for r in results:
        out["rows"].append({
            "label": labels[(r.split, r.max_policy_lag)], "split": r.split,
            "max_policy_lag": r.max_policy_lag, "step_s": r.step_s,
            "ratio_to_sync": r.ratio_to_own_sync, "engine_idle": r.engine_idle,
            "trainer_idle": r.trainer_idle, "mean_lag": r.mean_lag,
            "stale_dropped": r.stale_dropped})
    return out
