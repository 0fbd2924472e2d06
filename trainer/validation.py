"""A config's validation: each key's own checks (its type, bounds, choices, paths) and the
checks across keys (``CrossCheck``: everyone's ``CROSS_CHECKS`` and an algorithm's own
``Algorithm.config_checks``), each error a ``ConfigError`` naming the key, in a fixed order:
types first, then each key's other checks, then the checks across keys, each made only where
every key it reads passed its own (``config_errors``).

``TrainConfig.errors()`` and ``validate()`` (``trainer.config``) call it with the config and
what the config declares (its keys' types and bounds, its choices); this module never imports
``trainer.config``, which imports it. Light imports only: the web process validates launch
forms with it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trainer.builtin_names import (
    BUILTIN_LONG_TASK,
    BUILTIN_MODEL,
    BUILTIN_TASK,
    BUILTIN_TASKS,
    LONG_MAX_DIGITS,
)
from trainer.jsonsafe import text_problem
from trainer.mirror import mirror_problem
from trainer.options import BOUND_KEYS
from trainer.reward_registry import reward_errors
from trainer.visible import visible_problem

# A ``trainer.config.TrainConfig`` (not imported here: it imports this module).
Config = Any
# (name, type annotation, bounds) of every key a config holds (``trainer.config``).
Setting = tuple[str, str, Mapping[str, Any]]

# Longest file path accepted (Linux's PATH_MAX, which includes the terminating NUL) and longest
# path component (NAME_MAX); a longer one is "File name too long" from the operating system.
MAX_PATH_CHARS = 4095
MAX_NAME_CHARS = 255
# The model as the platform stores it (Run.model): a label under the simulated backend, a path
# otherwise; longer is refused on the field rather than by the column.
MAX_MODEL_CHARS = 500
# A module name of lora_target_modules (peft matches it against the end of each module's
# dotted name).
LORA_MODULE_NAME = re.compile(r"[A-Za-z0-9_.]+")


class ConfigError(ValueError):
    """An invalid configuration. ``field`` names the offending key so that forms and CLIs can
    show the message next to it."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name
        self.reason = reason


@dataclass(frozen=True)
class CrossCheck:
    """A check of a relation between config keys (M >= n, mini-batch <= B), as (field,
    reason) pairs. It runs only when every one of ``inputs`` passed its own checks (type,
    bounds, choices, and the caller's: a launch form field that did not parse): an error
    derived from a value already reported wrong only repeats it, as "ppo_mini_batch_size: must
    be <= batch_size (-5)" did. ``inputs`` must name every key ``check`` reads (fields and
    options alike).

    ``example``: values over the defaults (and the algorithm's name, for an algorithm's check)
    that fail the check. tests/trainer/test_cross_checks.py makes every check fail with it, then
    breaks each input in turn and asserts the check, and every other derived error, goes
    quiet. Everyone's checks are ``CROSS_CHECKS``; an algorithm's own, its record's
    ``config_checks``."""

    inputs: tuple[str, ...]
    check: Callable[[Config], Iterator[tuple[str, str]]]
    example: Mapping[str, Any]

    @property
    def name(self) -> str:
        return getattr(self.check, "__name__", repr(self.check))

def config_errors(config: Config, settings: Iterable[Setting], choices: Mapping[str, Any],
                  invalid: Collection[str] = ()) -> list[ConfigError]:
    """Every invalid key of ``config`` (``TrainConfig.errors``): first each key's type, then its
    other checks of its own (``own_errors``), then the checks across keys (``cross_checks``),
    each only where every one of its inputs passed its own and none of them is in ``invalid``
    (keys the caller found wrong before the config was built: a launch form's input that did
    not parse). A derived error about a value already reported wrong would only repeat it."""
    settings = list(settings)
    wrong_type = {name: e for name, typ, _ in settings
                  for e in _type_errors(name, getattr(config, name), typ)}
    checked = config
    if wrong_type:
        # The other checks compare values: they see the wrong ones at their defaults.
        checked = dataclasses.replace(
            config, **{f.name: f.default for f in fields(config) if f.name in wrong_type},
            options={k: v for k, v in config.options.items() if k not in wrong_type})
    own = [*wrong_type.values(),
           *(e for e in own_errors(checked, settings, choices) if e.field not in wrong_type)]
    skip = {e.field for e in own} | set(invalid)
    derived = [ConfigError(name, reason) for check in cross_checks(checked)
               if skip.isdisjoint(check.inputs) for name, reason in check.check(checked)]
    return own + derived


