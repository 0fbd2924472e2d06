"""The data that crosses the trainer's boundaries: prompts in, generations from a backend, and the
records a training run emits to a recorder (the platform's worker writes them to PostgreSQL; the
CLI writes them to ``events.jsonl``).

Light imports only: the web process reads these types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Prompt:
    """One training or evaluation prompt. ``id`` is stable across runs (the platform uses the
    database key); ``answer`` is what the verifier checks against."""

    id: str
    text: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Generation:
    """One sampled response. ``logprobs`` are the policy's per-token log-probabilities at
    sampling time (the "old" log-probs of PPO); None where the backend has no model
    (simulated)."""

    prompt_id: str
    text: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float] | None = None
    # The engine's own log-probs of the sampled tokens, where the sampler is a separate engine
    # (vllm): compared with ``logprobs`` (the policy's) to measure the rollout/policy mismatch.
    # None where the sampler is the policy itself (hf) or there is no model (simulated).
    rollout_logprobs: list[float] | None = None
    # Each reward component's score of this response, by name, where the run combines rewards
    # (``TrainConfig.rewards``): set when it is scored (``trainer.rewards.RewardScorer``); None
    # for a component that raised, timed out or gave no finite number (the sample's error says
    # which). None: the verifier alone.
    reward_components: dict[str, float | None] | None = None


class GenerationBackend(Protocol):
    """hf, vllm and simulated implement this. ``model`` is the trainable policy (a transformers
    causal LM) and ``tokenizer`` its tokenizer; both are None for the simulated backend, whose runs
    skip the policy update."""

    model: Any
    tokenizer: Any

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        """Draw ``counts[i]`` responses for ``prompts[i]``; returns one list per prompt.

        Callers pass ``seed = derive_seed(run seed, step, stream, round)``. The vllm and
        simulated backends make the j-th response of ``prompts[i]`` a function of ``(seed,
        prompts[i].id, j)`` alone (``sampler.request_seed``): independent of the other prompts
        of the call. hf cannot (one batched generator): its samples depend on the whole call,
        which a resumed run replays identically all the same."""
        ...

    def close(self) -> None:
        """Release the engine (vllm); nothing to do for hf and simulated."""
        ...

    def sync_weights(self) -> None:
        """Make the next generate() use the policy's current weights (a no-op for hf)."""
        ...


# --- records emitted by a training run -----------------------------------------------------------

@dataclass
class RoundStat:
    """One sampling round of one step."""

    round: int                 # 1-based
    active_prompts: int        # prompts sampled in this round
    samples: int               # responses drawn in this round
    positives: int             # positive responses among them
    finished: int              # prompts whose exit rule was met after this round
    tokens: int = 0            # response tokens generated in this round


@dataclass
class PromptStepRecord:
    """One prompt in one step: what its sampling cost and what entered the update."""

    prompt_id: str
    samples: int
    positives: int
    negatives: int
    rounds: int                # rounds in which it was sampled
    exit_round: int | None     # round after which its exit rule was met; None = unresolved
    kept_positives: int
    kept_negatives: int
    baseline: float            # mean reward of its whole pool (global baseline)
    missing: str | None = None  # unresolved because it lacked "positives" or "negatives"
    tokens: int = 0
    p_hat: float | None = None    # Est: the pass-rate estimate before this step's sampling
    allocated: int | None = None  # Est: samples allocated to it this step


@dataclass
class SampleRecord:
    prompt_id: str
    round: int
    index: int                 # position in the prompt's pool for this step (0-based)
    response: str
    tokens: int
    reward: float
    kept: bool
    advantage: float | None    # None when not kept
    verifier_error: str | None = None
    weight: float = 1.0        # its weight in the policy loss, set by the algorithm
    # The policy version (optimiser steps applied) of the weights that generated it, where
    # generation runs ahead of the update (max_policy_lag > 0); None: the step's own weights,
    # version step - 1 (synchronous training, whose records leave the key out).
    policy_version: int | None = None
    # Each reward component's score, by name (``Generation.reward_components``); None where the
    # run's reward is its verifier alone (whose records leave the key out).
    reward_components: dict[str, float | None] | None = None


# Rewards and per-response verifier errors of one prompt's responses (a scorer with
# ``score_generations(prompt, generations)`` gets the generations too: trainer.rewards).
Scorer = Callable[[Prompt, list[str]], tuple[list[float], list[str | None]]]


