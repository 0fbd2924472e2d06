"""Generation schedulers: how the requests of one step's adaptive sampling reach the engine.

Every scheduler drives the same ``AdaptiveSampler`` (docs/architecture.md, "Schedulers and
backends"):

- ``round`` (``run_rounds``): round t for every active prompt in one batched
  ``generate`` call, then round t+1. The slowest response of round t holds every prompt back,
  and later rounds run small batches.
- ``per-prompt``: all first-round requests go in at once; as soon as the M samples of a prompt's
  current round are back, its exit rule is checked and, if it is still active with rounds left,
  its next M requests go in. No prompt waits for another. Samples are observed in sample order
  once a prompt's round is complete, and request seeds depend only on (run seed, step, round,
  prompt, sample), so the pools, kept groups and advantages are exactly those of ``round``: a
  systems change, not an algorithmic one.
- ``streaming``: like ``per-prompt``, but the exit rule is checked as each sample arrives; once
  it holds (and the pool has at least n samples, a full update group), the prompt's in-flight
  requests are aborted and no more are sent. Short responses
  finish first, so the pool leans towards them: a different estimator (length bias). The tokens
  generated and then thrown away (aborted, or finished after the prompt had already stopped) are
  counted in ``RoundsOutcome.tokens_discarded``.

Early rounds (``early_rounds``, the per-prompt schedulers): a request's sample does not depend
on when it is submitted, so a prompt's round t+1 may go in before its round t is back.
``certain`` (the default) does so once no outcome of round t's samples still in flight can meet
the exit rule: exactly the pools and tokens of waiting, without the wait. ``speculative`` also
does so on spare engine capacity before round t is decided and aborts the early round if the
prompt exits: the same pools, paid for in discarded tokens.

``per-prompt`` and ``streaming`` talk to a ``RequestEngine`` (one request per sample, submit /
step / abort), which the ``vllm`` and ``simulated`` backends provide through
``backend.request_engine(count_partial)``; ``hf`` has no such engine (one batched ``generate``
per call) and supports ``round`` only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainer.config import DEFAULT_SPECULATIVE_CAPACITY, EARLY_ROUNDS, SCHEDULERS
from trainer.rewards import score_and_shape
from trainer.sampler import AdaptiveSampler
from trainer.seeds import derive_seed
from trainer.types import Generation, Prompt, RoundsOutcome, RoundStat, Scorer

__all__ = ["EARLY_ROUNDS", "SCHEDULERS", "Batch", "BatchRule", "BatchesOutcome", "RequestEngine",
           "RoundsOutcome", "Scorer", "request_engine", "run_batches", "run_per_prompt",
           "run_rounds", "run_scheduler"]

# The config's ``scheduler`` and ``early_rounds`` values and the default speculative capacity
# are the config's (trainer.config), imported above for the schedulers' callers.

# How often ``should_stop`` is polled while requests are in flight: a platform worker's check is
# a database query, and an engine step can take microseconds (simulated) to milliseconds.
STOP_POLL_S = 0.2
# Backends whose engine takes and aborts single requests (``request_engine()``).
REQUEST_BACKENDS = ("vllm", "simulated")

def run_rounds(sampler: AdaptiveSampler, prompts: Sequence[Prompt], backend: object,
               score: Scorer, *, seed: int,
               on_round: Callable[[RoundStat], None] | None = None,
               should_stop: Callable[[], bool] | None = None) -> RoundsOutcome:
    """Drive ``sampler`` round by round: draw ``round_counts`` responses for every active prompt
    in one batched ``backend.generate`` call, score them, observe, close the round.

    Round t's generation seed is ``derive_seed(seed, t)``. ``should_stop`` is checked between
    rounds; when it says stop, the outcome comes back with ``cancelled=True`` and the sampler is
    left unfinalized.
    """
    n_prompts = len(prompts)
    gens: list[list[Generation]] = [[] for _ in range(n_prompts)]
    rewards: list[list[float]] = [[] for _ in range(n_prompts)]
    errors: list[list[str | None]] = [[] for _ in range(n_prompts)]
    out = RoundsOutcome(gens, rewards, errors, sampler.round_stats)
    while not sampler.done:
        if should_stop is not None and should_stop():
            out.cancelled = True
            return out
        active = sampler.active_indices()
        t0 = time.perf_counter()
        drawn = backend.generate([prompts[i] for i in active],  # type: ignore[attr-defined]
                                 sampler.round_counts(active),
                                 seed=derive_seed(seed, sampler.round))
        t1 = time.perf_counter()
        idx: list[int] = []
        rew: list[float] = []
        scores: list[float] = []
        tokens = 0
        for i, g in zip(active, drawn, strict=True):
            r, sc, e = score_and_shape(score, prompts[i], g)
            gens[i].extend(g)
            rewards[i].extend(r)
            errors[i].extend(e)
            idx.extend([i] * len(g))
            rew.extend(r)
            scores.extend(sc)
            tokens += sum(len(x.response_token_ids) for x in g)
        t2 = time.perf_counter()
        out.time_generation += t1 - t0
        out.time_scoring += t2 - t1
        sampler.observe_many(idx, rew, scores)
        stat = sampler.end_round(tokens=tokens)
        if on_round is not None:
            on_round(stat)
    return out


class RequestEngine(Protocol):
    """An engine fed one request per sample.

    ``submit(key, prompt, sample, seed)`` queues sample ``sample`` of ``prompt`` as a call
    ``generate(..., seed=seed)`` would draw it (so the request's own seed is
    ``request_seed(seed, prompt.id, sample)``); ``step()`` advances the engine and returns the
    requests that finished, as (key, generation); ``abort(keys)`` drops unfinished requests and
    returns the response tokens they had generated; ``pending()`` counts unfinished requests.

    Optional: ``capacity()``, the most requests one engine runs at once (its ``max_num_seqs``;
    speculative early rounds need it); ``now(prompt)``, the clock in seconds of the engine
    that serves ``prompt`` (the simulated clock; by default the wall clock); and, over several
    data-parallel engines, ``engine_of(prompt)`` (the index of the engine that serves, or will
    serve, ``prompt``: a prompt's requests stay on its engine) with ``pending_per_engine()``
    (unfinished requests of each engine), so that speculation measures spare capacity per
    engine (by default: one engine).
    """

    def submit(self, key: Hashable, prompt: Prompt, sample: int, seed: int) -> None: ...

    def step(self) -> list[tuple[Hashable, Generation]]: ...

    def abort(self, keys: Sequence[Hashable]) -> int: ...

    def pending(self) -> int: ...


def run_scheduler(scheduler: str, sampler: AdaptiveSampler, prompts: Sequence[Prompt],
                  backend: object, score: Scorer, *, seed: int,
                  on_round: Callable[[RoundStat], None] | None = None,
                  should_stop: Callable[[], bool] | None = None, early_rounds: str = "off",
                  speculative_capacity: float = DEFAULT_SPECULATIVE_CAPACITY) -> RoundsOutcome:
    """Sample one step with the named scheduler (``SCHEDULERS``) and, for the per-prompt
    schedulers, early rounds (``EARLY_ROUNDS``; ``round`` takes only ``off``)."""
    if scheduler == "round":
        if early_rounds != "off":
            raise ValueError(f"the round scheduler decides every round before the next goes "
                             f"in: early_rounds must be 'off', got {early_rounds!r}")
        return run_rounds(sampler, prompts, backend, score, seed=seed, on_round=on_round,
                          should_stop=should_stop)
    if scheduler in ("per-prompt", "streaming"):
        engine = request_engine(scheduler, backend)
        return run_per_prompt(sampler, prompts, engine, score, seed=seed,
                              streaming=scheduler == "streaming", early_rounds=early_rounds,
                              speculative_capacity=speculative_capacity, on_round=on_round,
                              should_stop=should_stop)
    raise ValueError(f"unknown scheduler {scheduler!r}; choose one of {', '.join(SCHEDULERS)}")


def _engine_load(engine: RequestEngine) -> tuple[Callable[[Prompt], int], list[int]]:
    """The engine that serves a prompt, and each engine's unfinished requests (one engine
    unless the request engine spans several: ``RequestEngine``)."""
    engine_of = getattr(engine, "engine_of", None)
    per_engine = getattr(engine, "pending_per_engine", None)
    if engine_of is None or per_engine is None:
        return (lambda prompt: 0), [engine.pending()]
    return engine_of, list(per_engine())


def request_engine(scheduler: str, backend: object) -> RequestEngine:
    """The backend's single-request engine for a per-prompt scheduler."""
    engine_of = getattr(backend, "request_engine", None)
    if engine_of is None:
        raise ValueError(f"scheduler {scheduler!r} needs a backend that takes single "
                         f"requests ({', '.join(REQUEST_BACKENDS)}); "
                         f"{type(backend).__name__} has no request_engine()")
    # Only streaming aborts as a matter of course and needs the tokens of unfinished
    # requests; per-prompt spares the engine reporting every request at every step.
    return engine_of(count_partial=scheduler == "streaming")