def cross_checks(config: Config) -> list[CrossCheck]:
    """The checks across keys that apply to ``config``: everyone's (``CROSS_CHECKS``) and its
    algorithm's (``Algorithm.config_checks``)."""
    record = config.algorithm_record
    return [*CROSS_CHECKS, *(record.config_checks if record is not None else ())]


def own_errors(config: Config, settings: Iterable[Setting],
               choices: Mapping[str, Any]) -> Iterator[ConfigError]:
    """Each key's checks of its own value (choices, bounds, paths): nothing here reads a second
    key."""
    for name, values in choices.items():
        yield from _choice(name, getattr(config, name), values)
    out_of_bounds = set()
    for name, _, bounds in settings:
        for error in _bound_errors(name, getattr(config, name), bounds):
            out_of_bounds.add(name)
            yield error
    for name in ("model", "prompts", "eval_prompts"):
        # Shown on every page that lists the run, and stored: one line of visible text.
        value = getattr(config, name)
        problem = visible_problem(value)
        if problem:
            yield ConfigError(name, problem)
        elif name == "model" and len(value) > MAX_MODEL_CHARS:
            yield ConfigError(name, f"{len(value):,} characters; at most "
                              f"{MAX_MODEL_CHARS:,}")
        else:
            yield from _path_errors(name, value)
    for name in ("prompts", "eval_prompts"):
        value = getattr(config, name)
        if value and value not in BUILTIN_TASKS and _path_ok(value) \
                and not Path(value).is_file():
            yield ConfigError(name, f"no such file: {value!r} (use {BUILTIN_TASK}, "
                              f"{BUILTIN_LONG_TASK} or a JSONL/Parquet file)")
    if isinstance(config.rewards, str) and config.rewards.strip():
        for reason in reward_errors(config.rewards):
            yield ConfigError("rewards", reason)
    problem = text_problem(config.mirror) or visible_problem(config.mirror) \
        or (f"{len(config.mirror):,} characters; at most {MAX_PATH_CHARS:,}"
            if len(config.mirror) > MAX_PATH_CHARS else mirror_problem(config.mirror))
    if problem:
        yield ConfigError("mirror", problem)
    if "tis_cap" not in out_of_bounds and config.tis_cap and config.tis_cap < 1.0:
        yield ConfigError("tis_cap", "must be 0 (off) or >= 1 (a cap below 1 would shrink "
                          "every token's weight)")


def unknown_keys(data: Iterable[str], known: Collection[str]) -> list[ConfigError]:
    """An error per key of ``data`` that is not ``known``, with the closest known key where one
    is close (a typo must not be ignored)."""
    unknown = []
    for key in data:
        if key not in known:
            close = [k for k in known if _similar(k, key)]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            unknown.append(ConfigError(key, f"unknown key{hint}"))
    return unknown


# --- checks across fields ---------------------------------------------------------------------
# Each reads only its inputs and runs only when they all passed their own checks
# (``TrainConfig.errors``); an algorithm's own are in its record (``Algorithm.config_checks``).

def early_rounds_need_per_prompt(c: Config) -> Iterator[tuple[str, str]]:
    # With the round scheduler, early rounds are on only where asked for (certain,
    # speculative): ``auto`` is off there.
    if c.scheduler == "round" and c.early_rounds_mode != "off":
        why = ("the hf backend draws a whole batch in one generate call" if c.backend == "hf"
               else "it decides every prompt's round t before round t+1 goes in")
        yield "early_rounds", (f"the round scheduler accepts only 'off', got "
                               f"{c.early_rounds!r}: {why}; early rounds need scheduler "
                               "per-prompt or streaming (backend vllm or simulated)")