@dataclass
class RoundsOutcome:
    """What a scheduler drew for one step (``trainer.schedulers``). ``generations[i]`` and
    ``errors[i]`` are prompt i's pool in observation order (the order ``SamplerResult`` calls
    the pool index)."""

    generations: list[list[Generation]]
    rewards: list[list[float]]
    errors: list[list[str | None]]
    round_stats: list[RoundStat]
    cancelled: bool = False
    time_generation: float = 0.0
    time_scoring: float = 0.0
    # Response tokens generated but never pooled: requests aborted by the streaming scheduler
    # (or a cancel), responses that finished after their prompt had stopped, and early rounds
    # of prompts that exited.
    tokens_discarded: int = 0
    # Early rounds (run_per_prompt): rounds submitted before the prompt's previous round was
    # decided; of them, rounds aborted because the prompt exited after all (speculative only);
    # and the largest head start one prompt's kept early rounds gained, summed along its chain
    # of rounds, in the engine's seconds (how much sooner that prompt was done).
    early_rounds_started: int = 0
    early_rounds_discarded: int = 0
    early_rounds_saved_s: float = 0.0


@dataclass
class PromptUpdateStats:
    """Per prompt of a step (indexed as the step's sampled prompts), what the update measured,
    summed over its mini-batches and averaged over the epochs: ``loss``, the prompt's part of
    the policy loss (its terms of the aggregated loss: the prompts' parts of a mini-batch sum to
    its loss); ``grad_mass``, the L1 norm of that loss's gradient with respect to the prompt's
    token log-probabilities, ``sum_t |dL/dlogp_t|`` (the gradient is ``sum_t dL/dlogp_t x
    grad logp_t``, so its norm is at most ``grad_mass`` times the largest ``|grad logp_t|``: a
    cheap proxy of the prompt's share of the gradient norm, from one backward pass through the
    loss alone); ``grad_share``, ``grad_mass`` over its mini-batch's total; ``tokens``, the
    response tokens it trained on. Zero where a prompt kept nothing."""

    loss: Any          # np.ndarray of floats, one per prompt
    grad_mass: Any
    grad_share: Any
    tokens: Any


@dataclass
class RankRecord:
    """One rank of a ``world_size > 1`` run in one step: where it runs and how its step's
    seconds split. The parts are the rank's own (a straggler shows in its row): generating its
    share of the requests, its part of the update, gathering the full weights (``full_tensor``
    collectives; a train rank of split ranks: its whole push, the send included; a rollout
    rank: receiving a staged push, beside its generation) and loading them into its engine (a
    rollout rank: the whole receive and load, or a staged push's swap alone)."""

    rank: int
    node: str                  # the machine (Ray node address or host name)
    device: str                # e.g. "NVIDIA H100 80GB HBM3 (cuda:0)", "cpu"
    generation_s: float = 0.0
    update_s: float = 0.0
    weight_gather_s: float = 0.0
    engine_load_s: float = 0.0
    # What the rank does: "train+rollout" (colocated: a shard and an engine), "train" (a shard,
    # no engine) or "rollout" (an engine, no shard): ``rollout_ranks``.
    role: str = "train+rollout"

    # The parts of a rank's step time, as (field, what the run page calls it).
    PARTS = (("generation_s", "generation"), ("update_s", "update"),
             ("weight_gather_s", "weight gather"), ("engine_load_s", "engine load"))


@dataclass
class StepRecord:
    """Everything one training step produced. A recorder writes it atomically."""

    step: int                  # 1-based
    metrics: dict[str, float]
    rounds: list[RoundStat]
    prompts: list[PromptStepRecord]
    samples: list[SampleRecord]
    # Per rank of a world_size > 1 run (the learner's ``rank_records()``); empty in one process.
    ranks: list[RankRecord] = field(default_factory=list)


@dataclass
class CheckpointRecord:
    step: int
    path: str


@dataclass
class EvalRecord:
    step: int
    metrics: dict[str, float]  # greedy_accuracy, avg@k, pass@k, ...


