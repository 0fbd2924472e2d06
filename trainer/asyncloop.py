"""Asynchronous training with a bounded policy lag (``max_policy_lag`` = k >= 1;
docs/architecture.md, the ``asyncloop.py`` row; issue 29): the machinery every algorithm
shares, the algorithm's own part through its record's hooks (``select_batch``, ``draws`` and
the exit rule, ``keep``, ``async_admit``, ``async_ready``, ``async_trained``).

Vocabulary as ``trainer.asynctime`` (the step-time simulator of the same scheme):

- **Policy version** v: optimiser updates applied to the weights that generate. Update u
  (1-based, the run's step u) trains the weights of version u - 1 and makes version u. Every
  sample carries the version that generated it; its lag in update u is (u - 1) - v, at most k.
- **The producer** admits prompts (the algorithm's ``select_batch``, one admission batch after
  another, a batch's allocation planned at admission by ``async_admit``: Est) while the
  prompts admitted and not yet trained fit the updates that may still take the current
  version: at most (v + k + 1 - updates started) x B. Each *tick* draws one round for every
  admitted prompt still sampling, in one ``backend.generate`` call with the current weights
  (a prompt's rounds can span versions). A prompt done sampling (its exit rule or N rounds;
  one round for the others) enters the ready buffer if ``async_ready`` says so (DAPO: a group
  with signal); otherwise it is filtered (counted) and its room goes to another prompt.
- **The update** takes B ready prompts, those whose oldest sample is oldest first, then by
  admission. It first waits (ticks) while fewer than B are ready or while a prompt whose
  oldest sample would be past the bound at the next update is still sampling (this update is
  its last chance). Ready prompts past the bound are dropped, their samples counted
  (``samples_stale_dropped``); a kept sample past it is an error, never trained.
- **Overlap.** Generation for later steps runs while a step trains: here one tick on the
  weights the update starts from, before the new weights are applied (so with k = 1 and GRPO
  every step trains the groups generated one version earlier: verl's one-step-off-policy).

**Where it runs** (issue 29 item 4): one process, or split Ray ranks. The schedule is
deterministic (ticks and updates interleaved as above), so a run is a function of its config and
seed; the update's tick runs on an engine thread while the update trains on the main thread
(admission before it and the tick's bookkeeping after it stay on the main thread), joined before
the new weights go to the engine, so its requests finish on the old weights and count as lagging
by one. The records equal those of the same schedule run serially
(``train(..., engine_thread=False)``). The hf backend generates from a rollout copy of the policy
(``HFBackend.separate_engine``); vLLM's engine has its own weights. While they overlap each side
takes half the torch threads (the count is per thread). Across ranks (``world_size`` > 1,
``rollout_ranks`` >= 1; ``trainer.distributed``) the same code runs in the driver: the engine
thread's ``backend.generate`` is a Ray call to the rollout ranks' engines and the update one to
the train ranks, other processes, so the two really run at once; the train ranks push the new
weights to the rollout ranks as soon as the update returns, while the tick still generates:
each rollout rank receives them into a host copy on a second thread and swaps them into its
engine once the tick returned (``weight_push`` = staged, ``trainer.distributed.backend``;
after-requests: the push starts after the tick and loads as it arrives), with the same lag
semantics either way, the engine's weights changing only after the tick's requests finished.
Colocated ranks (``rollout_ranks`` = 0) cannot generate while they train: validation refuses
k >= 1 there.
The update treats the recorded behaviour log-probs as the rollout's and recomputes the
proximal ones at its start (``trainer.learner.update_batch``), so ``off_policy_correction``
applies (``trainer.offpolicy``).

**Stops and recovery.** A checkpoint holds, besides the weights, optimiser, algorithm state and
step, the producer's admission state (``Producer.state_dict``): where admission stands, the
prompts admitted and not yet trained, and how many samples they hold. Those samples, drawn on
weights the checkpoint no longer has in the engine's hands and trained by no update yet, are
discarded: a resumed run admits their prompts again first, from their first round at the
checkpoint's version, and reports the discarded samples and prompts on its first step
(``samples_inflight_discarded``, ``prompts_inflight_discarded``). Nothing drawn before a
checkpoint is ever trained or recorded after it, and the lag bound holds from its version.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer import seeds
from trainer.algorithms import BatchContext, SampledStep, get_algorithm
from trainer.algorithms.base import admit_without_plan
from trainer.allocation import Allocation
from trainer.loop import _Training
from trainer.result import SamplerResult
from trainer.rewards import score_and_shape
from trainer.sampler import AdaptiveSampler, make_sampler
from trainer.types import (
    POLICY_LAG_COUNT_METRICS,
    Generation,
    Prompt,
    RoundsOutcome,
    RoundStat,
)

# The generation seed stream of the producer's ticks (the synchronous loop's streams are per
# step; ticks are not steps).
ASYNC_GENERATION = 29
# Ticks an update waits at most for B ready prompts before it trains on fewer (DAPO over a
# prompt set without signal would otherwise wait forever), per round a prompt may take.
MAX_WAIT_TICKS_PER_ROUND = 64
# trainer_state.json key of the producer's admission state (``Producer.state_dict``).
ASYNC_STATE = "async_producer"


@dataclass
class Flight:
    """One admitted prompt: its pool so far, with the policy version of every sample."""

    serial: int                  # admission order
    batch: int                   # the admission batch it came in (select_batch's "step")
    index: int                   # in the run's prompt set
    prompt: Prompt
    sampler: AdaptiveSampler     # a one-prompt sampler: its rounds, exit rule and keep rule
    p_hat: float | None = None   # Est: the estimate its allocation was planned from
    allocated: int | None = None
    scale: float = 0.0           # Est: c of the allocation it was planned in
    generations: list[Generation] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    rounds: list[RoundStat] = field(default_factory=list)
    result: SamplerResult | None = None   # once done sampling

    @property
    def oldest(self) -> int:
        return min(self.versions)


@dataclass
class Round:
    """One tick: what it draws (each prompt's count, on one seed and one version) and, once
    drawn, each prompt's generations, rewards, scores and errors and when the engine ran."""

    flights: list[Flight]
    counts: list[int]
    seed: int
    version: int
    scored: list[tuple[Any, Any, Any, Any]] = field(default_factory=list)
    generating: tuple[float, float] = (0.0, 0.0)
    scoring: float = 0.0


class EngineTick:
    """A tick's draw on the engine thread: started at once, its result (or its exception)
    taken by ``result``."""

    def __init__(self, draw: Any) -> None:
        self.value: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.value = draw()
            except BaseException as exc:  # handed to the main thread by result()
                self.error = exc

        self.thread: threading.Thread | None = threading.Thread(
            target=run, name="engine-tick", daemon=True)
        self.thread.start()

    @classmethod
    def done_now(cls, draw: Any) -> EngineTick:
        out = cls.__new__(cls)
        out.value, out.error, out.thread = draw(), None, None
        return out

    def result(self) -> Any:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


def torch_thread_count() -> int:
    """The calling thread's torch thread count; 0 where torch is not loaded."""
    import sys

    return int(sys.modules["torch"].get_num_threads()) if "torch" in sys.modules else 0


def torch_threads(n: int) -> None:
    """Set the calling thread's torch thread count (where torch is loaded: the simulated
    backend never imports it)."""
    import sys

    if "torch" in sys.modules:
        import torch

        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


class Producer:
    """Admission, the ready buffer, the lag bound and the policy version (module docstring)."""

    def __init__(self, config: Any, prompts: Sequence[Prompt], backend: Any, scorer: Any,
                 state: Any = None, version: int = 0) -> None:
        self.config, self.prompts, self.backend, self.scorer = config, prompts, backend, scorer
        self.algorithm = get_algorithm(config.algorithm)
        self.state = state
        self.k, self.B = int(config.max_policy_lag), int(config.batch_size)
        self.version = self.started = version
        self.sampling: list[Flight] = []
        self.ready: list[Flight] = []
        self.taken: list[Flight] = []  # by the update under way, until its weights are applied
        self.queue: list[int] = []
        # Prompts to admit before select_batch's next batch, each list planned together: those
        # a resumed run's checkpoint held in flight (their samples discarded).
        self.requeued: list[list[int]] = []
        self.admission_batch = version  # select_batch's "step" of the latest admission batch
        self.queue_batch = version      # the admission batch the queue's prompts came in
        self.serial = self.ticks = 0
        # Since the last update: prompts filtered and samples dropped, generation seconds.
        self.filtered = self.filtered_samples = self.stale_dropped = 0
        # Discarded at the resume (what the checkpoint held in flight): reported by the first
        # update, then zero.
        self.discarded_prompts = self.discarded_samples = 0
        self.time_generation = self.time_scoring = 0.0
        self.pending: EngineTick | None = None  # the update's tick, on the engine thread

    def room(self) -> int:
        """Prompts that may still be admitted at the current version."""
        held = len(self.sampling) + len(self.ready)
        return (self.version + self.k + 1 - self.started) * self.B - held

    def admit(self) -> None:
        room = self.room()
        while room > 0:
            if not self.queue and self.requeued:
                self.queue = self.requeued.pop(0)
                self.queue_batch = -1 - len(self.requeued)  # its own batch: planned alone
            elif not self.queue:
                self.admission_batch += 1
                ctx = BatchContext(config=self.config, step=self.admission_batch,
                                   prompt_set=self.prompts, state=self.state)
                self.queue = list(self.algorithm.select_batch(ctx, self.B, ()))
                self.queue_batch = self.admission_batch
                if not self.queue:
                    return
            # An allocation is planned for prompts admitted together (Est: its budget sums
            # over them), so such a batch waits until it fits whole.
            planned = self.algorithm.async_admit is not admit_without_plan
            if planned and room < len(self.queue):
                return
            take, self.queue = (self.queue, []) if planned else (self.queue[:room],
                                                                  self.queue[room:])
            self._start(take)
            room -= len(take)

    def _start(self, indices: list[int]) -> None:
        prompts = [self.prompts[i] for i in indices]
        plan: Allocation | None = self.algorithm.async_admit(self.config, self.state, prompts)
        for j, (i, prompt) in enumerate(zip(indices, prompts, strict=True)):
            seed = seeds.derive_seed(self.config.seed, ASYNC_GENERATION, self.serial,
                                     seeds.DOWNSAMPLE)
            counts = None if plan is None else [int(plan.counts[j])]
            self.sampling.append(Flight(
                self.serial, self.queue_batch, i, prompt,
                make_sampler(self.config, 1, seed, allocation=counts),
                p_hat=None if plan is None else float(plan.p_hat[j]),
                allocated=None if plan is None else int(plan.counts[j]),
                scale=0.0 if plan is None else float(plan.scale)))
            self.serial += 1

    def tick(self) -> None:
        """Admit what fits, then one round for every prompt still sampling, on the weights of
        the current version."""
        self._end_tick(self._draw(self._begin_tick()))

    def _begin_tick(self) -> Round | None:
        """The main thread's part before a tick: admission (it reads the algorithm's state,
        which the update's hooks change) and what the tick draws, with its seed."""
        self.admit()
        if not self.sampling:
            return None
        flights = list(self.sampling)
        counts = [f.sampler.round_counts([0])[0] for f in flights]
        seed = seeds.derive_seed(self.config.seed, ASYNC_GENERATION, self.ticks)
        self.ticks += 1
        return Round(flights, counts, seed, self.version)

    def _draw(self, tick: Round | None) -> Round | None:
        """The engine's part: generate the round and score it. It touches no state of the
        producer, so it may run on the engine thread while the update trains."""
        if tick is None:
            return None
        t0 = time.perf_counter()
        drawn = self.backend.generate([f.prompt for f in tick.flights], tick.counts,
                                      seed=tick.seed)
        t1 = time.perf_counter()
        tick.scored = [(gens, *score_and_shape(self.scorer, f.prompt, gens))
                       for f, gens in zip(tick.flights, drawn, strict=True)]
        tick.generating = (t0, t1)
        tick.scoring = time.perf_counter() - t1
        return tick

    def _end_tick(self, tick: Round | None) -> None:
        """The main thread's part after a tick: each prompt's pool, rounds and exit."""
        if tick is None:
            return
        for f, (gens, rewards, scores, errors) in zip(tick.flights, tick.scored, strict=True):
            f.generations.extend(gens)
            f.rewards.extend(rewards)
            f.errors.extend(errors)
            f.versions.extend([tick.version] * len(gens))
            f.sampler.observe_many([0] * len(gens), rewards, scores)
            f.rounds.append(f.sampler.end_round(
                tokens=sum(len(g.response_token_ids) for g in gens)))
            if f.sampler.done:
                self._finish(f)
        self.time_generation += tick.generating[1] - tick.generating[0]
        self.time_scoring += tick.scoring

    def _finish(self, f: Flight) -> None:
        self.sampling.remove(f)
        f.result = f.sampler.finalize()
        if self.algorithm.async_ready(self.config, f.result):
            self.ready.append(f)
        else:
            self.filtered += 1
            self.filtered_samples += len(f.rewards)

    def take(self, should_stop: Any = None) -> list[Flight] | None:
        """The next update's B prompts (fewer only when none come for long), the stale ones
        dropped and counted; the update counts as started. ``should_stop`` is polled before
        every tick: None when it says stop (nothing taken, nothing started)."""
        floor = self.version - self.k  # the oldest version this update may train
        waited = 0
        limit = MAX_WAIT_TICKS_PER_ROUND * max(int(self.config.max_rounds), 1)
        while (len(self.ready) < self.B or any(f.versions and f.oldest <= floor
                                                for f in self.sampling)) and waited < limit:
            if should_stop is not None and should_stop():
                return None
            before = (self.ticks, len(self.sampling), len(self.ready))
            self.tick()
            waited += 1
            if before == (self.ticks, len(self.sampling), len(self.ready)) \
                    and not self.sampling:
                break  # nothing left to admit or sample
        for f in [f for f in self.ready if f.oldest < floor]:
            self.ready.remove(f)
            self.stale_dropped += len(f.rewards)
        order = sorted(self.ready, key=lambda f: (f.oldest, f.serial))
        chosen: list[Flight] = []
        ids: set[str] = set()
        for f in order:
            if len(chosen) < self.B and f.prompt.id not in ids:  # a prompt once per update
                chosen.append(f)
                ids.add(f.prompt.id)
        for f in chosen:
            self.ready.remove(f)
        self.taken = chosen
        self.started += 1
        return chosen

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs (between updates): where admission stands and the prompts
        admitted and not yet trained, in admission order, each admission batch's together (an
        allocation is planned per batch); the samples they hold are counted, not kept."""
        held = sorted(self.sampling + self.ready + self.taken, key=lambda f: f.serial)
        groups: list[list[int]] = []
        last = None
        for f in held:
            if f.batch != last:
                groups.append([])
                last = f.batch
            groups[-1].append(f.index)
        pending = groups + ([self.queue] if self.queue else []) + self.requeued
        return {"version": self.version, "admission_batch": self.admission_batch,
                "serial": self.serial, "ticks": self.ticks,
                "pending": [list(map(int, g)) for g in pending],
                "inflight_prompts": len(held),
                "inflight_samples": sum(len(f.rewards) for f in held)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: admission goes on where the checkpoint left it, the prompts it held first
        (drawn anew), and their discarded samples are counted for the first update."""
        if int(state["version"]) != self.version:
            raise ValueError(f"the producer's state is of version {state['version']}, the "
                             f"checkpoint's step {self.version}")
        self.admission_batch = self.queue_batch = int(state["admission_batch"])
        self.serial, self.ticks = int(state["serial"]), int(state["ticks"])
        self.requeued = [list(map(int, g)) for g in state["pending"] if g]
        self.discarded_prompts = int(state["inflight_prompts"])
        self.discarded_samples = int(state["inflight_samples"])

    def overlap(self) -> None:
        """Generation while the update trains: one tick on the weights it starts from (here,
        before the update: the serial schedule)."""
        self.begin_overlap(threaded=False)
        self.end_overlap()

    def begin_overlap(self, threaded: bool, threads: int = 0) -> None:
        """Start the update's tick: admission here, the round on the engine thread
        (``threaded``) or at once. ``threads``: the engine's torch threads for it (0: as
        they are); the thread count is per thread in torch (its OpenMP and MKL settings), so
        the engine's share leaves the trainer's own untouched."""
        tick = self._begin_tick()

        def draw() -> Round | None:
            if threads:
                torch_threads(threads)
            return self._draw(tick)

        self.pending = EngineTick(draw) if threaded else EngineTick.done_now(draw)

    def end_overlap(self) -> tuple[float, float] | None:
        """Wait for the update's tick (the update is done, its new weights not yet in the
        engine) and account for it. Returns when the engine generated (perf_counter seconds),
        None where no tick was under way or there was nothing to draw."""
        pending, self.pending = self.pending, None
        if pending is None:
            return None
        tick = pending.result()
        self._end_tick(tick)
        return None if tick is None else tick.generating

    def applied(self) -> None:
        """The update's new weights are in the engine."""
        self.version += 1
        self.taken = []
        self.filtered = self.filtered_samples = self.stale_dropped = 0
        self.discarded_prompts = self.discarded_samples = 0
        self.time_generation = self.time_scoring = 0.0