Key = tuple[int, int, int]  # (prompt, round, sample)


@dataclass
class _Flight:
    """One prompt's requests in flight, round by round (its current round, the sampler's
    ``prompt_round``, and any later ones that went in early)."""

    submitted: int = 0                    # the highest round submitted
    keys: dict[int, set[Key]] = field(default_factory=dict)           # round -> in flight
    # round -> sample -> (generation, reward, verifier error, verifier score), in arrival order
    arrived: dict[int, dict[int, tuple[Generation, float, str | None, float]]] = field(
        default_factory=dict)
    observed: dict[int, int] = field(default_factory=dict)  # round -> results observed (streaming)
    tokens: dict[int, int] = field(default_factory=dict)    # round -> response tokens back
    sent_at: dict[int, float] = field(default_factory=dict)  # round -> submitted at (engine clock)
    saved_s: float = 0.0                  # head start of this prompt's kept early rounds


def run_per_prompt(sampler: AdaptiveSampler, prompts: Sequence[Prompt], engine: RequestEngine,
                   score: Scorer, *, seed: int, streaming: bool = False,
                   early_rounds: str = "off",
                   speculative_capacity: float = DEFAULT_SPECULATIVE_CAPACITY,
                   on_round: Callable[[RoundStat], None] | None = None,
                   should_stop: Callable[[], bool] | None = None,
                   stop_poll_s: float = STOP_POLL_S) -> RoundsOutcome:
    """Drive ``sampler`` prompt by prompt on ``engine`` (``per-prompt``; ``streaming=True``:
    ``streaming``). Request (i, t, j) is sample j of prompt i in round t, submitted with the
    round seed ``derive_seed(seed, t)`` that ``run_rounds`` gives round t's ``generate`` call,
    so a request draws the same response whenever it is submitted.

    ``early_rounds`` (``EARLY_ROUNDS``): ``off`` submits a prompt's round t+1 once its round t
    is back and decided. ``certain`` submits it as soon as no outcome of round t's samples
    still in flight can meet the exit rule (``AdaptiveSampler.exit_possible``): it would be
    drawn anyway, so the pools and the tokens are those of ``off`` and only the waiting goes.
    ``speculative`` also submits the next round of prompts whose current round is undecided
    while their engine runs fewer than ``speculative_capacity`` x ``engine.capacity()``
    requests, least likely to exit first (``exit_probability``), one undecided round per
    prompt at most and never past round N; if the prompt then exits, the early round is
    aborted and its tokens counted as discarded. Either way a round's samples are observed
    only once it is the prompt's current round (in sample order; streaming: in arrival
    order), so the sampler sees what ``off`` shows it.

    ``should_stop`` is checked before anything is submitted (as ``run_rounds`` does before each
    round) and then after engine steps while requests are in flight, at most every
    ``stop_poll_s`` seconds; when it says stop, every unfinished request (early rounds too) is
    aborted and the outcome comes back with ``cancelled=True`` and the sampler unfinalized.
    """
    if early_rounds not in EARLY_ROUNDS:
        raise ValueError(f"unknown early_rounds {early_rounds!r}; choose one of "
                         f"{', '.join(EARLY_ROUNDS)}")
    step = _PerPrompt(sampler, prompts, engine, score, seed=seed, streaming=streaming,
                      early_rounds=early_rounds, speculative_capacity=speculative_capacity,
                      on_round=on_round)
    if should_stop is not None and should_stop():
        step.out.cancelled = True
        return step.out
    step.start()
    last_poll = time.monotonic()
    while step.flights:
        step.advance()
        if should_stop is None or not step.flights or time.monotonic() - last_poll < stop_poll_s:
            continue
        last_poll = time.monotonic()
        if should_stop():
            step.cancel()
            return step.out
    return step.out


