"""``simulate-time --max-policy-lag K --split R+T``: training with generation running ahead of
the update by at most K policy versions, on the simulated backend's clock
(docs/architecture.md, the ``asynctime.py`` row; docs/schedulers.md).

``R`` GPUs generate (one ``EventEngine`` each, continuous batching) and ``T`` GPUs train; the
two sides run at once:

- **The producer** keeps the engines busy: it admits prompts (unseen prompts whose pass rates
  cycle through the given ones; Est: the B prompts themselves, again and again, since its
  estimator follows each prompt across visits) while an engine has a free slot (fewer requests than
  ``max_num_seqs``: more would only queue, and delay the next rounds of the prompts already
  admitted), each to the engine with the fewest requests, and drives
  it through its algorithm: one group of n (GRPO), one group of n kept only if its rewards are
  not all equal (DAPO: an all-equal group is filtered and another prompt admitted), rounds of M
  until the exit rule holds or N rounds are used (Seq-pos, Seq-balance), one round of N_x from
  the estimator's state at admission (Est, admitted B at a time). A prompt is *ready* when its
  algorithm says it is done.
- **The lag bound.** Every request carries the policy version of the weights its engine holds
  when it is submitted (requests in flight when new weights arrive finish on the old ones). Update
  u trains with version u; a prompt may enter it only if its oldest sample is at least version
  u - K. The producer admits a prompt at version v only while the prompts admitted and not yet
  trained fit the updates that may still take version v: (v + K + 1 - u_next) x B, u_next the
  updates started. At K = 0 on a split this is synchronous training on separate GPUs.
- **The update** takes B ready prompts that meet the bound, those of the oldest weights first
  (they are the next to pass it), then the earliest ready. It first waits for every prompt
  admitted K versions ago that is still sampling (this update is its last chance: the trainer
  waits rather than drop it, as the asynchronous trainer of issue 29 does); ready prompts past
  the bound (more than B of one version) are dropped and counted (``stale_dropped`` samples).
  It takes ``update_seconds`` on T GPUs (the same model as the synchronous simulator's), then
  the weights go to the rollout engines in buckets over NVLink (``push_seconds``) while their
  requests keep running; each engine pauses ``engine_load_seconds`` to load them (vLLM's
  ``load_weights``).

``colocated`` at K = 0 is today's synchronous step (``trainer.steptime.simulate_step_time``),
exactly; colocated at K >= 1 is not modelled (an engine that generates for later steps needs GPUs
the update is not using). Engines advance to each trainer event in time order; between two
trainer events each engine runs its own timeline (its completions submit its prompts' next
rounds at their own times). While the trainer waits, readiness is checked every
``WAIT_WINDOW_S`` of simulated time, so an update may start up to that much late.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer.algorithms import GRPO, get_algorithm
from trainer.clustertime import (
    MODELS,
    ClusterModel,
    ModelShape,
    engine_load_seconds,
    engine_time_for,
)
from trainer.config import ConfigError, TrainConfig
from trainer.enginetime import EngineTimeModel, EventEngine, LengthModel

WAIT_WINDOW_S = 0.25


@dataclass(frozen=True)
class Split:
    """GPUs that generate and GPUs that train; ``rollout == 0``: colocated (every GPU does
    both, in turn)."""

    rollout: int
    train: int

    @property
    def colocated(self) -> bool:
        return self.rollout == 0

    @property
    def label(self) -> str:
        return "colocated" if self.colocated else f"{self.rollout}+{self.train}"


def parse_splits(text: str, gpus: int) -> list[Split]:
    """``colocated,6+2,4+4`` -> splits of ``gpus``; a ``ConfigError`` names ``split``."""
    splits = []
    for item in (t.strip() for t in text.split(",")):
        if item == "colocated":
            splits.append(Split(0, 0))
            continue
        try:
            rollout, train = (int(x) for x in item.split("+"))
        except ValueError:
            raise ConfigError("split", f"expected colocated or R+T (rollout + train GPUs), "
                              f"got {item!r}") from None
        if rollout < 1 or train < 1 or rollout + train != gpus:
            raise ConfigError("split", f"{item}: needs R >= 1 and T >= 1 with R + T = --gpus "
                              f"({gpus})")
        splits.append(Split(rollout, train))
    if not splits:
        raise ConfigError("split", "give at least one split")
    return splits


def parse_lags(text: str) -> list[int]:
    """``0,1,2`` -> lags; a ``ConfigError`` names ``max-policy-lag``."""
    try:
        lags = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ConfigError("max-policy-lag", f"expected whole numbers like 0,1,2, got "
                          f"{text!r}") from None
    if not lags or any(k < 0 or k > 8 for k in lags):
        raise ConfigError("max-policy-lag", f"each lag must be within [0, 8], got {text!r}")
    return sorted(set(lags))


@dataclass
class LagResult:
    """Steady-state figures of one (algorithm, split, lag); means per update."""

    algorithm: str
    split: str
    max_policy_lag: int
    step_s: float               # seconds between two updates
    trained_per_s: float        # samples the updates train on, per second
    drawn_per_s: float          # responses drawn, per second
    engine_idle: float          # share of the rollout GPUs' time with nothing to run
    trainer_idle: float         # share of the training GPUs' time not updating
    mean_lag: float             # versions between a trained sample's weights and the update's
    max_lag: int
    stale_dropped: float        # samples dropped for the bound, per update
    filtered: float = 0.0       # DAPO groups without signal, per update
    sync_step_s: float = 0.0    # the algorithm's synchronous colocated step
    grpo_sync_step_s: float = 0.0

    @property
    def ratio_to_own_sync(self) -> float:
        return self.step_s / self.sync_step_s if self.sync_step_s else math.nan

    @property
    def ratio_to_grpo_sync(self) -> float:
        return self.step_s / self.grpo_sync_step_s if self.grpo_sync_step_s else math.nan


@dataclass
class _Admitted:
    """A prompt admitted to sampling."""

    index: int
    prompt: Any
    engine: int
    target: int                  # samples of its current round
    round: int = 0
    hits: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    outstanding: int = 0
    first_version: int = -1      # the version of its first request (its oldest sample)
    ready_at: float = -1.0


@dataclass
class _Update:
    start: float
    end: float
    kept: int
    lags: list[int]


def push_seconds(model: ModelShape, cluster: ClusterModel, bucket_mb: int = 64) -> float:
    """The bf16 weights broadcast from the train ranks to the rollout ranks in buckets of
    ``bucket_mb`` MiB over the machine's NVLink (verl's one-step-off recipe reports its NCCL sync
    "under 300 ms")."""
    total = 2 * model.params
    calls = math.ceil(total / (bucket_mb * 2**20))
    return total / (cluster.bus_gb_s * 1e9) + calls * cluster.latency_s


class AsyncSim:
    """One (algorithm, split, lag) run of ``updates`` updates; see the module docstring."""

    def __init__(self, algorithm: str, rates: Sequence[float], *, lag: int, split: Split,
                 updates: int, group_size: int = 4, samples_per_round: int = 8,
                 max_rounds: int = 4, max_tokens: int = 2048, seed: int = 0,
                 lengths: LengthModel | None = None, engine: EngineTimeModel | None = None,
                 update_token_s: float = 3e-5, model: ModelShape | None = None,
                 cluster: ClusterModel | None = None, mini_batches: int = 4,
                 micro_batch_tokens: int = 6144, bucket_mb: int = 64) -> None:
        from trainer.allocation import PassRateEstimator
        from trainer.backends.simulated import SimulatedBackend
        from trainer.clustertime import update_token_seconds_for
        from trainer.types import Prompt

        if split.colocated:
            raise ValueError("a colocated split runs the synchronous simulator")
        self.config = TrainConfig(algorithm=algorithm, backend="simulated", verifier="exact",
                                  group_size=group_size, samples_per_round=samples_per_round,
                                  max_rounds=max_rounds, batch_size=len(rates),
                                  max_new_tokens=max_tokens, seed=seed)
        self.config.validate()
        self.sampling = get_algorithm(algorithm).sampling
        self.k_pos, self.k_neg = self.config.exit_counts
        self.lag, self.total_updates, self.batch = lag, updates, len(rates)
        self.model = model or MODELS["1.5b"]
        base = cluster or ClusterModel()
        engine_time = engine_time_for(self.model, engine)
        self.prompts = [Prompt(id=str(i), text=f"simulated prompt {i}", answer="1",
                               metadata={"pass_rate": float(r)}) for i, r in enumerate(rates)]
        self.backend = SimulatedBackend(
            self.config, lengths=dataclasses.replace(lengths or LengthModel(),
                                                     max_tokens=max_tokens),
            engine_time=engine_time, engines=split.rollout)
        self.engines = [EventEngine(engine_time) for _ in range(split.rollout)]
        self.train_cluster = dataclasses.replace(base, gpus=split.train, nodes=1)
        self.token_s = update_token_seconds_for(self.model, update_token_s)
        self.update_shape = (mini_batches, micro_batch_tokens)
        whole = dataclasses.replace(base, gpus=split.rollout + split.train, nodes=1)
        self.push_s = push_seconds(self.model, whole, bucket_mb)
        self.load_s = engine_load_seconds(self.model, whole)
        self.estimator = PassRateEstimator.from_config(self.config)
        self._reset()

    def _reset(self) -> None:
        self.pushes: list[float] = []           # when each new version reaches the engines
        self.pushes_applied = 0
        self.updates: list[_Update] = []
        self.trainer_free = 0.0
        self.ready: list[_Admitted] = []
        self.inflight: dict[int, _Admitted] = {}
        self.requests: dict[tuple[int, int, int], tuple[bool, int, int]] = {}
        self.admitted = 0
        self.unconsumed = 0
        self.completions: list[float] = []      # when each response came back
        self.drops: list[tuple[float, int]] = []     # (time, samples) dropped for the bound
        self.filtered: list[float] = []         # when each DAPO group was filtered
        self.engine_work: list[float] = []      # engines' busy + prefill seconds, per update end

    # --- the producer --------------------------------------------------------------------------

    def version_at(self, t: float) -> int:
        return sum(1 for p in self.pushes if p <= t)

    def _room(self, now: float) -> int:
        u_next = len(self.updates)
        return (self.version_at(now) + self.lag + 1 - u_next) * self.batch - self.unconsumed

    def _busy(self, engine: int | None) -> bool:
        """No free slot: ``engine`` (or every engine) already has ``max_num_seqs`` requests.
        Admitting more would only queue them, and a queue delays the next rounds of the
        prompts already admitted (and so their staleness)."""
        limit = self.backend.engine_time.max_num_seqs
        engines = self.engines if engine is None else [self.engines[engine]]
        return all(e.pending() >= limit for e in engines)

    def _admit(self, now: float, engine: int | None = None) -> None:
        """Admit prompts while the bound leaves room and an engine has a free slot: to
        ``engine`` (where a filtered group freed its place) or to the engine with the fewest
        requests."""
        from trainer.allocation import plan_allocation

        room = self._room(now)
        if self.sampling == "allocation":
            while room >= self.batch and not self._busy(engine):
                ids = [p.id for p in self.prompts]
                counts = plan_allocation(self.estimator, ids, self.config).counts
                for prompt, count in zip(self.prompts, counts.tolist(), strict=True):
                    self._start(prompt, int(count), now, engine)
                room -= self.batch
            return
        while room > 0 and not self._busy(engine):
            first = (self.config.samples_per_round if self.sampling == "rounds"
                     else self.config.group_size)
            self._start(self._fresh_prompt(), first, now, engine)
            room -= 1
        if self.admitted > 1000 * self.batch * max(1, self.total_updates):
            raise RuntimeError("no prompt becomes ready (every group without signal?)")

    def _fresh_prompt(self) -> Any:
        """The next prompt of the stream: an unseen prompt (its own id, so its own draws) with
        the pass rates' next value, cycled."""
        from trainer.types import Prompt

        rate = self.prompts[self.admitted % self.batch].metadata["pass_rate"]
        return Prompt(id=f"a{self.admitted}", text="simulated prompt", answer="1",
                      metadata={"pass_rate": rate})

    def _start(self, prompt: Any, count: int, now: float, engine: int | None) -> None:
        if engine is None:
            engine = min(range(len(self.engines)), key=lambda e: self.engines[e].pending())
        a = _Admitted(index=self.admitted, prompt=prompt, engine=engine, target=count)
        self.admitted += 1
        self.unconsumed += 1
        self.inflight[a.index] = a
        self._submit_round(a, now)

    def _submit_round(self, a: _Admitted, now: float) -> None:
        seed = int(np.random.SeedSequence([self.config.seed, a.index, a.round])
                   .generate_state(1)[0])
        hits, lengths = self.backend.draw(a.prompt, a.target, seed)
        version = self.version_at(now)
        if a.first_version < 0:
            a.first_version = version
        engine = self.engines[a.engine]
        for j, (hit, length) in enumerate(zip(hits.tolist(), lengths.tolist(), strict=True)):
            key = (a.index, a.round, j)
            self.requests[key] = (bool(hit), int(length), version)
            engine.submit(key, int(length), a.index)
        a.outstanding = a.target

    def _on_complete(self, key: tuple[int, int, int], t: float) -> None:
        hit, length, version = self.requests.pop(key)
        self.completions.append(t)
        a = self.inflight[key[0]]
        a.hits.append(hit)
        a.lengths.append(length)
        a.versions.append(version)
        a.outstanding -= 1
        if a.outstanding == 0:
            self._end_round(a, t)

    def _end_round(self, a: _Admitted, t: float) -> None:
        """The algorithm's decision once a prompt's round is back."""
        if self.sampling == "rounds":
            pos = sum(a.hits)
            met = pos >= self.k_pos and len(a.hits) - pos >= self.k_neg
            if not met and a.round + 1 < self.config.max_rounds:
                a.round += 1
                a.target = self.config.samples_per_round
                self._submit_round(a, t)
                return
        del self.inflight[a.index]
        if self.sampling == "batches" and len(set(a.hits)) < 2:
            self.filtered.append(t)      # all equal: no signal; admit another in its place
            self.unconsumed -= 1
            self._admit(t, a.engine)
            return
        a.ready_at = t
        self.ready.append(a)

    # --- the trainer ---------------------------------------------------------------------------

    def _kept(self, a: _Admitted) -> list[tuple[int, int]]:
        """(length, version) of the samples the update trains on: the pool's balanced
        down-sample to n for Seq (n // 2 positives where there are, the rest negatives, filled
        from the other side), every sample otherwise."""
        samples = list(zip(a.hits, a.lengths, a.versions, strict=True))
        if self.sampling != "rounds":
            return [(n, v) for _, n, v in samples]
        n = self.config.group_size
        pos = [(n_, v) for h, n_, v in samples if h]
        neg = [(n_, v) for h, n_, v in samples if not h]
        take_pos = min(n // 2, len(pos))
        take_neg = min(n - take_pos, len(neg))
        take_pos = min(len(pos), n - take_neg)
        return pos[:take_pos] + neg[:take_neg]

    def _try_start(self, now: float) -> None:
        """Start the next update if the trainer is free, no prompt on its last chance is still
        sampling, and B ready prompts meet the bound; drop ready ones past it."""
        if self.trainer_free > now or len(self.updates) >= self.total_updates:
            return
        u = len(self.updates)
        for a in [a for a in self.ready if u - a.first_version > self.lag]:
            self._drop(a, now)
        self.ready = [a for a in self.ready if u - a.first_version <= self.lag]
        # A prompt admitted k versions ago can only enter this update: wait for it.
        if any(u - a.first_version >= self.lag for a in self.inflight.values()):
            return
        # Oldest weights first (they are the next to pass the bound), then first ready; never
        # the same prompt twice in one update.
        self.ready.sort(key=lambda a: (a.first_version, a.ready_at))
        chosen: list[_Admitted] = []
        ids: set[str] = set()
        for a in self.ready:
            if a.prompt.id not in ids and len(chosen) < self.batch:
                chosen.append(a)
                ids.add(a.prompt.id)
        if len(chosen) < self.batch:
            return
        taken = {id(a) for a in chosen}
        self.ready = [a for a in self.ready if id(a) not in taken]
        self._update(u, chosen, max(self.trainer_free, max(a.ready_at for a in chosen)))

    def _update(self, u: int, chosen: list[_Admitted], start: float) -> None:
        from trainer.steptime import update_seconds

        kept = [s for a in chosen for s in self._kept(a)]
        tokens = sum(n for n, _ in kept) + len(kept) * self.backend.engine_time.prompt_tokens
        seconds, _ = update_seconds(tokens, self.token_s, self.model, self.train_cluster,
                                    *self.update_shape)
        end = start + seconds
        self.updates.append(_Update(start, end, len(kept), [u - v for _, v in kept]))
        self.trainer_free = end
        self.pushes.append(end + self.push_s)
        self.unconsumed -= len(chosen)
        if self.sampling == "allocation":
            ids = [a.prompt.id for a in chosen]
            self.estimator.update(ids, np.array([sum(a.hits) for a in chosen], float),
                                  np.array([len(a.hits) for a in chosen], float))

    def _drop(self, a: _Admitted, now: float) -> None:
        """Drop a prompt past the bound: its pooled samples and its requests in flight."""
        keys = [k for k in ((a.index, a.round, j) for j in range(a.target)) if k in self.requests]
        if keys:
            self.engines[a.engine].abort(keys)
            for k in keys:
                del self.requests[k]
        self.inflight.pop(a.index, None)
        self.unconsumed -= 1
        self.drops.append((now, len(a.hits) + len(keys)))

    # --- the clock -----------------------------------------------------------------------------

    def _horizon(self, now: float) -> float:
        """The next trainer-side event: the update's end, a push reaching the engines, or (the
        trainer waiting) the next readiness check."""
        events = [t for t in (self.trainer_free, *self.pushes[self.pushes_applied:]) if t > now]
        if self.trainer_free <= now:
            events.append(now + WAIT_WINDOW_S)
        return min(events)

    def _advance_engines(self, until: float) -> None:
        for engine in self.engines:
            while True:
                done = engine.advance(until)
                if not done:
                    break
                for key in done:
                    if key in self.requests:
                        self._on_complete(key, engine.clock)

    def _apply_pushes(self, now: float) -> None:
        """New weights reach the engines: each pauses to load them; requests in flight keep
        their old version."""
        while self.pushes_applied < len(self.pushes) and self.pushes[self.pushes_applied] <= now:
            self.pushes_applied += 1
            for engine in self.engines:
                engine.clock = max(engine.clock, now) + self.load_s

    def run(self) -> list[_Update]:
        """Run until the last update has ended (the engines keep generating meanwhile)."""
        now = 0.0
        self._admit(now)
        while len(self.engine_work) < self.total_updates:
            now = self._horizon(now)
            self._advance_engines(now)
            self._apply_pushes(now)
            if self.updates and len(self.engine_work) < len(self.updates) and \
                    now >= self.updates[len(self.engine_work)].end:
                self.engine_work.append(sum(e.busy_seconds + e.prefill_seconds
                                            for e in self.engines))
            self._try_start(now)
            self._admit(now)
            if len(self.engine_work) >= self.total_updates:
                break
            if not self.inflight and not self.ready and self.trainer_free <= now \
                    and self.pushes_applied == len(self.pushes) \
                    and not any(e.pending() for e in self.engines):
                raise RuntimeError("the producer stalled: nothing in flight, nothing ready")
        return self.updates

    def result(self, warmup: int) -> LagResult:
        """Steady-state figures over the updates after the first ``warmup`` (the pipeline
        filling up)."""
        window = self.updates[warmup:]
        t0, t1 = self.updates[warmup - 1].end, window[-1].end
        span = t1 - t0
        lags = [lag for u in window for lag in u.lags]
        rollout = len(self.engines)
        work = self.engine_work[-1] - self.engine_work[warmup - 1]
        return LagResult(
            algorithm=self.config.algorithm, split=f"{rollout}+{self.train_cluster.gpus}",
            max_policy_lag=self.lag, step_s=span / len(window),
            trained_per_s=sum(u.kept for u in window) / span,
            drawn_per_s=sum(1 for t in self.completions if t0 < t <= t1) / span,
            engine_idle=1 - work / (rollout * span),
            trainer_idle=1 - sum(u.end - u.start for u in window) / span,
            mean_lag=float(np.mean(lags)) if lags else 0.0, max_lag=max(lags, default=0),
            stale_dropped=sum(n for t, n in self.drops if t0 < t <= t1) / len(window),
            filtered=sum(1 for t in self.filtered if t0 < t <= t1) / len(window))


def simulate_lag(algorithm: str, rates: Sequence[float], *, lag: int, split: Split,
                 steps: int = 3, **kwargs: Any) -> LagResult:
    """Steady state of one (algorithm, split, lag): ``steps`` updates measured after the
    ``lag + 1`` that fill the pipeline. ``kwargs``: ``AsyncSim``'s."""
    warmup = lag + 1
    sim = AsyncSim(algorithm, rates, lag=lag, split=split, updates=warmup + steps, **kwargs)
    sim.run()
    return sim.result(warmup)


# --- the study behind simulate-time --max-policy-lag ---------------------------------------------

# The algorithms issue 29 asks about, the baseline first.
LAG_ALGORITHMS = ("grpo", "dapo", "ada-pos", "ada-balance", "ada-est")


def default_splits(gpus: int) -> str:
    """``colocated`` and, on 4 GPUs or more, three quarters and half of them generating."""
    splits = ["colocated"]
    for rollout in sorted({gpus * 3 // 4, gpus // 2}, reverse=True):
        if 1 <= rollout < gpus:
            splits.append(f"{rollout}+{gpus - rollout}")
    return ",".join(splits)


def colocated_result(sync: Any, lag: int = 0) -> LagResult:
    """The synchronous simulator's step as a ``LagResult``: every GPU generates, then every GPU
    trains (the engines idle through the update and the weight sync, the trainer through the
    generation)."""
    gpus = sync.gpus
    return LagResult(
        algorithm=sync.algorithm, split="colocated", max_policy_lag=lag, step_s=sync.step_s,
        trained_per_s=sync.kept_samples / sync.step_s, drawn_per_s=sync.samples / sync.step_s,
        engine_idle=1 - sync.engine_busy_s / (gpus * sync.step_s),
        trainer_idle=1 - sync.update_s / sync.step_s, mean_lag=0.0, max_lag=0,
        stale_dropped=0.0)


def lag_study(rates: Sequence[float], *, algorithms: Sequence[str], lags: Sequence[int],
              splits: Sequence[Split], steps: int, progress: bool = True,
              **kwargs: Any) -> list[LagResult]:
    """Every (algorithm, split, lag); colocated only at lag 0 (the synchronous simulator, its
    round scheduler). ``kwargs``: ``simulate_step_time``'s models (``update``, ``cluster``,
    ...), shared with the asynchronous runs. Each result carries its algorithm's synchronous
    step and GRPO's."""
    import sys

    from tqdm import tqdm

    from trainer.steptime import simulate_step_time

    update = kwargs.pop("update", None)
    runs = [(a, s, k) for a in algorithms for s in splits for k in lags
            if not (s.colocated and k > 0)]
    results: list[LagResult] = []
    syncs: dict[str, Any] = {}
    with tqdm(total=len(runs), unit="run", file=sys.stderr, disable=not progress,
              desc="lag study") as bar:
        for algorithm, split, lag in runs:
            if algorithm not in syncs:
                syncs[algorithm] = simulate_step_time(algorithm, "round", rates, steps=steps,
                                                      update=update, **kwargs)
            if split.colocated:
                results.append(colocated_result(syncs[algorithm], lag))
            else:
                results.append(simulate_lag(
                    algorithm, rates, lag=lag, split=split, steps=steps,
                    update_token_s=(update.token_s if update else 3e-5), **kwargs))
            bar.update(1)
    grpo = syncs[GRPO.name].step_s if GRPO.name in syncs else math.nan
    for r in results:
        r.sync_step_s, r.grpo_sync_step_s = syncs[r.algorithm].step_s, grpo
    return results


def lag_table(results: Sequence[LagResult]) -> str:
    """A Markdown table of a lag study."""
    lines = ["| algorithm | split (rollout + train GPUs) | max_policy_lag | step (s) | "
             "step / own synchronous | step / synchronous GRPO | trained samples/s | "
             "drawn samples/s | engine idle | trainer idle | mean lag | max lag | "
             "stale dropped / update | DAPO filtered / update |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r.algorithm} | {r.split} | {r.max_policy_lag} | {r.step_s:.1f} | "
                     f"{r.ratio_to_own_sync:.2f}x | {r.ratio_to_grpo_sync:.2f}x | "
                     f"{r.trained_per_s:.1f} | {r.drawn_per_s:.1f} | {r.engine_idle:.0%} | "
                     f"{r.trainer_idle:.0%} | {r.mean_lag:.2f} | {r.max_lag} | "
                     f"{r.stale_dropped:.0f} | {r.filtered:.0f} |")
    return "\n".join(lines)