def scheduler_needs_requests(c: Config) -> Iterator[tuple[str, str]]:
    if c.scheduler != "round" and c.backend == "hf":
        yield "scheduler", (f"the hf backend supports only 'round', got {c.scheduler!r}: "
                            "transformers' generate draws a whole batch at once, while "
                            "per-prompt and streaming submit and abort single requests "
                            "(backend vllm or simulated)")


def algorithm_schedulers(c: Config) -> Iterator[tuple[str, str]]:
    record = c.algorithm_record
    if record is not None and record.schedulers is not None \
            and c.scheduler not in record.schedulers:
        only = ", ".join(f"'{s}'" for s in record.schedulers)
        yield "scheduler", (f"{record.name} supports only {only}, got {c.scheduler!r}: "
                            f"{record.schedulers_reason}")


def mini_batch_within_batch(c: Config) -> Iterator[tuple[str, str]]:
    if c.ppo_mini_batch_size > c.batch_size:
        yield "ppo_mini_batch_size", (f"must be <= batch_size ({c.batch_size:,}), got "
                                      f"{c.ppo_mini_batch_size:,}")


def overlong_buffer_within_response(c: Config) -> Iterator[tuple[str, str]]:
    if c.overlong_buffer_len > c.max_new_tokens:
        yield "overlong_buffer_len", (f"must be <= max_new_tokens ({c.max_new_tokens:,}): the "
                                      f"buffer is the last tokens before it; got "
                                      f"{c.overlong_buffer_len:,}")


def task_digits_ordered(c: Config) -> Iterator[tuple[str, str]]:
    if c.task_min_digits > c.task_max_digits:
        yield "task_max_digits", (f"must be >= task_min_digits ({c.task_min_digits}), got "
                                  f"{c.task_max_digits}")


def long_task_digits(c: Config) -> Iterator[tuple[str, str]]:
    if BUILTIN_LONG_TASK in (c.prompts, c.eval_prompts) and c.task_max_digits > LONG_MAX_DIGITS:
        yield "task_max_digits", (f"must be <= {LONG_MAX_DIGITS} with {BUILTIN_LONG_TASK} (8 "
                                  f"operands and their sums must fit the tiny model's 128 "
                                  f"positions), got {c.task_max_digits}")


def model_directory(c: Config) -> Iterator[tuple[str, str]]:
    # The simulated backend loads no model: any name is a label.
    if c.model != BUILTIN_MODEL and c.backend != "simulated" \
            and not (Path(c.model) / "config.json").is_file():
        yield "model", (f"no Hugging Face model directory (config.json) at {c.model!r}; use "
                        f"{BUILTIN_MODEL} or a local directory")


def ranks_need_vllm(c: Config) -> Iterator[tuple[str, str]]:
    if c.world_size > 1 and c.backend != "vllm":
        # A rank generates with its own engine; hf's generate is the policy itself (no
        # separate replica to gather the shards into) and simulated has no policy.
        yield "world_size", (f"world_size > 1 needs backend 'vllm' (each rank's own engine), "
                             f"got backend {c.backend!r}")


def rollout_ranks_leave_a_trainer(c: Config) -> Iterator[tuple[str, str]]:
    if c.rollout_ranks > 0 and c.rollout_ranks >= c.world_size:
        yield "rollout_ranks", (f"rollout_ranks must leave at least one of world_size's ranks to "
                                f"train: at most {max(c.world_size - 1, 0)} for world_size "
                                f"{c.world_size}, got {c.rollout_ranks}")


