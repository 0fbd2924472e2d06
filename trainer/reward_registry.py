"""The registry of a deployment's own reward functions (issue 33): the rewards a run may combine
with its verifier (``TrainConfig.rewards``), found where the code runs, never uploaded.

A reward is registered by a Python module on the workers' path, named either

- in the ``RADA_REWARDS`` environment variable (comma-separated entries ``[name=]module[:attr]``),
  or
- by an entry point of the ``rada.rewards`` group (``name = "module:attr"`` or ``name =
  "module"``) of an installed package.

An entry that names a function registers it; one that names a module registers its
``compute_score`` (a lab's verl reward file, unchanged), under the entry's name, else the
function's (``module:attr``) or the module's last dotted part. A module may also call
``register_reward`` itself when imported.

Two signatures are accepted, told apart by their parameters:

- verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``, one
  response per call, returning a float or a dict with a ``score`` (verl's
  ``custom_reward_function``);
- TRL's batched ``reward_func(prompts, completions, **kwargs) -> list[float]`` (``GRPOTrainer``'s
  ``reward_funcs``: a parameter named ``completions``), one prompt's responses per call.

Light imports only: the web process lists the registered rewards and their docstrings for the
launch form and validates configs with this module, importing the modules the setting names
(keep a reward module's heavy imports inside its functions) and nothing of torch.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

# The environment variable naming the deployment's reward modules and functions, and the entry
# point group an installed package registers its rewards under.
REWARDS_ENV = "RADA_REWARDS"
ENTRY_POINT_GROUP = "rada.rewards"
# The config's name of the run's verifier (``TrainConfig.verifier``) among its reward components.
VERIFIER = "verifier"
# A reward's name: as the config, the form and the stored components spell it.
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Reward:
    """One registered reward: ``kind`` is ``verl`` (one response per call) or ``trl`` (one
    prompt's responses per call); ``doc`` its docstring, shown by the launch form."""

    name: str
    fn: Callable[..., Any]
    kind: str
    source: str  # where it was registered from ("RADA_REWARDS: module:attr", "register_reward")

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or "").strip()

    @property
    def summary(self) -> str:
        """The docstring's first paragraph on one line."""
        return " ".join(self.doc.split("\n\n")[0].split())


_REGISTRY: dict[str, Reward] = {}
_LOADED: set[str] = set()  # the RADA_REWARDS entries already imported
_ENTRY_POINTS_READ = False


def reward_kind(fn: Callable[..., Any]) -> str:
    """``trl`` for a batched function (a ``completions`` parameter), ``verl`` for verl's
    ``compute_score`` (``solution_str``, or four positional parameters); anything else is
    refused, saying what is expected."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{fn!r} has no signature to read: {exc}") from None
    if "completions" in params:
        return "trl"
    positional = [p for p in params.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if "solution_str" in params or len(positional) >= 4 \
            or any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        return "verl"
    raise ValueError(f"{getattr(fn, '__name__', fn)!r}: expected verl's compute_score(data_source, "
                     "solution_str, ground_truth, extra_info) or TRL's reward_func(prompts, "
                     "completions, **kwargs)")


def register_reward(name: str, fn: Callable[..., Any] | None = None, *, replace: bool = False,
                    source: str = "register_reward") -> Any:
    """Register ``fn`` under ``name`` (as a decorator without ``fn``); the name must be new
    unless ``replace``, and may not be ``verifier`` (the run's own verifier)."""
    if fn is None:
        return lambda f: register_reward(name, f, replace=replace, source=source)
    if not isinstance(name, str) or not name.isidentifier() or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"reward name {name!r}: a Python identifier of at most "
                         f"{MAX_NAME_CHARS} characters")
    if name == VERIFIER:
        raise ValueError(f"reward name {VERIFIER!r} is the run's verifier")
    if not callable(fn):
        raise ValueError(f"reward {name!r}: {fn!r} is not callable")
    try:  # marked, so that loading its module again registers it again (``_register_entry``)
        fn.__rada_reward__ = name  # type: ignore[attr-defined]
    except AttributeError:
        pass
    existing = _REGISTRY.get(name)
    if existing is not None and existing.fn is not fn and not replace:
        raise ValueError(f"reward {name!r} is registered already ({existing.source})")
    _REGISTRY[name] = Reward(name, fn, reward_kind(fn), source)
    return fn


def unregister_reward(name: str) -> None:
    """Remove a reward (tests that register one of their own)."""
    _REGISTRY.pop(name, None)