def assemble(flights: Sequence[Flight]) -> tuple[SamplerResult, RoundsOutcome, np.ndarray]:
    """The update's prompts as one step: their finalized one-prompt results concatenated (every
    estimator, keep rule and baseline is per prompt, so each prompt's kept samples, advantages
    and pool baseline are what its own sampler gave), their pools, round statistics summed by
    round, and each sample's policy version."""
    parts = [f.result for f in flights]
    assert all(p is not None for p in parts)
    res: list[SamplerResult] = parts  # type: ignore[assignment]
    sizes = [len(r.rewards) for r in res]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def cat(name: str, dtype: Any) -> np.ndarray:
        return np.concatenate([getattr(r, name) for r in res]).astype(dtype) if res \
            else np.zeros(0, dtype)

    pools = SamplerResult.of_pools(
        num_prompts=len(res), sample_prompt=np.repeat(np.arange(len(res)), sizes),
        sample_pool_index=cat("sample_pool_index", np.int64), sample_round=cat(
            "sample_round", np.int64),
        sample_order=np.concatenate([r.sample_order + offsets[j] for j, r in enumerate(res)])
        if res else np.zeros(0, np.int64),
        rewards=cat("rewards", np.float64), positive=cat("positive", bool),
        rounds_used=cat("rounds_used", np.int64), exit_round=cat("exit_round", np.int64),
        missing=[m for r in res for m in r.missing],
        first_round_positives=cat("first_round_positives", np.int64),
        first_round_samples=cat("first_round_samples", np.int64),
        weights=cat("weights", np.float64), estimator=res[0].estimator if res else None,
        scores=cat("scores", np.float64))
    result = pools.with_kept(cat("kept", bool), advantages=cat("advantages", np.float64))
    outcome = RoundsOutcome([f.generations for f in flights], [f.rewards for f in flights],
                            [f.errors for f in flights], _sum_rounds(flights))
    # Each pool is in observation order, as its versions are.
    versions = np.concatenate([np.asarray(f.versions, dtype=np.int64) for f in flights]) \
        if flights else np.zeros(0, np.int64)
    return result, outcome, versions