def kl_in_reward_needs_policy(c: Config) -> Iterator[tuple[str, str]]:
    if c.use_kl_in_reward and c.backend == "simulated":
        yield "use_kl_in_reward", ("the KL in the reward needs the policy's and the reference's "
                                   "log-probs: backend 'hf' or 'vllm', got 'simulated'")


def kl_in_reward_after_positives(c: Config) -> Iterator[tuple[str, str]]:
    # A positive is decided as each round comes back; the KL is measured on the step's whole
    # pools after sampling, so the penalised reward does not exist yet when positives count.
    if c.use_kl_in_reward and c.positive_metric == "seq_final_reward":
        yield "positive_metric", ("seq_final_reward with use_kl_in_reward: positives are decided "
                                  "while sampling, before the KL in the reward is measured; use "
                                  "seq_reward (the same reward without the KL)")


def async_backends(c: Config) -> Iterator[tuple[str, str]]:
    # The producer of trainer.asyncloop generates while the update trains: in one process its
    # engine thread (the hf backend's rollout copy, or the vLLM engine in this process), across
    # ranks the rollout ranks while the train ranks update. A colocated rank holds both its
    # engine and its shard and does one at a time.
    if c.max_policy_lag > 0 and c.world_size > 1 and c.rollout_ranks == 0:
        yield "max_policy_lag", (f"asynchronous training (max_policy_lag > 0) generates while "
                                 f"the update trains, which colocated ranks (rollout_ranks = "
                                 f"0: every rank trains and generates) cannot do, got "
                                 f"world_size {c.world_size}: set rollout_ranks >= 1 (ranks "
                                 f"that only generate), world_size = 1 (one process), or "
                                 f"max_policy_lag = 0")


def rollout_ranks_without_sleep_mode(c: Config) -> Iterator[tuple[str, str]]:
    # Sleep mode frees a colocated rank's engine while its shard trains; split, no rank holds
    # both (and with max_policy_lag > 0 the rollout engines generate during the update).
    if c.rollout_ranks > 0 and c.vllm_sleep_mode is True:
        yield "rollout_ranks", ("rollout_ranks > 0 splits the engines from the shards, so no "
                                "rank has an engine to put to sleep while it trains: leave "
                                "vllm_sleep_mode empty or off, or set rollout_ranks = 0")


def async_round_scheduler(c: Config) -> Iterator[tuple[str, str]]:
    if c.max_policy_lag > 0 and c.scheduler != "round":
        yield "scheduler", (f"asynchronous training drives the rounds itself (its producer), "
                            f"so scheduler must be 'round', got {c.scheduler!r}")


def async_needs_a_cap(c: Config) -> Iterator[tuple[str, str]]:
    # Without the cap, tis and vcpo would train stale samples as if the proximal policy had
    # drawn them (no correction at all).
    if c.max_policy_lag > 0 and c.backend != "simulated" and not c.tis_cap \
            and c.off_policy_correction in ("tis", "vcpo"):
        yield "tis_cap", (f"off_policy_correction {c.off_policy_correction!r} with "
                          f"max_policy_lag > 0 weighs each token by min(pi_prox / pi_behav, "
                          f"tis_cap): give tis_cap (2 is common), or use 'decoupled'")


def async_without_kl_in_reward(c: Config) -> Iterator[tuple[str, str]]:
    # The KL in the reward is measured on one step's pools by the weights that drew them; an
    # asynchronous update's pools come from several versions, which nothing here accounts for
    # yet (and no test covers): refused rather than computed some untested way.
    if c.max_policy_lag > 0 and c.use_kl_in_reward:
        yield "max_policy_lag", ("asynchronous training (max_policy_lag > 0) does not take the KL "
                                 "in the reward yet: set use_kl_in_reward = false, or keep the "
                                 "KL in the loss (kl_coef)")