class Recorder(Protocol):
    """Where a run's events go. Calls come from the training loop's thread, in order."""

    def on_round(self, step: int, stat: RoundStat) -> None:
        """After each sampling round: live progress and heartbeat (nothing durable needed)."""
        ...

    def on_step(self, record: StepRecord) -> None:
        """After each step's update: durable, atomic, idempotent per (run, step)."""
        ...

    def on_checkpoint(self, record: CheckpointRecord) -> None: ...

    # Optional: ``before_checkpoint(step)`` is called before a checkpoint's files are written
    # and may raise to prevent the write (a worker that lost its run's lease writes no files).


class StopRequested(Exception):  # noqa: N818 - a signal, not an error
    """``should_stop()`` said stop inside a long inner loop (the update's mini-batches, the
    evaluation's batches). ``clean``: nothing was changed yet (no optimiser step taken), so the
    weights are still those of the last completed step."""

    def __init__(self, where: str, *, clean: bool) -> None:
        super().__init__(f"stop requested during {where}")
        self.where, self.clean = where, clean

    def on_eval(self, record: EvalRecord) -> None: ...


class NonFiniteGradients(RuntimeError):
    """More optimiser steps in a row than ``max_skipped_updates`` had a non-finite gradient
    norm (each was skipped): the run fails with this reason."""


# Key of ``update_policy``'s result that is not a step metric: the optimiser steps skipped in a
# row at the end of the update, which the loop carries across steps for max_skipped_updates.
SKIPPED_IN_A_ROW = "skipped_in_a_row"
# Key of a learner's update result that is not a step metric either: the per-prompt statistics
# (``PromptUpdateStats``) the loop hands to the algorithm's ``after_update``.
PROMPT_STATS = "prompt_stats"


@dataclass(frozen=True)
class Metric:
    """The declaration of a step metric: what it is, in which unit, within which domain. The
    dashboard builds its charts' axes from it (an axis of bounded quantities is pinned to their
    domain; the unit goes into the axis title), so a metric declared here, or in an algorithm's
    record, is chartable without a second table. A plain string is accepted wherever a Metric
    is (``as_metric``): a description with no unit and an unbounded domain."""

    description: str
    unit: str = ""                # axis unit: "0-1", "prompts", "samples", "tokens", "s", "nats"
    low: float | None = None      # the domain; None where unbounded
    high: float | None = None
    label: str = ""               # a short legend name (default: the key in words)


def fraction(description: str, label: str = "") -> Metric:
    return Metric(description, "0-1", 0.0, 1.0, label)


def count(description: str, unit: str, label: str = "") -> Metric:
    return Metric(description, unit, 0.0, None, label)


def as_metric(declared: Metric | str) -> Metric:
    return declared if isinstance(declared, Metric) else Metric(str(declared))


# Keys that only some steps carry: the rollout/policy mismatch exists where the backend samples
# with an engine of its own (vllm), the truncated-importance-sampling figures where tis_cap > 0.
# Kept samples of an asynchronous step at each lag 0..max_policy_lag (its bound's upper limit,
# trainer.config): the lag distribution the run page draws, recorded with the step so that the
# page need not count the run's sample rows.
MAX_POLICY_LAG = 8
POLICY_LAG_COUNT_METRICS = tuple(f"policy_lag_samples_{lag}" for lag in range(MAX_POLICY_LAG + 1))

