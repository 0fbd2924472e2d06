"""The simulated backend: no model, each prompt has a pass rate and a response is a Bernoulli draw.

For budget planning, what-if studies and fast tests. A successful draw's text is the prompt's
answer and a failed one's a wrong answer, so the ordinary exact verifier scores them 1 and 0 and
the training loop needs no special case besides skipping the policy update (``model`` is None).

Every response also gets a length from ``trainer.enginetime.LengthModel`` (wrong answers run
longer; its ``max_tokens`` is the config's ``max_new_tokens``), carried as that many placeholder
token ids (``PlaceholderTokens``: a length without the memory), and the backend keeps a
simulated clock (``sim_seconds``) of an engine with continuous batching (``EngineTimeModel``):
a ``generate`` call is one batch run to completion (the round scheduler's barrier),
``request_engine()`` a queue fed one request at a time (the per-prompt and streaming
schedulers).

``engines=G`` simulates ``G`` data-parallel engines, one per rank of a ``world_size = G`` run:
each prompt stays on one engine (the prefix cache; assigned round-robin in the order prompts
are first seen, so a batch splits evenly), each engine batches its own requests on its own
clock, and ``sim_seconds`` advances by the slowest engine's time (a ``generate`` call returns
when every engine is done).
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from trainer.enginetime import EngineTimeModel, EventEngine, LengthModel
from trainer.types import Generation, Prompt


def wrong_answer(answer: str) -> str:
    """A string no verifier accepts for ``answer``: a different integer when the answer is one
    (so numeric verifiers see a number, just the wrong one), else a marker."""
    try:
        return str(int(answer.strip()) + 1)
    except ValueError:
        return f"not {answer}" if answer else "wrong"


class PlaceholderTokens(Sequence[int]):
    """``length`` token ids, all 0, in constant memory: a simulated response has a length but
    no tokens (a step at paper scale holds 16k responses of up to 4096 tokens)."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = int(length)

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [0] * len(range(*index.indices(self.length)))
        if not -self.length <= index < self.length:
            raise IndexError(index)
        return 0

    def __iter__(self) -> Iterator[int]:
        return iter([0] * self.length)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(("PlaceholderTokens", self.length))

    def __repr__(self) -> str:
        return f"PlaceholderTokens({self.length})"


def length_model(config: Any) -> LengthModel:
    """The ``LengthModel`` a config asks for (its defaults where the config has no such field)."""
    d = LengthModel()
    return LengthModel(max_tokens=int(getattr(config, "max_new_tokens", d.max_tokens)),
                       correct=float(getattr(config, "simulated_length_correct", d.correct)),
                       wrong=float(getattr(config, "simulated_length_wrong", d.wrong)),
                       spread=float(getattr(config, "simulated_length_spread", d.spread)))