def vcpo_in_one_process(c: Config) -> Iterator[tuple[str, str]]:
    # VCPO's baseline weighs each response by its own gradient norm, measured by a backward
    # pass per response through the whole model: the sharded update does not do that yet.
    if c.off_policy_correction == "vcpo" and c.world_size > 1:
        yield "off_policy_correction", ("vcpo measures each response's gradient norm in one "
                                        "process: use tis or decoupled with world_size > 1")


def lora_needs_policy(c: Config) -> Iterator[tuple[str, str]]:
    if c.lora_rank > 0 and c.backend == "simulated":
        yield "lora_rank", ("LoRA trains adapters on a policy: backend 'hf' or 'vllm', got "
                            "'simulated'")


def lora_target_names(c: Config) -> Iterator[tuple[str, str]]:
    if c.lora_rank > 0 and c.lora_target_modules != "all-linear":
        names = c.lora_target_modules.split(",")
        bad = [n for n in names if not LORA_MODULE_NAME.fullmatch(n.strip())]
        if bad:
            yield "lora_target_modules", (
                f"expected all-linear or module names separated by commas (letters, digits, "
                f"_ and .), got {_shown(bad[0])}")


CROSS_CHECKS: list[CrossCheck] = [
    CrossCheck(("scheduler", "early_rounds", "backend"), early_rounds_need_per_prompt,
               {"early_rounds": "certain"}),
    CrossCheck(("scheduler", "backend"), scheduler_needs_requests, {"scheduler": "per-prompt"}),
    CrossCheck(("algorithm", "scheduler"), algorithm_schedulers,
               {"algorithm": "ada-est", "backend": "simulated", "scheduler": "per-prompt"}),
    CrossCheck(("ppo_mini_batch_size", "batch_size"), mini_batch_within_batch,
               {"ppo_mini_batch_size": 64}),
    CrossCheck(("overlong_buffer_len", "max_new_tokens"), overlong_buffer_within_response,
               {"overlong_buffer_len": 32}),
    CrossCheck(("task_min_digits", "task_max_digits"), task_digits_ordered,
               {"task_min_digits": 3, "task_max_digits": 2}),
    CrossCheck(("prompts", "eval_prompts", "task_max_digits"), long_task_digits,
               {"prompts": BUILTIN_LONG_TASK, "task_max_digits": 5}),
    CrossCheck(("model", "backend"), model_directory, {"model": "/no/such/model"}),
    CrossCheck(("world_size", "backend"), ranks_need_vllm, {"world_size": 2}),
    CrossCheck(("rollout_ranks", "world_size"), rollout_ranks_leave_a_trainer,
               {"rollout_ranks": 2, "world_size": 2, "backend": "vllm"}),
    CrossCheck(("use_kl_in_reward", "backend"), kl_in_reward_needs_policy,
               {"use_kl_in_reward": True, "backend": "simulated"}),
    CrossCheck(("use_kl_in_reward", "positive_metric"), kl_in_reward_after_positives,
               {"use_kl_in_reward": True, "backend": "hf", "positive_metric": "seq_final_reward"}),
    CrossCheck(("max_policy_lag", "world_size", "rollout_ranks"), async_backends,
               {"max_policy_lag": 1, "backend": "vllm", "world_size": 2}),
    CrossCheck(("rollout_ranks", "vllm_sleep_mode"), rollout_ranks_without_sleep_mode,
               {"rollout_ranks": 1, "world_size": 2, "backend": "vllm",
                "vllm_sleep_mode": True}),
    CrossCheck(("max_policy_lag", "scheduler"), async_round_scheduler,
               {"max_policy_lag": 1, "backend": "simulated", "scheduler": "per-prompt"}),
    CrossCheck(("max_policy_lag", "backend", "tis_cap", "off_policy_correction"),
               async_needs_a_cap, {"max_policy_lag": 1, "backend": "hf"}),
    CrossCheck(("off_policy_correction", "world_size"), vcpo_in_one_process,
               {"off_policy_correction": "vcpo", "world_size": 2, "backend": "vllm"}),
    CrossCheck(("max_policy_lag", "use_kl_in_reward"), async_without_kl_in_reward,
               {"max_policy_lag": 1, "backend": "hf", "use_kl_in_reward": True}),
    CrossCheck(("lora_rank", "backend"), lora_needs_policy,
               {"lora_rank": 8, "backend": "simulated"}),
    CrossCheck(("lora_rank", "lora_target_modules"), lora_target_names,
               {"lora_rank": 8, "backend": "hf", "lora_target_modules": "q_proj,,v_proj"}),
]