OPTIONAL_STEP_METRICS: dict[str, Metric | str] = {
    "rollout_logprob_diff_mean": count("mean |policy old log-prob - engine log-prob| over kept "
                                       "tokens", "nats"),
    "rollout_logprob_diff_max": count("max |policy old log-prob - engine log-prob| over kept "
                                      "tokens", "nats"),
    "tis_weight_mean": count("mean truncated importance weight over kept tokens", "weight"),
    "tis_truncated_frac": fraction("fraction of kept tokens whose importance weight hit the cap"),
    # use_kl_in_reward (verl's actor/reward_kl_penalty and actor/reward_kl_penalty_coeff).
    # k1's estimate may be negative: no lower bound.
    "reward_kl": Metric("KL to the reference in the reward (kl_penalty's estimator): the mean "
                        "over every response drawn of its token-mean KL", "nats"),
    "reward_kl_coef": count("coefficient of the KL in the reward this step used (adaptive: "
                            "moved after each step toward kl_ctrl_target)", "coefficient"),
    # Asynchronous training (max_policy_lag > 0, trainer.asyncloop) and the off-policy
    # corrections other than today's (off_policy_correction, trainer.offpolicy).
    "policy_lag_mean": count("mean over kept samples of the optimiser versions between the "
                             "weights that generated a sample and those it trains", "versions"),
    "policy_lag_max": count("largest lag of a kept sample (at most max_policy_lag)",
                            "versions"),
    **{key: count(f"kept samples generated {lag} optimiser versions behind the weights they "
                  f"trained (asynchronous steps, lags 0 to max_policy_lag)", "samples")
       for lag, key in enumerate(POLICY_LAG_COUNT_METRICS)},
    "prompts_filtered": count("prompts done sampling that the algorithm left out of the ready "
                              "buffer since the last update (asynchronous DAPO: groups without "
                              "signal, each refilled by another prompt)", "prompts"),
    "samples_filtered": count("their samples", "samples"),
    "samples_stale_dropped": count("samples dropped this step because training them would "
                                   "exceed max_policy_lag", "samples"),
    "samples_inflight_discarded": count("samples a checkpoint held in flight (drawn, not yet "
                                        "trained), discarded when the run resumed from it: "
                                        "on the first step after a resume, else 0", "samples"),
    "prompts_inflight_discarded": count("their prompts, each admitted again from its first "
                                        "round", "prompts"),
    # The step's timeline (asynchronous runs: the engine thread generates while the update
    # trains; trainer.asyncloop). Wall-clock figures, so time_* like the others: a comparison
    # of two runs' records leaves them out.
    "time_engine_busy": count("seconds the engine generated during the step (every tick, the "
                              "one overlapping the update included)", "s", "engine generating"),
    "time_trainer_busy": count("seconds the trainer updated the policy", "s",
                               "trainer training"),
    "time_overlap": count("seconds the engine generated while the update trained (both "
                          "busy at once)", "s", "both busy"),
    "time_engine_idle_share": fraction("share of the step's wall time the engine neither "
                                       "generated nor took weights", "engine idle"),
    "time_trainer_idle_share": fraction("share of the step's wall time the trainer neither "
                                        "updated nor sent weights", "trainer idle"),
    "ess": fraction("normalised effective sample size (sum w)^2 / (n sum w^2) of the kept "
                    "responses' sequence importance ratios pi_prox / pi_behav, in (0, 1]"),
    "is_truncated_frac": fraction("fraction of kept tokens whose importance weight the "
                                  "correction truncated (tis, vcpo) or left out (decoupled)"),
    "baseline_shift": count("vcpo: mean |minimum-variance baseline - the algorithm's baseline| "
                            "over the groups whose kept rewards differ", "reward"),
    "lr_applied": count("learning rate the optimiser steps applied, mean over them (vcpo "
                        "scales it by sqrt(ESS))", "lr"),
}

# Pass-rate thresholds of the step metrics pass_rate_le_<t> (the paper's Fig. 5 type: the share of
# the batch's prompts below a pass rate over training): all wrong, at most a quarter right, at most
# half right.
PASS_RATE_THRESHOLDS = (0.0, 0.25, 0.5)
PASS_RATE_METRICS = tuple(f"pass_rate_le_{t:g}" for t in PASS_RATE_THRESHOLDS)


# Keys of StepRecord.metrics that every step carries (the dashboard and the benchmarks read them).
# ``entropy`` is the token-mean whatever ``loss_agg_mode``; ``entropy_agg`` the mode's aggregate
# (the entropy bonus's term; what verl logs as ``actor/entropy``): equal under token-mean.
UPDATE_METRICS = ("policy_loss", "entropy", "entropy_agg", "kl", "clip_frac_low",
                  "clip_frac_high", "dual_clip_frac", "grad_norm", "lr", "optimizer_steps",
                  "skipped_updates")

