"""Generation backends behind ``trainer.types.GenerationBackend``: ``hf`` (transformers
``generate``, CPU or CUDA), ``vllm`` (GPU) and ``simulated`` (per-prompt pass rates, no model).

Each is imported only when chosen: vllm exists only on GPU machines, and the simulated backend
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
    from trainer.model import load_policy

    model, tokenizer = load_policy(config)
    if config.backend == "hf":
        from trainer.backends.hf import HFBackend

        return HFBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p,
                         max_new_tokens=config.max_new_tokens)
    if config.backend == "vllm":
        from trainer.backends.vllm import VLLMBackend

        return VLLMBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p,
                           max_new_tokens=config.max_new_tokens)
    raise ValueError(f"unknown backend {config.backend!r}")
