"""Generation with transformers ``generate``: all requested samples in one left-padded batch
(chunked for memory), seeded, on CPU or CUDA.

The "old" log-probabilities PPO needs are recorded here, at sampling time, as
``log_softmax(raw_logits / T)[token]``: the distribution the sampler drew from, before top-p
truncation, which is also what ``policy.response_logprobs`` computes in the update. Two ways:

- ``logits``: from the raw logits ``generate`` returns with the samples (``output_logits``);
  nearly free, but holds batch x new tokens x vocabulary floats, so only for small vocabularies;
- ``forward``: one extra forward pass with ``policy.response_logprobs`` after generation.

``auto`` takes ``logits`` when that array stays under 256 MB. For the tiny model on one thread the
forward pass halved generation throughput; the logits path stayed within noise of a bare
``generate`` (benchmarks/bench_generation.py, docs/benchmarks.md).
Both agree with the update's recomputation to float noise (tests/trainer/test_hf_backend.py).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import torch

from trainer.model import encode_prompt
from trainer.policy import response_logprobs
from trainer.types import Generation, Prompt

# Settings that a model directory's generation_config.json may carry (Qwen's ships
# repetition_penalty=1.05, top_k=20) and generate() would silently apply: they would change the
# sampling distribution away from softmax(logits / T), the one the old log-probs describe.
_NEUTRAL_SAMPLING: dict[str, Any] = {
    "num_beams": 1, "top_k": 0, "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0,
    "min_new_tokens": None, "bad_words_ids": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
}


class HFBackend:
    """``generate(prompts, counts, seed=...)`` draws ``counts[i]`` responses for ``prompts[i]``.

    Responses end at (and include) the EOS token, or after ``max_new_tokens``. Sampling is
    reproducible for a given seed, batch and device; ``greedy=True`` is the evaluation mode (one
    deterministic response per request, independent of batch composition up to float noise).
    """

    def __init__(self, model: Any, tokenizer: Any, *, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 16, max_batch_size: int = 1024,
                 record_logprobs: bool = True, logprobs_from: str = "auto",
                 logits_budget_bytes: int = 256 * 2**20) -> None:
        if logprobs_from not in ("auto", "logits", "forward"):
            raise ValueError(f"logprobs_from must be auto, logits or forward, got "
                             f"{logprobs_from!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.max_batch_size = max_batch_size
        self.record_logprobs = record_logprobs
        self.logprobs_from = logprobs_from
        self.logits_budget_bytes = logits_budget_bytes
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer needs a pad token for batched generation")
        self.pad_id: int = tokenizer.pad_token_id
        self.eos_ids = _eos_ids(model, tokenizer)
        # What generates: the policy module itself, or (asynchronous training, where a tick
        # generates while the update changes the policy's parameters) a rollout copy of it.
        self.engine_model = model
        self.sync_seconds: list[float] = []  # one entry per copy into the rollout copy

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def separate_engine(self) -> None:
        """Generate from a rollout copy of the policy from now on (``trainer.asyncloop``: the
        update mutates the policy's parameters while the engine thread generates);
        ``sync_weights`` copies the policy's weights into it after each update."""
        if self.engine_model is self.model:
            self.engine_model = copy.deepcopy(self.model).eval().requires_grad_(False)

    def sync_weights(self) -> None:
        """Samples from the policy module itself: nothing to push; with a rollout copy
        (``separate_engine``), copy the policy's parameters and buffers into it."""
        if self.engine_model is self.model:
            return
        t0 = time.perf_counter()
        with torch.no_grad():
            for mine, theirs in zip(self.engine_model.state_dict().values(),
                                    self.model.state_dict().values(), strict=True):
                mine.copy_(theirs)
        self.sync_seconds.append(time.perf_counter() - t0)

    def close(self) -> None:
        """Nothing to release: no engine of its own."""

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        return [encode_prompt(self.tokenizer, p) for p in prompts]

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        if len(prompts) != len(counts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        encoded = self.encode_prompts(prompts)
        # One row per requested sample, grouped by prompt.
        rows = [i for i, c in enumerate(counts) for _ in range(c)]
        results: list[list[Generation]] = [[] for _ in prompts]
        model = self.engine_model
        was_training = model.training
        model.eval()
        try:
            for chunk_index, start in enumerate(range(0, len(rows), self.max_batch_size)):
                chunk = rows[start:start + self.max_batch_size]
                prompt_ids = [encoded[i] for i in chunk]
                use_logits = self.record_logprobs and self._logprobs_from_logits(len(chunk))
                responses, logprobs = self._generate_ids(prompt_ids, seed + chunk_index, greedy,
                                                         use_logits)
                if logprobs is None:
                    logprobs = self._logprobs(prompt_ids, responses) if self.record_logprobs \
                        else [None] * len(chunk)
                for i, p_ids, r_ids, lp in zip(chunk, prompt_ids, responses, logprobs,
                                               strict=True):
                    results[i].append(Generation(
                        prompt_id=prompts[i].id,
                        text=self.tokenizer.decode(r_ids, skip_special_tokens=True),
                        prompt_token_ids=p_ids, response_token_ids=r_ids, logprobs=lp))
        finally:
            model.train(was_training)
        return results

    def _logprobs_from_logits(self, batch: int) -> bool:
        if self.logprobs_from != "auto":
            return self.logprobs_from == "logits"
        vocab = self.model.get_output_embeddings().weight.shape[0]
        return batch * self.max_new_tokens * vocab * 4 <= self.logits_budget_bytes

    def _generate_ids(self, prompt_ids: list[list[int]], seed: int, greedy: bool,
                      with_logprobs: bool = False
                      ) -> tuple[list[list[int]], list[list[float] | None] | None]:
        device = self.device
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, width - len(ids):] = torch.as_tensor(ids)
            attention[row, width - len(ids):] = 1
        kwargs: dict[str, Any] = dict(_NEUTRAL_SAMPLING)
        # Greedy unsets the sampling-only flags (top_k=0 included): generate() warns about any
        # that is set without do_sample, once per process, on every CLI run and worker.
        kwargs.update({"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
                      if greedy else
                      {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p})
        # generate() samples from the global RNG: seed a forked copy so that the caller's stream
        # (data order, down-sampling) is untouched and equal seeds give equal samples.
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            out = self.engine_model.generate(
                input_ids=input_ids.to(device), attention_mask=attention.to(device),
                max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_id,
                eos_token_id=self.eos_ids, output_logits=with_logprobs,
                return_dict_in_generate=True, **kwargs)
        new_ids = out.sequences[:, width:]
        responses = [_cut_at_eos(seq, self.eos_ids) for seq in new_ids.tolist()]
        if not with_logprobs:
            return responses, None
        # out.logits: one [batch, vocab] tensor per generated position, before any processor.
        logits = torch.stack(out.logits, dim=1).float() / self.temperature
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, new_ids.unsqueeze(-1)).squeeze(-1)
        rows = chosen.cpu().tolist()
        return responses, [row[:len(r)] for row, r in zip(rows, responses, strict=True)]

    def _logprobs(self, prompt_ids: list[list[int]], responses: list[list[int]]
                  ) -> list[list[float] | None]:
        logprobs, _, mask = response_logprobs(self.engine_model, prompt_ids, responses,
                                              self.pad_id, self.temperature)
        lengths = mask.sum(-1).tolist()
        rows = logprobs.float().cpu().tolist()
        return [row[:n] for row, n in zip(rows, lengths, strict=True)]


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = model.generation_config.eos_token_id
    if ids is None:
        ids = tokenizer.eos_token_id
    if ids is None:
        raise ValueError("the model has no EOS token: responses could never end")
    return [ids] if isinstance(ids, int) else list(ids)


def _cut_at_eos(seq: list[int], eos_ids: list[int]) -> list[int]:
    """Keep the response up to and including its first EOS (generate pads finished rows)."""
    for j, tok in enumerate(seq):
        if tok in eos_ids:
            return seq[:j + 1]
    return seq
