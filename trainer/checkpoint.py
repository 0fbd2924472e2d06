"""Checkpoint directories: a Hugging Face model directory (safetensors + tokenizer files, loadable
by ``AutoModelForCausalLM.from_pretrained``) plus the optimiser and scheduler state and
``trainer_state.json`` (step, RNG states, config).

Layout: ``<out>/checkpoints/step-000010/``. A checkpoint is written to a temporary sibling and
renamed into place, so a crash mid-write never leaves a directory ``latest_checkpoint`` would pick.
A LoRA policy's checkpoint holds its adapter (peft's files) and, under ``merged/``, the merged
model (``trainer.lora``).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trainer.lora import MERGED_DIR, is_lora, load_adapter, save_adapter, save_merged

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
PREFIX = "step-"


def checkpoint_dir(out_dir: str | Path, step: int) -> Path:
    return Path(out_dir) / "checkpoints" / f"{PREFIX}{step:06d}"


def rng_state() -> dict[str, Any]:
    """Python, numpy (legacy global) and torch RNG states as JSON-able values. torch's only
    where torch is loaded: a run with a model has loaded it before its first checkpoint, and
    one without (the simulated backend) never draws from it, and need not pay a second for
    importing it in every run's process."""
    py = random.getstate()
    np_state = np.random.get_state()
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *[int(x) if isinstance(x, (int, np.integer))
                                                        else float(x) for x in np_state[2:]]],
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state().tolist()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore ``rng_state()``'s states; torch's where it was saved and torch is loaded (a
    process that never loaded torch has no torch draws to make reproducible)."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    npy = state["numpy"]
    np.random.set_state((npy[0], np.asarray(npy[1], dtype=np.uint32), *npy[2:]))
    torch = sys.modules.get("torch")
    if "torch" in state and torch is not None:
        torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def save_checkpoint(path: str | Path, *, step: int, config: dict[str, Any], model: Any = None,
                    tokenizer: Any = None, optimizer: Any = None, scheduler: Any = None,
                    extra: dict[str, Any] | None = None,
                    write: Callable[[Path], None] | None = None) -> Path:
    """Write a checkpoint of the state after ``step`` and return its directory. ``write``
    adds files of its own (a distributed run's shards) to the directory before it is renamed
    into place."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if model is not None and is_lora(model):
        # The adapter at the top, the merged model a plain from_pretrained loads beside it.
        save_adapter(model, tmp)
        save_merged(model, tmp / MERGED_DIR, tokenizer)
    elif model is not None:
        model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    if optimizer is not None or scheduler is not None:
        import torch

        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        if scheduler is not None:
            torch.save(scheduler.state_dict(), tmp / SCHEDULER_FILE)
    if write is not None:
        write(tmp)
    state = {"step": step, "config": config, "rng": rng_state(), **(extra or {})}
    (tmp / STATE_FILE).write_text(json.dumps(state))
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def read_state(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / STATE_FILE).read_text())


def load_checkpoint(path: str | Path, *, model: Any = None, optimizer: Any = None,
                    scheduler: Any = None, restore_rng: bool = True) -> dict[str, Any]:
    """Restore weights, optimiser, scheduler and RNG states in place; return trainer_state."""
    path = Path(path)
    state = read_state(path)
    if model is not None and is_lora(model):
        load_adapter(model, path)
    elif model is not None:
        from safetensors.torch import load_file

        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no safetensors weights in {path}")
        weights: dict[str, Any] = {}
        for f in files:
            weights.update(load_file(f))
        # strict=False: tied embeddings are saved once; the missing keys must only be tied ones.
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = {k for k in missing if "lm_head" in k}
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"checkpoint {path} does not fit the model: missing "
                               f"{sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}")
    if optimizer is not None and (path / OPTIMIZER_FILE).exists():
        import torch

        optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, weights_only=True))
    if scheduler is not None and (path / SCHEDULER_FILE).exists():
        import torch

        scheduler.load_state_dict(torch.load(path / SCHEDULER_FILE, weights_only=True))
    if restore_rng:
        set_rng_state(state["rng"])
    return state


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under ``out_dir`` (or ``out_dir/checkpoints``);
    None when there is none."""
    root = Path(out_dir)
    if (root / "checkpoints").is_dir():
        root = root / "checkpoints"
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for d in root.iterdir():
        if not d.name.startswith(PREFIX) or d.name.endswith(".tmp"):
            continue
        if not (d / STATE_FILE).is_file():
            continue
        try:
            step = int(d.name[len(PREFIX):])
        except ValueError:
            continue
        if best is None or step > best[0]:
            best = (step, d)
    return best[1] if best else None