class SimulatedBackend:
    """``pass_rate`` of a prompt: ``prompt.metadata["pass_rate"]``, else ``default_pass_rate``
    (``config.simulated_pass_rate``). Draws are seeded per (seed, prompt id), so a prompt's
    responses do not depend on which other prompts are sampled alongside it; sample j of a call
    is the same whether the call asks for j + 1 samples or more."""

    model: Any = None
    tokenizer: Any = None
    # No model: the loop leaves torch's generator (and the import of torch) alone.
    uses_torch = False

    def __init__(self, config: Any = None, prompts: Sequence[Prompt] | None = None, *,
                 default_pass_rate: float | None = None, lengths: LengthModel | None = None,
                 engine_time: EngineTimeModel | None = None, engines: int = 1) -> None:
        if engines < 1:
            raise ValueError(f"engines must be >= 1, got {engines}")
        if default_pass_rate is None:
            default_pass_rate = getattr(config, "simulated_pass_rate", 0.5)
        self.default_pass_rate = float(default_pass_rate)
        self.lengths = lengths or length_model(config)
        self.engine_time = engine_time or EngineTimeModel()
        self.sim_seconds = 0.0  # simulated engine time of every generation so far
        self.engines = engines
        # Samples of each generate call, and of requests through request_engine(): what a
        # pipeline model charges per call (trainer.pipelinetime); KV-cache preemptions.
        self.generate_samples: list[int] = []
        self.request_samples = 0
        self.preemptions = 0
        self.engine_busy_s = 0.0   # engine-seconds spent decoding or prefilling, all engines
        self._engine_of: dict[str, int] = {}
        self.model = None
        self.tokenizer = None

    def engine_of(self, prompt: Prompt) -> int:
        """The engine that draws every sample of ``prompt``."""
        return self._engine_of.setdefault(prompt.id, len(self._engine_of) % self.engines)

    def pass_rate(self, prompt: Prompt) -> float:
        return float(prompt.metadata.get("pass_rate", self.default_pass_rate))

    def draw(self, prompt: Prompt, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(hits, lengths) of the first ``count`` samples of ``prompt`` in a call seeded
        ``seed``."""
        key = zlib.crc32(prompt.id.encode())
        hits = np.random.default_rng([seed, key]).random(count) < self.pass_rate(prompt)
        z = np.random.default_rng([seed, key, 1]).standard_normal(count)
        z_prompt = float(np.random.default_rng([key, 2]).standard_normal())
        return hits, self.lengths.lengths(hits, z_prompt, z)

    def generation(self, prompt: Prompt, hit: bool, length: int) -> Generation:
        return Generation(prompt_id=prompt.id, text=prompt.answer if hit else
                          wrong_answer(prompt.answer), prompt_token_ids=[],
                          response_token_ids=PlaceholderTokens(length),  # type: ignore[arg-type]
                          logprobs=None)

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        out: list[list[Generation]] = []
        engines = [EventEngine(self.engine_time) for _ in range(self.engines)]
        for i, (prompt, count) in enumerate(zip(prompts, counts, strict=True)):
            engine = engines[self.engine_of(prompt)]
            hits, lengths = self.draw(prompt, count, seed)
            if greedy:
                # The greedy answer of a prompt the policy solves more often than not.
                hits = np.full(count, self.pass_rate(prompt) > 0.5)
            for j, length in enumerate(lengths.tolist()):
                engine.submit((i, j), length, i)
            out.append([self.generation(prompt, h, n)
                        for h, n in zip(hits.tolist(), lengths.tolist(), strict=True)])
        # One batch per engine, run until the slowest response of any is done: the barrier of
        # a generate call.
        for engine in engines:
            engine.run_to_completion()
        self.sim_seconds += max(engine.clock for engine in engines)
        self.generate_samples.append(sum(int(c) for c in counts))
        self.preemptions += sum(engine.preemptions for engine in engines)
        self.engine_busy_s += sum(e.busy_seconds + e.prefill_seconds for e in engines)
        return out

    def request_engine(self, count_partial: bool = True) -> SimulatedRequestEngine:
        """A queue fed one request per sample (``trainer.schedulers.RequestEngine``) on this
        backend's simulated clock (it always knows the tokens of unfinished requests)."""
        return SimulatedRequestEngine(self)

    def sync_weights(self) -> None:
        """Nothing to sync: there are no weights."""

    def close(self) -> None:
        """Nothing to release: no engine of its own."""


class SimulatedRequestEngine:
    """``RequestEngine`` over one ``EventEngine`` per data-parallel engine: requests finish in
    simulated-time order (shorter responses first), which is what the streaming scheduler's
    length bias comes from.

    The engines' clocks run apart: a request is submitted in answer to a completion of its own
    prompt, on that prompt's engine, so each engine's timeline depends on its own events only.
    ``step`` advances the engine that is furthest behind, which keeps completions roughly in
    global time order; the step takes as long as the slowest engine."""

    def __init__(self, backend: SimulatedBackend) -> None:
        self.backend = backend
        self.engines = [EventEngine(backend.engine_time) for _ in range(backend.engines)]
        self._engine_of: dict[Hashable, EventEngine] = {}
        self._made: dict[Hashable, Generation] = {}
        self._elapsed = 0.0

    def submit(self, key: Hashable, prompt: Prompt, sample: int, seed: int) -> None:
        hits, lengths = self.backend.draw(prompt, sample + 1, seed)
        self._made[key] = self.backend.generation(prompt, bool(hits[-1]), int(lengths[-1]))
        engine = self.engines[self.backend.engine_of(prompt)]
        self._engine_of[key] = engine
        engine.submit(key, int(lengths[-1]), prompt.id)
        self.backend.request_samples += 1

    def step(self) -> list[tuple[Hashable, Generation]]:
        busy = [e for e in self.engines if e.pending()]
        if not busy:
            return []
        engine = min(busy, key=lambda e: e.clock)
        before = engine.preemptions, engine.busy_seconds + engine.prefill_seconds
        done = engine.step()
        self.backend.preemptions += engine.preemptions - before[0]
        self.backend.engine_busy_s += engine.busy_seconds + engine.prefill_seconds - before[1]
        elapsed = max(e.clock for e in self.engines)
        self.backend.sim_seconds += elapsed - self._elapsed
        self._elapsed = elapsed
        for key in done:
            self._engine_of.pop(key, None)
        return [(key, self._made.pop(key)) for key in done]

    def abort(self, keys: Sequence[Hashable]) -> int:
        tokens = 0
        for engine in self.engines:
            tokens += engine.abort([k for k in keys if self._engine_of.get(k) is engine])
        for key in keys:
            self._made.pop(key, None)
            self._engine_of.pop(key, None)
        return tokens

    def pending(self) -> int:
        return sum(e.pending() for e in self.engines)

    def capacity(self) -> int:
        """Requests one engine runs at once at most (``max_num_seqs``)."""
        return self.backend.engine_time.max_num_seqs

    def engine_of(self, prompt: Prompt) -> int:
        """The engine that serves ``prompt`` (all its requests go there)."""
        return self.backend.engine_of(prompt)

    def pending_per_engine(self) -> list[int]:
        """Unfinished requests of each engine."""
        return [e.pending() for e in self.engines]

    def now(self, prompt: Prompt) -> float:
        """The simulated clock of the engine serving ``prompt``, in seconds (the engines'
        clocks run apart: a prompt's rounds are timed on its own engine's)."""
        return self.engines[self.backend.engine_of(prompt)].clock