def _register_entry(name: str | None, target: str, source: str) -> None:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name.strip())
    if attr:
        fn = module
        for part in attr.strip().split("."):
            fn = getattr(fn, part)
        register_reward(name or attr.strip().split(".")[-1], fn, source=source)
        return
    # The functions the module registered itself (``register_reward``) ...
    own = [(f.__rada_reward__, f) for f in vars(module).values()
           if callable(f) and isinstance(getattr(f, "__rada_reward__", None), str)]
    for own_name, fn in own:
        if own_name not in _REGISTRY:
            register_reward(own_name, fn, source=source)
    # ... and its verl compute_score.
    if hasattr(module, "compute_score"):
        register_reward(name or module_name.strip().rsplit(".", 1)[-1], module.compute_score,
                        source=source, replace=True)
    elif not own:
        raise ValueError(f"module {module_name!r} defines no compute_score and registers no "
                         "reward")


def load_rewards() -> None:
    """Import what ``RADA_REWARDS`` and the ``rada.rewards`` entry points name (once per
    value): a module or function that cannot be imported raises, naming the entry."""
    for entry in os.environ.get(REWARDS_ENV, "").split(","):
        entry = entry.strip()
        if not entry or entry in _LOADED:
            continue
        name, _, target = entry.rpartition("=")
        try:
            _register_entry(name.strip() or None, target, f"{REWARDS_ENV}: {entry}")
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"{REWARDS_ENV} entry {entry!r}: {exc}") from exc
        _LOADED.add(entry)
    global _ENTRY_POINTS_READ
    if not _ENTRY_POINTS_READ:  # the installed packages do not change while a process runs
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            key = f"entry point {ep.name} = {ep.value}"
            try:
                _register_entry(ep.name, ep.value, key)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ValueError(f"{key}: {exc}") from exc
        _ENTRY_POINTS_READ = True


def rewards() -> list[Reward]:
    """Every registered reward, by name."""
    load_rewards()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_reward(name: str) -> Reward:
    load_rewards()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join([VERIFIER, *sorted(_REGISTRY)])
        raise KeyError(f"unknown reward {name!r}; registered: {known}") from None


def reward_names() -> list[str]:
    """The names a config's ``rewards`` may use: the run's verifier, then every registered
    reward."""
    return [VERIFIER, *(r.name for r in rewards())]


# --- the config's ``rewards`` -------------------------------------------------------------------
# Entries "name:weight" (weight 1 when left out), separated by spaces or commas; a sweep's
# values are separated by commas, so a swept value separates its entries by spaces.
MAX_WEIGHT = 1000.0
MAX_COMPONENTS = 16


def parse_rewards(text: str) -> list[tuple[str, float]]:
    """``"verifier:1 format:0.1"`` as [(name, weight)], raising ValueError with the reason
    (the names are not looked up here: ``reward_errors`` does)."""
    out: list[tuple[str, float]] = []
    for entry in text.replace(",", " ").split():
        name, sep, weight_text = entry.partition(":")
        if not name:
            raise ValueError(f"{entry!r}: a reward's name comes before ':'")
        weight = 1.0
        if sep:
            try:
                weight = float(weight_text)
            except ValueError:
                raise ValueError(f"{entry!r}: the weight {weight_text!r} is not a number") \
                    from None
            if not -MAX_WEIGHT <= weight <= MAX_WEIGHT:  # NaN fails too
                raise ValueError(f"{entry!r}: the weight must be within [-{MAX_WEIGHT:g}, "
                                 f"{MAX_WEIGHT:g}]")
        if any(n == name for n, _ in out):
            raise ValueError(f"{name!r} is listed twice")
        out.append((name, weight))
    if len(out) > MAX_COMPONENTS:
        raise ValueError(f"{len(out)} rewards; at most {MAX_COMPONENTS}")
    return out


def reward_errors(text: str) -> list[str]:
    """Why ``text`` is not a valid ``rewards`` value (empty when it is): its syntax, then each
    name that is neither ``verifier`` nor registered."""
    try:
        components = parse_rewards(text)
    except ValueError as exc:
        return [str(exc)]
    try:
        known = reward_names()
    except ValueError as exc:  # RADA_REWARDS names something that does not import
        return [str(exc)]
    return [f"unknown reward {name!r}; registered: {', '.join(known)}"
            for name, _ in components if name not in known]