class _PerPrompt:
    """The state of one ``run_per_prompt`` call: every prompt's requests in flight
    (``flights``), the outcome gathered so far, and the speculation candidates; its methods
    are the steps of the scheduler."""

    def __init__(self, sampler: AdaptiveSampler, prompts: Sequence[Prompt],
                 engine: RequestEngine, score: Scorer, *, seed: int, streaming: bool,
                 early_rounds: str, speculative_capacity: float,
                 on_round: Callable[[RoundStat], None] | None) -> None:
        self.sampler, self.prompts, self.engine, self.score = sampler, prompts, engine, score
        self.seed, self.early_rounds, self.on_round = seed, early_rounds, on_round
        n_prompts = len(prompts)
        self.out = RoundsOutcome([[] for _ in range(n_prompts)], [[] for _ in range(n_prompts)],
                                 [[] for _ in range(n_prompts)], sampler.round_stats)
        sampler.start_per_prompt()
        self.flights: dict[int, _Flight] = {}
        self.emitted = len(sampler.round_stats)
        self.clock = getattr(engine, "now", None)
        self.early_exit = streaming and sampler.has_exit_rule
        self.speculate_below = _speculation_threshold(engine, early_rounds,
                                                      speculative_capacity)
        # Prompts whose next round is undecided, by their chance to exit (speculative only).
        self.candidates: dict[int, float] = {}

    def now(self, i: int) -> float:
        return time.perf_counter() if self.clock is None else float(self.clock(self.prompts[i]))

    def start(self) -> None:
        """Every open prompt's first round in; with early rounds, the rounds already certain
        (and speculated ones)."""
        n_prompts = len(self.prompts)
        for i in range(n_prompts):
            if self.sampler.is_open(i):
                self.flights[i] = _Flight()
                self.submit(i, 1)
        if self.early_rounds != "off":
            for i in range(n_prompts):
                self.plan(i)
            if self.candidates:
                self.speculate()

    def advance(self) -> None:
        """One engine step: score what finished, settle the prompts it touched, plan and
        speculate their next rounds."""
        out = self.out
        t0 = time.perf_counter()
        finished = self.engine.step()
        out.time_generation += time.perf_counter() - t0
        touched: list[int] = []
        t0 = time.perf_counter()
        for key, g in finished:
            i, t, j = key  # type: ignore[misc]
            fl = self.flights.get(i)
            if fl is None or key not in fl.keys.get(t, ()):
                # Finished in the same engine step as the sample that stopped its prompt:
                # over-drawn, never pooled.
                out.tokens_discarded += len(g.response_token_ids)
                continue
            fl.keys[t].discard(key)
            fl.tokens[t] += len(g.response_token_ids)
            r, sc, e = score_and_shape(self.score, self.prompts[i], [g])
            fl.arrived[t][j] = (g, r[0], e[0], sc[0])
            if not touched or touched[-1] != i:
                touched.append(i)
        out.time_scoring += time.perf_counter() - t0
        for i in dict.fromkeys(touched):
            self.settle(i)
            if self.early_rounds != "off" and i in self.flights:
                self.plan(i)
        if self.candidates:
            self.speculate()

    def cancel(self) -> None:
        """Abort every unfinished request (early rounds too)."""
        keys = sorted(k for fl in self.flights.values() for ks in fl.keys.values() for k in ks)
        self.out.tokens_discarded += self.engine.abort(keys)
        self.out.cancelled = True

    def submit(self, i: int, t: int) -> None:
        fl, sampler = self.flights[i], self.sampler
        count = sampler.round_counts([i])[0]
        fl.keys[t] = {(i, t, j) for j in range(count)}
        fl.arrived[t], fl.observed[t], fl.tokens[t] = {}, 0, 0
        fl.sent_at[t] = self.now(i)
        fl.submitted = t
        if t > sampler.prompt_round(i):
            self.out.early_rounds_started += 1
        for j in range(count):
            self.engine.submit((i, t, j), self.prompts[i], j, derive_seed(self.seed, t))

    def observe(self, i: int, items: list[tuple[Generation, float, str | None, float]]) -> None:
        for g, reward, err, score in items:
            self.sampler.observe(i, reward, score)
            self.out.generations[i].append(g)
            self.out.rewards[i].append(reward)
            self.out.errors[i].append(err)

    def emit(self) -> None:
        stats = self.sampler.round_stats
        while self.emitted < len(stats):
            if self.on_round is not None:
                self.on_round(stats[self.emitted])
            self.emitted += 1

    def stop_prompt(self, i: int, t: int) -> None:
        # The prompt stopped in round t: abort what is still in flight (stragglers of round t,
        # early rounds), and count the tokens of what came back but was never pooled.
        out = self.out
        fl = self.flights.pop(i)
        self.candidates.pop(i, None)
        keys = sorted(k for ks in fl.keys.values() for k in ks)
        if keys:
            out.tokens_discarded += self.engine.abort(keys)
        for u, got in fl.arrived.items():
            unpooled = list(got.values())[fl.observed[u]:] if u == t else list(got.values())
            out.tokens_discarded += sum(len(g.response_token_ids) for g, *_ in unpooled)
        out.early_rounds_discarded += fl.submitted - t

    def close(self, i: int, t: int) -> bool:
        # Round t of prompt i is observed: decide it. True: round t+1 went in early, settle it.
        fl = self.flights[i]
        again = self.sampler.end_prompt_round(i, tokens=fl.tokens[t])
        self.emit()
        if not again:
            self.stop_prompt(i, t)
            return False
        for table in (fl.keys, fl.arrived, fl.observed, fl.tokens, fl.sent_at):
            del table[t]
        if fl.submitted > t:
            fl.saved_s += max(0.0, self.now(i) - fl.sent_at[t + 1])
            self.out.early_rounds_saved_s = max(self.out.early_rounds_saved_s, fl.saved_s)
            return True
        self.submit(i, t + 1)
        return False

    def settle(self, i: int) -> None:
        # Observe what prompt i's current round has back and decide the round once it can be.
        sampler = self.sampler
        while i in self.flights:
            fl = self.flights[i]
            t = sampler.prompt_round(i)
            got = fl.arrived[t]
            if self.early_exit:
                for item in list(got.values())[fl.observed[t]:]:
                    self.observe(i, [item])
                    fl.observed[t] += 1
                    # A full update group first: stopping ada-pos at a first-sample positive
                    # would leave a pool of one, whose advantage is 0 (round-based pools hold
                    # >= M >= n).
                    if sampler.rule_met(i) and sampler.pool_size(i) >= sampler.group_size:
                        sampler_stop = not sampler.end_prompt_round(i, tokens=fl.tokens[t])
                        assert sampler_stop  # the rule holds: end_prompt_round retires it
                        self.emit()
                        self.stop_prompt(i, t)
                        return
                if fl.keys[t]:
                    return
            else:
                if fl.keys[t]:
                    return
                # The whole round is back: observe it in sample order, as run_rounds does.
                self.observe(i, [got[j] for j in sorted(got)])
                fl.observed[t] = len(got)
            if not self.close(i, t):
                return

    def _unobserved(self, i: int, last: int) -> tuple[int, int, int]:
        # (positives, negatives) back but not yet observed, and requests still out, over
        # prompt i's rounds from its current one to ``last``.
        fl = self.flights[i]
        pos = neg = outstanding = 0
        for v in range(self.sampler.prompt_round(i), last + 1):
            for _, reward, _, score in list(fl.arrived[v].values())[fl.observed[v]:]:
                if self.sampler.is_positive(reward, score):
                    pos += 1
                else:
                    neg += 1
            outstanding += len(fl.keys[v])
        return pos, neg, outstanding

    def exit_possible_after(self, i: int, u: int) -> bool:
        # Can prompt i still exit at the end of round u (>= its current round), whatever its
        # requests in flight in rounds up to u return?
        pos, neg, outstanding = self._unobserved(i, u)
        return self.sampler.exit_possible(i, outstanding, extra_pos=pos, extra_neg=neg,
                                          partial=self.early_exit)

    def plan(self, i: int) -> None:
        # Submit prompt i's next rounds while they are certain; note it as a speculation
        # candidate when its only undecided round is its last one submitted.
        sampler = self.sampler
        self.candidates.pop(i, None)
        while i in self.flights:
            fl = self.flights[i]
            if fl.submitted >= sampler.max_rounds:
                return
            undecided = next((u for u in range(sampler.prompt_round(i), fl.submitted + 1)
                              if self.exit_possible_after(i, u)), None)
            if undecided is None:
                self.submit(i, fl.submitted + 1)  # certain: drawn whatever comes back
                continue
            if self.early_rounds == "speculative" and undecided == fl.submitted:
                pos, neg, outstanding = self._unobserved(i, fl.submitted)
                self.candidates[i] = sampler.exit_probability(i, outstanding, extra_pos=pos,
                                                              extra_neg=neg)
            return

    def speculate(self) -> None:
        # Spare capacity per engine: a prompt's requests stay on its engine, so a full engine
        # cannot take a speculated round however empty the others are.
        engine_of, load = _engine_load(self.engine)
        below, candidates = self.speculate_below, self.candidates
        if min(load) >= below:
            return
        for i in sorted(candidates, key=lambda k: (candidates[k], k)):
            e = engine_of(self.prompts[i])
            if load[e] >= below:
                continue
            del candidates[i]
            fl = self.flights[i]
            self.submit(i, fl.submitted + 1)
            load[e] += len(fl.keys[fl.submitted])
            self.plan(i)
            if min(load) >= below:
                return


