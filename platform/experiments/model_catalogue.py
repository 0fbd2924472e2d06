"""The models a platform run may load: the built-in ones by name (``builtin:tiny``) and the
Hugging Face model folders (with a ``config.json``) the operator put under the model roots
(``settings.RADA_MODEL_ROOTS``, default ``var/models``), at most two levels down
(``<root>/<name>`` or ``<root>/<org>/<name>``, the hub's layout).

A launch names a model exactly as offered (the launch form lists them); anything else is
refused with one sentence, whatever the path: the answer never says whether a folder exists
on the server, and no run loads a model the operator did not put there. The command line
(``python -m trainer run``) is the user's own machine and loads any local folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from trainer.config import BUILTIN_MODEL, TrainConfig

BUILTIN_MODELS = (BUILTIN_MODEL,)
# Backends that load the model (simulated takes any name as a label).
LOADING_BACKENDS = ("hf", "vllm")
MAX_DEPTH = 2
MAX_OFFERED = 500


def model_roots() -> list[str]:
    return [os.path.normpath(os.path.abspath(str(r))) for r in settings.RADA_MODEL_ROOTS if r]


def _has_config(path: str) -> bool:
    try:
        return Path(path, "config.json").is_file()
    except OSError:
        return False


def offered_models() -> list[str]:
    """The built-in names, then every model folder under the roots (sorted), at most
    ``MAX_OFFERED``: what the launch form lists."""
    found: list[str] = []
    for root in model_roots():
        level = [root]
        for depth in range(MAX_DEPTH + 1):
            below: list[str] = []
            for folder in level:
                if depth and _has_config(folder):
                    found.append(folder)
                    continue
                if depth < MAX_DEPTH:
                    try:
                        below += sorted(e.path for e in os.scandir(folder)
                                        if e.is_dir() and not e.name.startswith("."))
                    except OSError:
                        pass
            level = below
    return [*BUILTIN_MODELS, *sorted(dict.fromkeys(found))[:MAX_OFFERED]]


def model_offered(model: str) -> bool:
    """Whether a run may load ``model``: a built-in name, or a model folder under a root
    named as the form offers it (absolute, normalised: no ``..``, no trailing slash)."""
    if model in BUILTIN_MODELS:
        return True
    if not model.startswith("/") or os.path.normpath(model) != model or "\0" in model:
        return False
    for root in model_roots():
        if model.startswith(root.rstrip("/") + "/"):
            depth = len(Path(model).relative_to(root).parts)
            if depth <= MAX_DEPTH and not any(p.startswith(".") for p in
                                              Path(model).relative_to(root).parts):
                return _has_config(model)
    return False


def not_offered(model: str) -> str:
    """The refusal: the same sentence for a folder that exists and one that does not."""
    return (f"not a model this platform offers: use {BUILTIN_MODEL} or a model the operator "
            "put under the model folders (RADA_MODEL_ROOTS), as the launch form lists them")


def model_error(config_dict: dict[str, object]) -> str | None:
    """Why a platform run may not load the config's model (None: it may, or its backend
    loads none)."""
    backend = config_dict.get("backend", TrainConfig.backend)
    model = config_dict.get("model", TrainConfig.model)
    if backend not in LOADING_BACKENDS or not isinstance(model, str):
        return None
    return None if model_offered(model) else not_offered(model)
