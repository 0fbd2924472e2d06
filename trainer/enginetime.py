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
completion has a closed form and a whole step costs one event per request. ``advance(until)``
stops early at ``until`` (whole decode steps only), which lets a caller interleave several
engines and other events (``trainer.asynctime``) in time order.
"""

from __future__ import annotations

import math
from collections import deque
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
    docs/schedulers.md). ``kv_capacity_tokens`` and ``max_num_batched_tokens``: vLLM's KV-cache
    size in tokens and its per-step token budget (chunked prefill); 0 leaves them out."""

    step_s: float = 4.0e-3
    seq_s: float = 1.0e-5
    kv_token_s: float = 1.2e-8
    prefill_token_s: float = 5.0e-6
    max_num_seqs: int = 1024
    prompt_tokens: int = 256
    kv_capacity_tokens: int = 0
    max_num_batched_tokens: int = 0

    def decode_seconds(self, batch: int, context: float, steps: int = 1) -> float:
        """Time of ``steps`` decode steps of ``batch`` sequences starting from ``context``
        tokens in all (each step adds ``batch`` tokens)."""
        k = steps
        return (k * (self.step_s + self.seq_s * batch)
                + self.kv_token_s * (k * context + batch * k * (k - 1) / 2))


@dataclass
class _Request:
    key: Hashable
    remaining: int
    group: Hashable
    done: int = 0          # tokens generated so far
    recompute: int = 0     # tokens to prefill again on readmission (after a preemption)


