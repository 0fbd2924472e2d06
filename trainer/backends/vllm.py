"""Generation with vLLM on a GPU, the policy's weights pushed into the engine after each update.

Every sample is its own request (``n=1`` with its own seed) rather than one ``n=k`` request per
prompt: a streaming scheduler can then abort exactly the in-flight samples of a prompt whose exit
rule is met. Old log-probabilities are recomputed with ``policy.response_logprobs`` on the HF
policy: vLLM's own log-probs come from its kernels (and, depending on version, before temperature
scaling), and the PPO ratio must compare the update's numbers with numbers of the same kind.

vllm is imported inside the class: it exists only on GPU machines.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import torch

from trainer.model import encode_prompt
from trainer.policy import response_logprobs
from trainer.types import Generation, Prompt


class VLLMBackend:
    def __init__(self, model: Any, tokenizer: Any, *, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 16, gpu_memory_utilization: float = 0.3,
                 record_logprobs: bool = True, logprob_batch_size: int = 256,
                 dtype: str = "bfloat16") -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the vllm backend needs a CUDA device")
        # In-process engine: weight pushes then reach the model directly instead of being
        # pickled to an engine-core process.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.record_logprobs = record_logprobs
        self.logprob_batch_size = logprob_batch_size
        self.pad_id: int = tokenizer.pad_token_id
        # vLLM loads from a directory: hand it the policy's current weights, not the original.
        self._weights_dir = tempfile.TemporaryDirectory(prefix="trainer-vllm-")
        model.save_pretrained(self._weights_dir.name, safe_serialization=True)
        tokenizer.save_pretrained(self._weights_dir.name)
        # The engine samples in bf16 from its own copy; the fp32 HF policy stays the reference
        # for the old log-probs (recomputed below), as in verl.
        self.llm = LLM(model=self._weights_dir.name, dtype=dtype, seed=0,
                       gpu_memory_utilization=gpu_memory_utilization, enforce_eager=True,
                       max_model_len=getattr(model.config, "max_position_embeddings", None))

    def sync_weights(self) -> None:
        """Push the HF policy's state dict into the engine's model (``load_weights`` maps HF
        names onto vLLM's fused layers)."""
        state = {k: v.detach() for k, v in self.model.state_dict().items()}

        def load(model: Any) -> None:
            model.load_weights(weights=iter(state.items()))

        self.llm.apply_model(load)
        # Cached prefixes were computed with the old weights.
        self.llm.reset_prefix_cache()

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        from vllm import SamplingParams, TokensPrompt

        if len(prompts) != len(counts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        encoded = [encode_prompt(self.tokenizer, p) for p in prompts]
        rows = [i for i, c in enumerate(counts) for _ in range(c)]
        requests = [TokensPrompt(prompt_token_ids=encoded[i]) for i in rows]
        params = [
            SamplingParams(n=1, temperature=0.0 if greedy else self.temperature,
                           top_p=1.0 if greedy else self.top_p, max_tokens=self.max_new_tokens,
                           seed=seed * 1_000_003 + j, skip_special_tokens=True)
            for j in range(len(rows))
        ]
        outputs = self.llm.generate(requests, params, use_tqdm=False) if rows else []
        responses = [list(o.outputs[0].token_ids) for o in outputs]
        logprobs = self._logprobs([encoded[i] for i in rows], responses)
        results: list[list[Generation]] = [[] for _ in prompts]
        for i, out, r_ids, lp in zip(rows, outputs, responses, logprobs, strict=True):
            results[i].append(Generation(
                prompt_id=prompts[i].id, text=out.outputs[0].text,
                prompt_token_ids=encoded[i], response_token_ids=r_ids, logprobs=lp))
        return results

    @torch.no_grad()
    def _logprobs(self, prompt_ids: list[list[int]], responses: list[list[int]]
                  ) -> list[list[float] | None]:
        if not self.record_logprobs:
            return [None] * len(responses)
        out: list[list[float] | None] = []
        for s in range(0, len(responses), self.logprob_batch_size):
            end = s + self.logprob_batch_size
            p, r = prompt_ids[s:end], responses[s:end]
            lp, _, mask = response_logprobs(self.model, p, r, self.pad_id, self.temperature)
            rows = lp.float().cpu().tolist()
            out.extend(row[:n] for row, n in zip(rows, mask.sum(-1).tolist(), strict=True))
        return out