STEP_METRICS: dict[str, Metric | str] = {
    "reward_all": fraction("mean reward of every sample drawn this step"),
    "real_reward": fraction("mean over prompts of the mean reward of each prompt's first n "
                            "i.i.d. samples (comparable to GRPO)"),
    "kept_reward": fraction("mean reward of the responses kept for the update"),
    "samples": count("responses generated this step", "samples"),
    "tokens": count("response tokens generated this step", "tokens"),
    "zero_adv_frac": fraction("fraction of kept groups whose advantages are all zero"),
    "first_round_all_correct": fraction("fraction of prompts whose first n samples were all "
                                        "positive (every algorithm: GRPO's n, the first n of "
                                        "Seq's round 1)"),
    "first_round_all_wrong": fraction("fraction of prompts whose first n samples were all "
                                      "negative"),
    "unresolved": count("prompts still active after the last round", "prompts"),
    "prompts_revisited": count("prompts of this step that an earlier step of the run drew too "
                               "(every prompt of DAPO's batches; 0 within the first epoch for "
                               "the others)", "prompts"),
    "unresolved_missing_pos": count("unresolved prompts lacking positives", "prompts"),
    "unresolved_missing_neg": count("unresolved prompts lacking negatives", "prompts"),
    "entropy": count("token-mean entropy of the kept responses under the policy (every token "
                     "weighs the same, whatever loss_agg_mode), mean over the optimiser steps",
                     "nats"),
    "entropy_agg": count("the same entropy aggregated by loss_agg_mode, as the entropy bonus "
                         "uses it (verl's actor/entropy): equal to entropy under token-mean; "
                         "per response under seq-mean-token-sum", "nats"),
    "policy_loss": Metric("PPO-clip loss (aggregated by loss_agg_mode), averaged over the "
                          "optimiser steps taken", "loss"),
    "kl": Metric("mean KL to the reference policy in the loss (kl_loss_type's estimator; 0 "
                 "when off)", "nats"),
    "clip_frac_low": fraction("fraction of tokens clipped at 1 - eps_low"),
    "clip_frac_high": fraction("fraction of tokens clipped at 1 + eps_high"),
    "dual_clip_frac": fraction("fraction of tokens with a negative advantage capped at "
                               "-A x clip_ratio_c (dual-clip)"),
    "optimizer_steps": count("optimiser steps taken this step (mini-batches x epochs)",
                             "optimiser steps"),
    "grad_norm": count("gradient norm before clipping, mean over the optimiser steps taken",
                       "norm"),
    "skipped_updates": count("optimiser steps skipped because the gradient norm was not finite "
                             "(the weights stay as they were; max_skipped_updates in a row "
                             "fail the run)", "optimiser steps"),
    "response_length": count("mean response length", "tokens"),
    "kept_response_length": count("mean length of the responses kept for the update; compare "
                                  "across schedulers: streaming favours short responses",
                                  "tokens"),
    "tokens_discarded": count("response tokens generated and then thrown away: requests aborted "
                              "by the streaming scheduler, or finished after their prompt had "
                              "stopped, and speculative early rounds of prompts that exited",
                              "tokens"),
    "early_rounds_started": count("rounds submitted before the prompt's previous round was back "
                                  "and decided (early_rounds: certain or speculative)", "rounds",
                                  "early rounds started"),
    "early_rounds_discarded": count("early rounds aborted because their prompt exited after "
                                    "all (speculative only; certain rounds are always kept)",
                                    "rounds", "early rounds discarded"),
    "early_rounds_saved_s": count("largest head start one prompt's kept early rounds gained, "
                                  "summed along its rounds (engine seconds: simulated on the "
                                  "simulated backend): how much sooner that prompt was done",
                                  "s", "time saved by early rounds"),
    "verifier_errors": count("responses whose verifier raised (scored 0)", "responses"),
    "kept_samples": count("responses kept for the update", "samples"),
    "dropped_groups": count("groups left out of the update: DAPO's groups without signal, or "
                            "zero-advantage groups under passive filtering", "groups"),
    "dropped_unresolved": count("unresolved prompts left out of the update (drop_unresolved)",
                                "prompts"),
    "lr": count("learning rate used", "lr"),
    "time_generation": count("seconds generating", "s"),
    "time_scoring": count("seconds verifying", "s"),
    "time_update": count("seconds in the policy update", "s"),
    "time_sync": count("seconds pushing the updated weights into the generation engine (vllm)",
                       "s"),
    "time_step": count("seconds for the whole step", "s"),
    **{key: fraction(f"fraction of prompts whose pass rate over their first n samples is at "
                     f"most {t:g}")
       for key, t in zip(PASS_RATE_METRICS, PASS_RATE_THRESHOLDS, strict=True)},
}

# Each algorithm declares the further keys of its own steps in its record
# (``trainer.algorithms``: ``Algorithm.step_metrics``; all of them: ``step_metric_declarations``).