@dataclass
class EventEngine:
    """Continuous batching on the ``EngineTimeModel`` clock. ``submit(key, length, group)``
    queues a request that will generate ``length`` tokens (``group``: its prompt, for the shared
    prefill); ``step()`` advances to the next completion(s) and returns their keys; ``abort``
    drops requests and returns the tokens they had generated; ``clock`` is in seconds.
    ``busy_seconds`` counts decode time, ``prefill_seconds`` prefill time; ``preemptions`` and
    ``recomputed_tokens`` what KV-cache pressure cost."""

    model: EngineTimeModel = field(default_factory=EngineTimeModel)
    clock: float = 0.0
    busy_seconds: float = 0.0
    prefill_seconds: float = 0.0
    preemptions: int = 0
    recomputed_tokens: int = 0
    _running: list[_Request] = field(default_factory=list)
    _prefilling: list[_Request] = field(default_factory=list)
    _prefill_left: int = 0
    _waiting: deque[_Request] = field(default_factory=deque)
    _prefilled: set[Hashable] = field(default_factory=set)
    _resident: dict[Hashable, int] = field(default_factory=dict)   # group -> requests holding KV
    _kv_used: int = 0
    _running_done: int = 0  # tokens the running sequences have generated (their context)
    _held: bool = False    # no admission after a preemption until a request frees its KV

    def submit(self, key: Hashable, length: int, group: Hashable) -> None:
        self._waiting.append(_Request(key, max(1, int(length)), group))

    def pending(self) -> int:
        return len(self._running) + len(self._prefilling) + len(self._waiting)

    def running(self) -> int:
        """Requests holding a slot (decoding or prefilling)."""
        return len(self._running) + len(self._prefilling)

    def _hold(self, r: _Request) -> int:
        """KV tokens ``r`` takes when it gets a slot; the prompt only if no sample of its
        prompt holds it already."""
        new_group = self._resident.get(r.group, 0) == 0
        self._resident[r.group] = self._resident.get(r.group, 0) + 1
        tokens = r.done + (self.model.prompt_tokens if new_group else 0)
        self._kv_used += tokens
        return tokens

    def _release(self, r: _Request) -> None:
        self._resident[r.group] -= 1
        self._kv_used -= r.done
        if self._resident[r.group] == 0:
            del self._resident[r.group]
            self._kv_used -= self.model.prompt_tokens

    def _fits(self, r: _Request) -> bool:
        cap = self.model.kv_capacity_tokens
        if not cap or not self.running():
            return True  # an empty engine always takes one request
        prompt = 0 if self._resident.get(r.group, 0) else self.model.prompt_tokens
        return self._kv_used + r.done + prompt + 1 <= cap

    def _admit(self) -> None:
        """Waiting requests into free slots, first come first served, while the KV cache has
        room; their prefill is paid at once (no chunking: the engine stalls) or queued for the
        next steps' token budget (chunked prefill)."""
        room = self.model.max_num_seqs - self.running()
        while room > 0 and self._waiting and not self._held and self._fits(self._waiting[0]):
            r = self._waiting.popleft()
            room -= 1
            prefill = r.recompute
            if r.group not in self._prefilled:
                self._prefilled.add(r.group)
                prefill += self.model.prompt_tokens
            elif self._resident.get(r.group, 0) == 0 and r.recompute:
                prefill += self.model.prompt_tokens  # its prompt left the cache with it
            self._hold(r)
            r.recompute = 0
            if self.model.max_num_batched_tokens:
                self._prefilling.append(r)
                self._prefill_left += prefill
            else:
                if prefill:
                    dt = self.model.prefill_token_s * prefill
                    self.clock += dt
                    self.prefill_seconds += dt
                self._running.append(r)
                self._running_done += r.done

    def _preempt(self) -> None:
        """Free KV cache for the next step: the most recently admitted sequences go back to
        the front of the queue, to recompute what they had generated. Nothing is admitted
        again until a request finishes (else the freed room would readmit the sequence just
        preempted, step after step)."""
        cap = self.model.kv_capacity_tokens
        self._held = True
        while len(self._running) > 1 and self._kv_used + len(self._running) > cap:
            r = self._running.pop()
            self._running_done -= r.done
            self._release(r)
            r.recompute = r.done
            self.recomputed_tokens += r.done
            self.preemptions += 1
            self._waiting.appendleft(r)

    def _step_limits(self) -> tuple[int, int, int]:
        """Decode steps until (a request completes, the prefill is done, the KV cache is
        full), each ``math.inf``-free: a large number stands for never."""
        never = 1 << 60
        b = len(self._running)
        k_done = min(r.remaining for r in self._running) if b else never
        k_prefill = never
        if self._prefill_left or self._prefilling:
            chunk = max(1, self.model.max_num_batched_tokens - b)
            k_prefill = max(1, -(-self._prefill_left // chunk))
        k_cap = never
        cap = self.model.kv_capacity_tokens
        if cap and b > 1:
            k_cap = max(0, (cap - self._kv_used) // b)
        return k_done, k_prefill, k_cap

    def _seconds(self, k: int) -> tuple[float, int]:
        """Time of ``k`` steps from now and the prefill tokens they process."""
        b = len(self._running)
        context = float(b * self.model.prompt_tokens + self._running_done)
        chunk = max(1, self.model.max_num_batched_tokens - b)
        prefill = min(self._prefill_left, k * chunk) if self._prefilling else 0
        return self.model.decode_seconds(b, context, k) + self.model.prefill_token_s * prefill, \
            prefill

    def _steps_before(self, seconds: float, k: int) -> int:
        """The most whole steps (fewer than ``k``) that end within ``seconds``."""
        lo, hi = 0, k - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._seconds(mid)[0] <= seconds:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _run(self, k: int) -> list[Hashable]:
        """Run ``k`` steps: the running sequences each gain ``k`` tokens, the prefill queue
        ``k`` chunks; returns the keys that completed."""
        dt, prefill = self._seconds(k)
        self.clock += dt
        decode_dt = dt - self.model.prefill_token_s * prefill
        self.busy_seconds += decode_dt
        self.prefill_seconds += dt - decode_dt
        for r in self._running:
            r.remaining -= k
            r.done += k
        self._kv_used += k * len(self._running)
        self._running_done += k * len(self._running)
        if self._prefilling:
            self._prefill_left -= prefill
            if self._prefill_left <= 0:
                self._prefill_left = 0
                self._running.extend(self._prefilling)
                self._running_done += sum(r.done for r in self._prefilling)
                self._prefilling = []
        out = [r for r in self._running if r.remaining <= 0]
        for r in out:
            self._running_done -= r.done
            self._release(r)
            self._held = False
        self._running = [r for r in self._running if r.remaining > 0]
        return [r.key for r in out]

    def advance(self, until: float = math.inf) -> list[Hashable]:
        """Run to the next completion and return the keys that completed, or stop at
        ``until`` (whole steps only, clock <= until) and return [] if none completes first. An
        idle engine's clock moves to ``until``."""
        while True:
            self._admit()
            if not self.running():
                if until != math.inf:
                    self.clock = max(self.clock, until)
                return []
            k_done, k_prefill, k_cap = self._step_limits()
            if k_cap == 0:
                self._preempt()
                continue
            k = min(k_done, k_prefill, k_cap)
            if self.clock + self._seconds(k)[0] > until:
                k_partial = self._steps_before(until - self.clock, k)
                if k_partial:
                    self._run(k_partial)
                return []
            done = self._run(k)
            if done or k == k_done:
                return done

    def step(self) -> list[Hashable]:
        """Run until at least one request completes; return the keys that completed."""
        return self.advance()

    def abort(self, keys: Sequence[Hashable]) -> int:
        drop = set(keys)
        tokens = 0
        for queue in (self._running, self._prefilling):
            for r in [r for r in queue if r.key in drop]:
                tokens += r.done
                if queue is self._running:
                    self._running_done -= r.done
                self._release(r)
                queue.remove(r)
                self._held = False
        if not self._prefilling:
            self._prefill_left = 0
        self._waiting = deque(r for r in self._waiting if r.key not in drop)
        return tokens

    def run_to_completion(self) -> None:
        while self.pending():
            self.step()
