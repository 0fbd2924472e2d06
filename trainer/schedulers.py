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

``per-prompt`` and ``streaming`` talk to a ``RequestEngine`` (one request per sample, submit /
step / abort), which the ``vllm`` and ``simulated`` backends provide through
``backend.request_engine(count_partial)``; ``hf`` has no such engine (one batched ``generate``
per call) and supports ``round`` only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from trainer.sampler import AdaptiveSampler
from trainer.seeds import derive_seed
from trainer.types import Generation, Prompt, RoundStat

__all__ = ["SCHEDULERS", "RequestEngine", "RoundsOutcome", "Scorer", "run_per_prompt",
           "run_rounds", "run_scheduler"]

# The config's ``scheduler`` values (validated in trainer.config).
SCHEDULERS = ("round", "per-prompt", "streaming")

# How often ``should_stop`` is polled while requests are in flight: a platform worker's check is
# a database query, and an engine step can take microseconds (simulated) to milliseconds.
STOP_POLL_S = 0.2
# Backends whose engine takes and aborts single requests (``request_engine()``).
REQUEST_BACKENDS = ("vllm", "simulated")

# Rewards and per-response verifier errors of one prompt's responses.
Scorer = Callable[[Prompt, list[str]], tuple[list[float], list[str | None]]]