def _sum_rounds(flights: Sequence[Flight]) -> list[RoundStat]:
    rounds = max((len(f.rounds) for f in flights), default=0)
    out = []
    for t in range(rounds):
        stats = [f.rounds[t] for f in flights if len(f.rounds) > t]
        out.append(RoundStat(round=t + 1, active_prompts=sum(s.active_prompts for s in stats),
                             samples=sum(s.samples for s in stats),
                             positives=sum(s.positives for s in stats),
                             finished=sum(s.finished for s in stats),
                             tokens=sum(s.tokens for s in stats)))
    return out


class AsyncTraining(_Training):
    """``trainer.loop``'s run with the producer in place of the synchronous sampling: the
    step's records, update, evaluation and checkpoints are the loop's own."""

    def __init__(self, *args: Any, engine_thread: bool = True) -> None:
        super().__init__(*args)
        self.engine_thread = engine_thread

    def start(self, should_stop: Any, resume_from: Any) -> None:
        self.resumed_producer: dict[str, Any] | None = None
        super().start(should_stop, resume_from)
        # The engine generates while the update trains, so it holds weights of its own: the
        # hf backend a rollout copy of the policy (vLLM has its engine's; simulated none).
        separate = getattr(self.backend, "separate_engine", None)
        if separate is not None:
            separate()
        # The cores split between the engine's tick and the update while they overlap, the
        # same in the serial schedule (its records are then the threaded one's, bit for bit).
        self.threads = torch_thread_count()
        self.engine_threads = max(1, self.threads // 2)
        self.trainer_threads = max(1, self.threads - self.engine_threads)
        self.overlapped: tuple[float, float] | None = None  # the engine's tick, when it ran
        self.trained_at = (0.0, 0.0)                        # the update, when it ran
        # A resumed run's producer starts at the checkpoint's version with no sample: those in
        # flight at the checkpoint are discarded, counted, and their prompts admitted again.
        self.producer = Producer(self.config, self.prompts, self.backend, self.scorer,
                                 self.algo_state, version=self.first_step - 1)
        if self.resumed_producer is not None:
            self.producer.load_state_dict(self.resumed_producer)

    def step(self, step: int) -> Any:
        try:
            return super().step(step)
        finally:
            # Whatever ended the step (a stop inside the update, an error), the engine's tick
            # is over before anything else uses the backend (a checkpoint, closing it).
            self._settle()

    def _settle(self) -> None:
        if self.producer.pending is not None:
            self.overlapped = self.producer.end_overlap()
        if self.threads:
            torch_threads(self.threads)

    def _restore(self, state: dict[str, Any], resume_from: Any) -> None:
        super()._restore(state, resume_from)
        # A checkpoint of a synchronous run, or of one from before the state was kept: the
        # producer starts empty with admission at the resumed step's batch.
        self.resumed_producer = state.get(ASYNC_STATE)

    def run_state(self) -> dict[str, Any]:
        self._settle()  # a stop inside the update: its tick's samples are held in flight too
        return {ASYNC_STATE: self.producer.state_dict()}

    def sample(self, step: int) -> tuple[SampledStep, list[int]]:
        p = self.producer
        flights = p.take(self.stop)
        if flights is None:  # cancelled or out of time while the producer sampled
            return SampledStep(None, RoundsOutcome([], [], [], [], cancelled=True)), []
        res, outcome, versions = assemble(flights)
        # The update's tick: on the engine thread with the engine's share of the cores, while
        # the update trains on this one with the trainer's (engine_thread = false: the same
        # tick first, then the update).
        p.begin_overlap(self.engine_thread, self.engine_threads if self.threads else 0)
        if self.threads:
            torch_threads(self.trainer_threads)
        outcome.time_generation, outcome.time_scoring = p.time_generation, p.time_scoring
        lag = (step - 1) - versions[res.kept] if len(versions) else np.zeros(0, np.int64)
        if len(lag) and (lag.max() > self.config.max_policy_lag or lag.min() < 0):
            raise AssertionError(f"step {step}: a kept sample's lag {int(lag.max())} is past "
                                 f"max_policy_lag {self.config.max_policy_lag}")
        for stat in outcome.round_stats:
            self.recorder.on_round(step, stat)
        allocation = None
        if flights and flights[0].p_hat is not None:
            p_hat = np.asarray([f.p_hat for f in flights], dtype=np.float64)
            counts = np.asarray([f.allocated for f in flights], dtype=np.int64)
            allocation = Allocation(p_hat=p_hat, weights=np.ones(len(flights)), counts=counts,
                                    scale=float(np.mean([f.scale for f in flights])))
        indices = [f.index for f in flights]
        return SampledStep(res, outcome, allocation, [f.prompt for f in flights],
                           prompt_indices=indices, versions=versions), indices

    def sampling_metrics(self, sampled: SampledStep, kept: np.ndarray) -> dict[str, float]:
        p = self.producer
        versions = sampled.versions if sampled.versions is not None else np.zeros(0)
        kept_lag = (p.version - versions[kept]).astype(np.int64)
        lag = kept_lag if kept.any() else np.zeros(1)
        # Kept samples at each lag 0..k (the run page's lag distribution, without its rows).
        counts = np.bincount(kept_lag, minlength=p.config.max_policy_lag + 1)
        return {"policy_lag_mean": float(lag.mean()), "policy_lag_max": float(lag.max()),
                **{POLICY_LAG_COUNT_METRICS[i]: float(counts[i])
                   for i in range(p.config.max_policy_lag + 1)},
                "samples_stale_dropped": float(p.stale_dropped),
                "samples_inflight_discarded": float(p.discarded_samples),
                "prompts_inflight_discarded": float(p.discarded_prompts),
                "prompts_filtered": float(p.filtered),
                "samples_filtered": float(p.filtered_samples)}

    def before_sync(self, outcome: Any, metrics: dict[str, float],
                    update: tuple[float, float]) -> None:
        """The update is done: wait for the engine's tick, account for it (the prompts it
        finished, filtered ones included, and its seconds), then the new weights go in."""
        self.trained_at = update
        self._settle()
        p = self.producer
        outcome.time_generation, outcome.time_scoring = p.time_generation, p.time_scoring
        metrics["prompts_filtered"] = float(p.filtered)
        metrics["samples_filtered"] = float(p.filtered_samples)

    def timeline_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The step's timeline in seconds: the engine busy generating (every tick of the step,
        the update's included), the trainer busy updating, both at once (the update's tick
        against the update), and each side's idle share of the step's wall time (weight
        transfer, time_sync, counted on neither side's busy time nor idle)."""
        wall = max(metrics["time_step"], 1e-12)
        engine, trainer, sync = (metrics["time_generation"], metrics["time_update"],
                                 metrics["time_sync"])
        both = 0.0
        if self.overlapped is not None:
            (a0, a1), (b0, b1) = self.overlapped, self.trained_at
            both = max(0.0, min(a1, b1) - max(a0, b0))
        self.overlapped = None
        return {"time_engine_busy": engine, "time_trainer_busy": trainer,
                "time_overlap": both,
                "time_engine_idle_share": min(1.0, max(0.0, 1.0 - (engine + sync) / wall)),
                "time_trainer_idle_share": min(1.0, max(0.0, 1.0 - (trainer + sync) / wall))}

    def trained(self, sampled: SampledStep) -> None:
        if sampled.result is not None:
            self.algorithm.async_trained(self.config, self.algo_state, sampled.prompts,
                                         sampled.result)
        self.producer.applied()