# --- further batches drawn early (DAPO's dynamic sampling) -------------------------------------

@dataclass
class Batch:
    """One generation batch of a step that draws batches of prompts until enough groups count
    (DAPO): its one-round sampler, its prompts, its generation seed (request seeds as round 1
    of ``run_per_prompt``), where its round statistics go, and the caller's ``tag``."""

    sampler: AdaptiveSampler
    prompts: Sequence[Prompt]
    seed: int
    on_round: Callable[[RoundStat], None] | None = None
    tag: object = None


@dataclass
class BatchRule:
    """When a further batch is needed: while fewer than ``target`` groups count over the batches
    drawn so far, and fewer than ``max_batches`` were drawn. ``counts(values, outstanding)``
    says, of one prompt whose ``values`` are back and ``outstanding`` samples are still out,
    whether its group counts for sure and whether it still may (the algorithm's rule: DAPO's
    ``group_signal_bounds``); a sample's value is ``value(reward, verifier score)`` (DAPO: its
    ``dapo_filter_metric``; by default the reward)."""

    target: int
    max_batches: int
    counts: Callable[[Sequence[float], int], tuple[bool, bool]]
    value: Callable[[float, float], float] = field(default=lambda reward, score: reward)


@dataclass
class BatchesOutcome:
    """What ``run_batches`` drew: the batches kept, in draw order, each with its own outcome
    (batch 0's carries the step's timings and early-batch counts), and whether it was
    cancelled."""

    batches: list[tuple[Batch, RoundsOutcome]]
    cancelled: bool = False