@dataclass
class RoundsOutcome:
    """What ``run_rounds`` gathered. ``generations[i]`` and ``errors[i]`` are prompt i's pool in
    observation order (the order ``SamplerResult`` calls the pool index)."""

    generations: list[list[Generation]]
    rewards: list[list[float]]
    errors: list[list[str | None]]
    round_stats: list[RoundStat]
    cancelled: bool = False
    time_generation: float = 0.0
    time_scoring: float = 0.0
    # Response tokens generated but never pooled: requests aborted by the streaming scheduler
    # (or a cancel) and responses that finished after their prompt had stopped.
    tokens_discarded: int = 0


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
        tokens = 0
        for i, g in zip(active, drawn, strict=True):
            r, e = score(prompts[i], [x.text for x in g])
            gens[i].extend(g)
            rewards[i].extend(r)
            errors[i].extend(e)
            idx.extend([i] * len(g))
            rew.extend(r)
            tokens += sum(len(x.response_token_ids) for x in g)
        t2 = time.perf_counter()
        out.time_generation += t1 - t0
        out.time_scoring += t2 - t1
        sampler.observe_many(idx, rew)
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
    """

    def submit(self, key: Hashable, prompt: Prompt, sample: int, seed: int) -> None: ...

    def step(self) -> list[tuple[Hashable, Generation]]: ...

    def abort(self, keys: Sequence[Hashable]) -> int: ...

    def pending(self) -> int: ...


def run_scheduler(scheduler: str, sampler: AdaptiveSampler, prompts: Sequence[Prompt],
                  backend: object, score: Scorer, *, seed: int,
                  on_round: Callable[[RoundStat], None] | None = None,
                  should_stop: Callable[[], bool] | None = None) -> RoundsOutcome:
    """Sample one step with the named scheduler (``SCHEDULERS``)."""
    if scheduler == "round":
        return run_rounds(sampler, prompts, backend, score, seed=seed, on_round=on_round,
                          should_stop=should_stop)
    if scheduler in ("per-prompt", "streaming"):
        engine_of = getattr(backend, "request_engine", None)
        if engine_of is None:
            raise ValueError(f"scheduler {scheduler!r} needs a backend that takes single "
                             f"requests ({', '.join(REQUEST_BACKENDS)}); "
                             f"{type(backend).__name__} has no request_engine()")
        # Only streaming aborts as a matter of course and needs the tokens of unfinished
        # requests; per-prompt spares the engine reporting every request at every step.
        engine = engine_of(count_partial=scheduler == "streaming")
        return run_per_prompt(sampler, prompts, engine, score, seed=seed,
                              streaming=scheduler == "streaming", on_round=on_round,
                              should_stop=should_stop)
    raise ValueError(f"unknown scheduler {scheduler!r}; choose one of {', '.join(SCHEDULERS)}")


def run_per_prompt(sampler: AdaptiveSampler, prompts: Sequence[Prompt], engine: RequestEngine,
                   score: Scorer, *, seed: int, streaming: bool = False,
                   on_round: Callable[[RoundStat], None] | None = None,
                   should_stop: Callable[[], bool] | None = None,
                   stop_poll_s: float = STOP_POLL_S) -> RoundsOutcome:
    """Drive ``sampler`` prompt by prompt on ``engine`` (``per-prompt``; ``streaming=True``:
    ``streaming``). Request (i, t, j) is sample j of prompt i in round t, submitted with the
    round seed ``derive_seed(seed, t)`` that ``run_rounds`` gives round t's ``generate`` call.

    ``should_stop`` is checked before anything is submitted (as ``run_rounds`` does before each
    round) and then after engine steps while requests are in flight, at most every
    ``stop_poll_s`` seconds; when it says stop, every unfinished request is aborted and the
    outcome comes back with ``cancelled=True`` and the sampler unfinalized.
    """
    n_prompts = len(prompts)
    gens: list[list[Generation]] = [[] for _ in range(n_prompts)]
    rewards: list[list[float]] = [[] for _ in range(n_prompts)]
    errors: list[list[str | None]] = [[] for _ in range(n_prompts)]
    out = RoundsOutcome(gens, rewards, errors, sampler.round_stats)
    sampler.start_per_prompt()
    # Per prompt: the keys of its current round still in flight, what came back of that round
    # (streaming: already observed), and its round's tokens.
    inflight: dict[int, set[tuple[int, int, int]]] = {}
    arrived: dict[int, dict[int, Generation]] = {}
    round_tokens = [0] * n_prompts
    emitted = len(sampler.round_stats)

    def submit_round(i: int) -> None:
        t = sampler.prompt_round(i)
        count = sampler.round_counts([i])[0]
        keys = {(i, t, j) for j in range(count)}
        inflight[i], arrived[i], round_tokens[i] = keys, {}, 0
        for j in range(count):
            engine.submit((i, t, j), prompts[i], j, derive_seed(seed, t))

    def pool(i: int, texts_gens: list[Generation]) -> None:
        t0 = time.perf_counter()
        r, e = score(prompts[i], [g.text for g in texts_gens])
        out.time_scoring += time.perf_counter() - t0
        for g, reward, err in zip(texts_gens, r, e, strict=True):
            sampler.observe(i, reward)
            gens[i].append(g)
            rewards[i].append(reward)
            errors[i].append(err)

    def close_round(i: int) -> None:
        nonlocal emitted
        again = sampler.end_prompt_round(i, tokens=round_tokens[i])
        stragglers = sorted(inflight.pop(i, set()))
        arrived.pop(i, None)
        if stragglers:
            out.tokens_discarded += engine.abort(stragglers)
        while emitted < len(sampler.round_stats):
            if on_round is not None:
                on_round(sampler.round_stats[emitted])
            emitted += 1
        if again:
            submit_round(i)

    if should_stop is not None and should_stop():
        out.cancelled = True
        return out
    for i in range(n_prompts):
        if sampler.is_open(i):
            submit_round(i)
    early_exit = streaming and sampler.has_exit_rule
    last_poll = time.monotonic()
    while inflight:
        t0 = time.perf_counter()
        finished = engine.step()
        out.time_generation += time.perf_counter() - t0
        for key, g in finished:
            i, t, j = key  # type: ignore[misc]
            if i not in inflight or key not in inflight[i]:
                # Finished in the same engine step as the sample that stopped its prompt:
                # over-drawn, never pooled.
                out.tokens_discarded += len(g.response_token_ids)
                continue
            inflight[i].discard(key)
            round_tokens[i] += len(g.response_token_ids)
            if early_exit:
                pool(i, [g])
                # A full update group first: stopping ada-pos at a first-sample positive would
                # leave a pool of one, whose advantage is 0 (round-based pools hold >= M >= n).
                if (sampler.rule_met(i) and sampler.pool_size(i) >= sampler.group_size) \
                        or not inflight[i]:
                    close_round(i)
                continue
            arrived[i][j] = g
            if not inflight[i]:
                # The whole round is back: observe it in sample order, as run_rounds does.
                pool(i, [arrived[i][k] for k in sorted(arrived[i])])
                close_round(i)
        if should_stop is None or not inflight or time.monotonic() - last_poll < stop_poll_s:
            continue
        last_poll = time.monotonic()
        if should_stop():
            keys = sorted(k for ks in inflight.values() for k in ks)
            out.tokens_discarded += engine.abort(keys)
            out.cancelled = True
            return out
    return out
