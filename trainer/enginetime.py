"""Models behind the simulated backend's clock: how long responses are, and how long an engine
with continuous batching (vLLM) takes to generate them. Pure numpy; hand-written (no library
models an LLM engine's step time at this level), kept small on purpose.

**Response lengths** (``LengthModel``). Math-reasoning policies write longer wrong answers than
right ones (they wander, retry, or run into the length limit). A response's length in tokens is
``min(max_tokens, ceil(f * max_tokens * exp(spread * z_prompt + spread * z)))`` with ``f`` the
median fraction of the limit for a correct (``correct``) or a wrong (``wrong``) answer, ``z`` a
standard normal per sample and ``z_prompt`` one per prompt (some problems need long solutions
whoever answers). Defaults: medians at 30% and 60% of the limit, spread 0.5; with the limit at
the paper's 2048 tokens (``PAPER_MAX_RESPONSE_TOKENS``) a right answer's median is about 615
tokens, a wrong one's about 1230, and about a quarter of wrong answers (with the per-prompt and
per-sample spreads together) run into the limit.

**Engine time** (``EngineTimeModel``). One decode step of a batch of ``b`` running sequences
holding ``c`` context tokens in all (prompt + generated so far) takes
``step_s + seq_s * b + kv_token_s * c`` seconds: a fixed part (reading the weights once, launch
and scheduler overhead), a per-sequence part (the matmuls, sampling) and a part that grows with
the KV cache attention reads. A new prompt's prefill costs ``prefill_token_s`` per prompt token,
once per prompt and step (the M requests of a prompt share it through prefix caching). At most
``max_num_seqs`` sequences run at once; the rest wait in arrival order (vLLM's FCFS scheduler).
KV-cache capacity and preemption are not modelled. The defaults are for a 1.5B model in bf16 on
one H100-class GPU; docs/schedulers.md derives them and cites their sources.

``EventEngine`` runs that model event by event: between two request completions the batch is
fixed and the context grows by ``b`` tokens per step, so the time of the k steps to the next
completion has a closed form and a whole step costs one event per request.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

# The authors' training script for Qwen2.5-Math-1.5B (RLHFlow/Reinforce-Ada,
# scripts/run_reinforce_ada.sh) caps responses at max_response_length = 2048 tokens.
PAPER_MAX_RESPONSE_TOKENS = 2048


@dataclass(frozen=True)
class LengthModel:
    """Response lengths; ``correct`` and ``wrong`` are median fractions of ``max_tokens``."""

    max_tokens: int = PAPER_MAX_RESPONSE_TOKENS
    correct: float = 0.3
    wrong: float = 0.6
    spread: float = 0.5

    def lengths(self, hits: np.ndarray, z_prompt: float, z: np.ndarray) -> np.ndarray:
        """Token counts of responses with correctness ``hits`` (bool) and normal draws ``z``."""
        median = np.where(hits, self.correct, self.wrong) * self.max_tokens
        raw = np.ceil(median * np.exp(self.spread * (z_prompt + z)))
        return np.clip(raw, 1, self.max_tokens).astype(np.int64)


@dataclass(frozen=True)
class EngineTimeModel:
    """Seconds of one decode step: ``step_s + seq_s * batch + kv_token_s * context_tokens``;
    prefill ``prefill_token_s`` per prompt token. Defaults: 1.5B, bf16, one H100 (see
    docs/schedulers.md)."""

    step_s: float = 4.0e-3
    seq_s: float = 1.0e-5
    kv_token_s: float = 1.2e-8
    prefill_token_s: float = 5.0e-6
    max_num_seqs: int = 1024
    prompt_tokens: int = 256

    def decode_seconds(self, batch: int, context: float, steps: int = 1) -> float:
        """Time of ``steps`` decode steps of ``batch`` sequences starting from ``context``
        tokens in all (each step adds ``batch`` tokens)."""
        k = steps
        return (k * (self.step_s + self.seq_s * batch)
                + self.kv_token_s * (k * context + batch * k * (k - 1) / 2))


@dataclass
class EventEngine:
    """Continuous batching on the ``EngineTimeModel`` clock. ``submit(key, length, group)``
    queues a request that will generate ``length`` tokens (``group``: its prompt, for the shared
    prefill); ``step()`` advances to the next completion(s) and returns their keys; ``abort``
    drops requests and returns the tokens they had generated; ``clock`` is in seconds."""

    model: EngineTimeModel = field(default_factory=EngineTimeModel)
    clock: float = 0.0
    _keys: list[Hashable] = field(default_factory=list)
    _remaining: list[int] = field(default_factory=list)
    _done: list[int] = field(default_factory=list)      # tokens generated so far
    _waiting: list[tuple[Hashable, int, Hashable]] = field(default_factory=list)
    _prefilled: set[Hashable] = field(default_factory=set)
    busy_seconds: float = 0.0

    def submit(self, key: Hashable, length: int, group: Hashable) -> None:
        self._waiting.append((key, int(length), group))

    def pending(self) -> int:
        return len(self._keys) + len(self._waiting)

    def _admit(self) -> None:
        room = self.model.max_num_seqs - len(self._keys)
        if room <= 0 or not self._waiting:
            return
        taken, self._waiting = self._waiting[:room], self._waiting[room:]
        for key, length, group in taken:
            if group not in self._prefilled:
                self._prefilled.add(group)
                self.clock += self.model.prefill_token_s * self.model.prompt_tokens
            self._keys.append(key)
            self._remaining.append(max(1, length))
            self._done.append(0)

    def step(self) -> list[Hashable]:
        """Run until at least one request completes; return the keys that completed."""
        self._admit()
        if not self._keys:
            return []
        remaining = np.asarray(self._remaining)
        done = np.asarray(self._done)
        b = len(remaining)
        k = int(remaining.min())
        context = float(b * self.model.prompt_tokens + done.sum())
        dt = self.model.decode_seconds(b, context, k)
        self.clock += dt
        self.busy_seconds += dt
        remaining -= k
        done += k
        finished = remaining == 0
        out = [key for key, f in zip(self._keys, finished.tolist(), strict=True) if f]
        keep = np.flatnonzero(~finished).tolist()
        self._keys = [self._keys[i] for i in keep]
        self._remaining = remaining[keep].tolist()
        self._done = done[keep].tolist()
        return out

    def abort(self, keys: Sequence[Hashable]) -> int:
        drop = set(keys)
        tokens = 0
        keep = []
        for i, key in enumerate(self._keys):
            if key in drop:
                tokens += self._done[i]
            else:
                keep.append(i)
        self._keys = [self._keys[i] for i in keep]
        self._remaining = [self._remaining[i] for i in keep]
        self._done = [self._done[i] for i in keep]
        self._waiting = [w for w in self._waiting if w[0] not in drop]
        return tokens

    def run_to_completion(self) -> None:
        while self.pending():
            self.step()