@dataclass
class _Drawn:
    batch: Batch
    out: RoundsOutcome
    keys: dict[int, set[tuple[int, int, int]]]               # prompt -> requests in flight
    arrived: dict[int, dict[int, tuple[Generation, float, str | None, float]]]
    sure: int = 0
    maybe: int = 0
    open_prompts: int = 0
    emitted: bool = False
    sent_at: float = 0.0
    early: bool = False


def run_batches(make_batch: Callable[[int], Batch | None], rule: BatchRule,
                engine: RequestEngine, score: Scorer, *, early_rounds: str = "certain",
                speculative_capacity: float = DEFAULT_SPECULATIVE_CAPACITY,
                should_stop: Callable[[], bool] | None = None,
                stop_poll_s: float = STOP_POLL_S) -> BatchesOutcome:
    """Draw batches ``make_batch(0)``, ``make_batch(1)``, ... (``None``: no prompts left) of
    one-round samplers on ``engine`` until ``rule`` says no further batch is needed: exactly
    the batches a batch-after-batch loop draws, with the same samples (request (k, i, j) is
    sample j of prompt i of batch k, seeded as round 1 of ``run_per_prompt``).

    ``early_rounds``: ``off`` draws batch k+1 once batches 0..k are back; ``certain`` as soon
    as it is sure to be needed (even if every group still in flight counted, fewer than
    ``rule.target`` would), so not one token more is drawn; ``speculative`` also, while the
    engine runs fewer than ``speculative_capacity`` x ``capacity()`` requests, draws the next
    batch once the current one is sure to be needed, and aborts it (its tokens counted as
    discarded) once the batches before it are sure to be enough. A batch's round statistics
    go out once every batch before it is back, so an aborted batch reports none.
    """
    if early_rounds not in EARLY_ROUNDS:
        raise ValueError(f"unknown early_rounds {early_rounds!r}; choose one of "
                         f"{', '.join(EARLY_ROUNDS)}")
    run = _Batches(make_batch, rule, engine, score, early_rounds=early_rounds,
                   speculative_capacity=speculative_capacity)
    if should_stop is not None and should_stop():
        run.result.cancelled = True
        return run.result
    run.launch()
    if not run.drawn:
        return run.result
    run.decide()
    last_poll = time.monotonic()
    while any(d.open_prompts for d in run.drawn):
        run.advance()
        run.decide()
        if should_stop is None or time.monotonic() - last_poll < stop_poll_s:
            continue
        last_poll = time.monotonic()
        if should_stop():
            run.cancel()
            break
    run.result.batches = [(d.batch, d.out) for d in run.drawn]
    return run.result