def bounds_text(spec: dict[str, Any]) -> str:
    """A field's bounds in interval notation, e.g. ``[1, 64]`` or ``(0, 1)``; "" if none."""
    lo = f"[{_num(spec['ge'])}" if "ge" in spec else f"({_num(spec['gt'])}" if "gt" in spec \
        else ""
    hi = f"{_num(spec['le'])}]" if "le" in spec else f"{_num(spec['lt'])})" if "lt" in spec \
        else ""
    return f"{lo}, {hi}" if lo and hi else ""


def _num(x: float) -> str:
    # Thousands separators as everywhere else ("32,768"; trainer.formatting.number): the space
    # after the interval's comma keeps "[1, 32,768]" unambiguous.
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _bound_errors(name: str, value: Any, meta: Mapping[str, Any]) -> Iterator[ConfigError]:
    if value is None or isinstance(value, (bool, str)) or not any(k in meta for k in BOUND_KEYS):
        return
    spec = {k: meta[k] for k in BOUND_KEYS if k in meta}
    if (("ge" in spec and value < spec["ge"]) or ("gt" in spec and value <= spec["gt"])
            or ("le" in spec and value > spec["le"]) or ("lt" in spec and value >= spec["lt"])):
        yield ConfigError(name, f"must be within {bounds_text(spec)}, got {value!r}")


def _path_errors(name: str, value: str) -> Iterator[ConfigError]:
    if "\0" in value:
        yield ConfigError(name, "a path cannot contain a NUL character")
    elif len(value) > MAX_PATH_CHARS:
        yield ConfigError(name, f"a path of {len(value):,} characters; at most {MAX_PATH_CHARS:,}")
    elif any(len(part) > MAX_NAME_CHARS for part in value.split("/")):
        yield ConfigError(name, f"a path component is longer than {MAX_NAME_CHARS} characters")


def _path_ok(value: str) -> bool:
    return not any(True for _ in _path_errors("", value))


def _type_errors(name: str, value: Any, annotation: str) -> Iterator[ConfigError]:
    # Annotations are strings under `from __future__ import annotations`.
    if value is None and annotation.endswith("| None"):
        return
    annotation = annotation.removesuffix(" | None")
    if annotation.startswith("bool"):
        ok = isinstance(value, bool)
    elif annotation == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and finite_number(value)
    elif annotation == "str":
        ok = isinstance(value, str)
        problem = text_problem(value) if ok else None
        if problem:
            yield ConfigError(name, problem)
            return
    else:  # pragma: no cover - every field has one of the types above
        ok = True
    if not ok and annotation == "float" and isinstance(value, int) and not isinstance(value, bool):
        digits = int(value.bit_length() * 0.30103) + 1  # str() stops at 4,300 digits
        yield ConfigError(name, f"expected float, got an integer of about {digits:,} digits, "
                          "past a float's range")
    elif not ok:
        yield ConfigError(name, f"expected {annotation}, got {_shown(value)}")


def finite_number(value: int | float) -> bool:
    """A number a float field can hold: finite, and an integer no larger than a float's range
    (``math.isfinite(10**400)`` raises OverflowError)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error quotes a 400-digit integer or a
    megabyte of text by its start."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _choice(name: str, value: str, choices: tuple[str, ...]) -> Iterator[ConfigError]:
    if value not in choices:
        yield ConfigError(name, f"unknown value {value!r}; choose one of {', '.join(choices)}")


def _similar(a: str, b: str) -> bool:
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio() > 0.75
