"""The built-in tiny Qwen2 policy: built locally from a config (nothing is downloaded), warm-started
by ``python -m trainer warmstart`` into ``builtin_model_dir()``, and loaded like any local Hugging
Face model directory.

Size: hidden 128, 4 layers, 4 query / 2 key-value heads, MLP 384, tied embeddings, about 0.8M
parameters (docs/architecture.md, "The built-in model"): small enough to train by RL on 2 CPU
cores in minutes, large enough to learn reversed-digit addition.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from trainer.config import TrainConfig
    from trainer.types import Prompt


REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR_ENV = "TRAINER_BUILTIN_MODEL_DIR"

TINY_ARCH: dict[str, Any] = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 384,
    # Prompts are at most 2 * 9 digits + 3 and answers 10 digits + EOS; 128 leaves headroom.
    "max_position_embeddings": 128,
    "tie_word_embeddings": True,
}


class ModelNotFoundError(FileNotFoundError):
    """The built-in model has not been warm-started yet, or a model path is not a HF directory."""


def builtin_model_dir() -> Path:
    """Where the warm-started built-in model lives: ``$TRAINER_BUILTIN_MODEL_DIR`` or
    ``<repo>/var/models/tiny``."""
    env = os.environ.get(MODEL_DIR_ENV)
    return Path(env) if env else REPO_ROOT / "var" / "models" / "tiny"


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, seed: int = 0,
                     **overrides: Any) -> PreTrainedModel:
    """A randomly initialised tiny Qwen2 causal LM sized to ``tokenizer``'s vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    arch = {**TINY_ARCH, **overrides}
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **arch,
    )
    # Initialisation draws from the global RNG: fork it so building a model never perturbs a
    # caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present; asking for ``cuda`` without one is an error, not a
    silent fall-back to a CPU run that would take hours."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but CUDA is not available")
    return torch.device(device)


_explicit_threads = False


def configure_threads(threads: int | None = None) -> None:
    """Use ``threads``, else ``TRAINER_NUM_THREADS``/``OMP_NUM_THREADS``, else the CPU cores the
    process may run on. torch's default counts every core of the host even inside a cgroup or
    taskset, and oversubscribed cores make small matmuls several times slower (measured: a warm
    start step took 25x longer with 2 threads on 2 cores shared by 4 busy processes)."""
    import torch

    env = os.environ.get("TRAINER_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        available = os.cpu_count() or 1
    global _explicit_threads
    if threads is None:
        if _explicit_threads:
            return  # a caller chose a count; loading a model later must not undo it
        threads = int(env) if env and env.isdigit() and int(env) > 0 else available
    else:
        _explicit_threads = True
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def resolve_model_path(model: str) -> Path:
    """``builtin:tiny`` -> the warm-started checkpoint; anything else must be a local HF dir."""
    from trainer.config import BUILTIN_MODEL

    if model == BUILTIN_MODEL:
        path = builtin_model_dir()
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"the built-in model is not warm-started yet (no checkpoint at {path}); run "
                f"`python -m trainer warmstart` (or set {MODEL_DIR_ENV})"
            )
        return path
    path = Path(model)
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"no Hugging Face model directory (config.json) at {model!r}")
    return path


def is_builtin_tokenizer(path: str | Path) -> bool:
    """The directory's tokenizer is the built-in character tokenizer (trainer.tokenizer): a
    WordLevel vocabulary of exactly its tokens."""
    import json

    from trainer.tokenizer import CHARACTERS, SPECIAL_TOKENS

    try:
        model = json.loads((Path(path) / "tokenizer.json").read_text())["model"]
    except (OSError, ValueError, KeyError):
        return False
    builtin = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    return model.get("type") == "WordLevel" and model.get("vocab") == builtin


def load_model_dir(path: str | Path, device: str = "auto"
                   ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a local HF model directory (weights + tokenizer), offline, onto ``device``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    configure_threads()
    _quiet_transformers()
    dev = resolve_device(device)
    if is_builtin_tokenizer(path):
        # The built-in character tokenizer loads as itself: AutoTokenizer takes the model type's
        # class (Qwen2's), whose byte-level pre-tokenizer drops every space ("12 + 3" -> "12+3").
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    # Batched generation needs left padding (prompts must end where responses begin) and a pad id.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # fp32 weights on every device: this is the trained policy, and AdamW steps of lr ~1e-6 fall
    # below bf16's resolution (8 mantissa bits) and would be rounded away. Fast low-precision
    # sampling is the vllm backend's job, on its own copy of the weights.
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True)
    model.to(dev)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_policy(config: TrainConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The trainable policy and its tokenizer for ``config.model`` on ``config.device``."""
    return load_model_dir(resolve_model_path(config.model), config.device)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: Prompt) -> list[int]:
    """Token ids the policy is conditioned on. A prompt that came as a chat (verl layout: its
    messages in ``metadata["chat"]``) goes through the tokenizer's chat template with the
    generation prompt appended, as verl does, when the tokenizer has one; otherwise the text is
    encoded as is (with the tokenizer's own special tokens, e.g. the tiny model's BOS)."""
    chat = prompt.metadata.get("chat") if prompt.metadata else None
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        # The template writes its own special tokens (BOS, role markers).
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt.text)["input_ids"])


def save_checkpoint(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    path: str | Path) -> Path:
    """Write a HF directory (safetensors + tokenizer files) that ``from_pretrained`` loads."""
    _quiet_transformers()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def _quiet_transformers() -> None:
    # transformers draws a progress bar for every load and save of even a 3 MB checkpoint; in a
    # training loop that saves every K steps they bury the run's own progress.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