class _Batches:
    """The state of one ``run_batches`` call: the batches drawn so far (``drawn``), whether
    the prompts ran out, the outcome; its methods are the steps of the scheduler."""

    def __init__(self, make_batch: Callable[[int], Batch | None], rule: BatchRule,
                 engine: RequestEngine, score: Scorer, *, early_rounds: str,
                 speculative_capacity: float) -> None:
        self.make_batch, self.rule, self.engine, self.score = make_batch, rule, engine, score
        self.early_rounds = early_rounds
        self.speculate_below = _speculation_threshold(engine, early_rounds,
                                                      speculative_capacity)
        self.clock = getattr(engine, "now", None)
        self.drawn: list[_Drawn] = []
        self.result = BatchesOutcome([])
        self.exhausted = False

    def now(self, d: _Drawn) -> float:
        if self.clock is None or not d.batch.prompts:
            return time.perf_counter()
        return float(self.clock(d.batch.prompts[0]))

    def bounds(self, d: _Drawn, i: int) -> tuple[bool, bool]:
        value = self.rule.value
        return self.rule.counts([value(r, sc) for _, r, _, sc in d.arrived[i].values()],
                                len(d.keys[i]))

    def launch(self) -> bool:
        """Draw the next batch (False: the prompts ran out)."""
        drawn = self.drawn
        k = len(drawn)
        batch = self.make_batch(k)
        if batch is None:
            self.exhausted = True
            return False
        s = batch.sampler
        if s.max_rounds != 1 or s.has_exit_rule:
            raise ValueError("run_batches draws one-round batches (GRPO groups); this sampler "
                             f"takes up to {s.max_rounds} rounds")
        s.start_per_prompt()
        n = len(batch.prompts)
        d = _Drawn(batch, RoundsOutcome([[] for _ in range(n)], [[] for _ in range(n)],
                                        [[] for _ in range(n)], s.round_stats), {}, {})
        d.early = any(e.open_prompts for e in drawn)
        d.sent_at = self.now(d)
        if d.early:
            drawn[0].out.early_rounds_started += 1
        drawn.append(d)
        for i in range(n):
            if not s.is_open(i):
                continue
            count = s.round_counts([i])[0]
            d.keys[i] = {(k, i, j) for j in range(count)}
            d.arrived[i] = {}
            d.open_prompts += 1
            for j in range(count):
                self.engine.submit((k, i, j), batch.prompts[i], j, derive_seed(batch.seed, 1))
        for i in d.keys:
            sure, maybe = self.bounds(d, i)
            d.sure += sure
            d.maybe += maybe
        return True

    def abort_from(self, m: int) -> None:
        first = self.drawn[0].out
        for d in self.drawn[m:]:
            keys = sorted(k for ks in d.keys.values() for k in ks)
            if keys:
                first.tokens_discarded += self.engine.abort(keys)
            first.tokens_discarded += sum(len(g.response_token_ids) for got in d.arrived.values()
                                          for g, *_ in got.values())
            first.early_rounds_discarded += 1
        del self.drawn[m:]

    def decide(self) -> None:
        """Drop the batches the ones before them are sure to make unneeded, report the batches
        now sure to be kept, then draw the next batch while it is certain (or speculated)."""
        drawn, rule = self.drawn, self.rule
        sure = maybe = 0
        back = True
        for m, d in enumerate(drawn):
            if m and sure >= rule.target:
                self.abort_from(m)
                break
            if back and not d.emitted:
                if d.early:
                    drawn[0].out.early_rounds_saved_s += max(0.0, self.now(d) - d.sent_at)
                    d.early = False  # counted once: the head start it had when it was sure
                if not d.open_prompts:
                    d.emitted = True
                    if d.batch.on_round is not None:
                        for stat in d.batch.sampler.round_stats:
                            d.batch.on_round(stat)
            back = back and not d.open_prompts
            sure += d.sure
            maybe += d.maybe
        while not self.exhausted and len(drawn) < rule.max_batches:
            if maybe < rule.target and (self.early_rounds != "off" or back):
                pass  # certain: needed whatever comes back
            elif self.early_rounds == "speculative" and sure < rule.target \
                    and maybe - drawn[-1].maybe < rule.target \
                    and max(_engine_load(self.engine)[1]) < self.speculate_below:
                # Speculated: the last batch is itself sure to be needed, and every engine
                # has room (a batch's prompts spread over all of them).
                pass
            else:
                return
            if not self.launch():
                return
            maybe += drawn[-1].maybe
            sure += drawn[-1].sure

    def advance(self) -> None:
        """One engine step: score what finished; a group that is all back is observed in
        sample order, as run_rounds does."""
        drawn = self.drawn
        first = drawn[0].out
        t0 = time.perf_counter()
        finished = self.engine.step()
        first.time_generation += time.perf_counter() - t0
        t0 = time.perf_counter()
        for key, g in finished:
            k, i, j = key  # type: ignore[misc]
            d = drawn[k] if k < len(drawn) else None
            if d is None or key not in d.keys.get(i, ()):
                first.tokens_discarded += len(g.response_token_ids)
                continue
            was = self.bounds(d, i)
            d.keys[i].discard(key)
            r, sc, e = score_and_shape(self.score, d.batch.prompts[i], [g])
            d.arrived[i][j] = (g, r[0], e[0], sc[0])
            sure, maybe = self.bounds(d, i)
            d.sure += sure - was[0]
            d.maybe += maybe - was[1]
            if d.keys[i]:
                continue
            got = d.arrived[i]
            for jj in sorted(got):
                gen, reward, err, score = got[jj]
                d.batch.sampler.observe(i, reward, score)
                d.out.generations[i].append(gen)
                d.out.rewards[i].append(reward)
                d.out.errors[i].append(err)
            d.batch.sampler.end_prompt_round(
                i, tokens=sum(len(x.response_token_ids) for x, *_ in got.values()))
            d.open_prompts -= 1
        first.time_scoring += time.perf_counter() - t0

    def cancel(self) -> None:
        keys = sorted(k for d in self.drawn for ks in d.keys.values() for k in ks)
        self.drawn[0].out.tokens_discarded += self.engine.abort(keys)
        self.result.cancelled = True


def _speculation_threshold(engine: Any, early_rounds: str, speculative_capacity: float) -> float:
    """Running requests below which an engine has room to speculate (0: never speculate)."""
    if early_rounds != "speculative":
        return 0.0
    capacity = getattr(engine, "capacity", None)
    if capacity is None:
        raise ValueError(f"early_rounds 'speculative' needs an engine that reports its "
                         f"batch limit (capacity()); {type(engine).__name__} does not")
    return speculative_capacity * capacity()
