"""The training loop: sample in rounds, down-sample, compute advantages, update, record.

Step randomness derives from ``(config.seed, step)`` alone (data order, generation seeds per round,
down-sampling, mini-batch order), so resuming from the checkpoint of step k replays step k+1
exactly as an uninterrupted run would have drawn it, given the same weights and optimiser state.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainer import seeds
from trainer.advantages import drop_unresolved, passive_filter
from trainer.algorithms import (
    SampledStep,
    StepContext,
    UpdateFeedback,
    choose_batch,
    get_algorithm,
)
from trainer.config import TrainConfig
from trainer.kl import current_kl, next_kl_coef
from trainer.metrics import step_metrics, step_records
from trainer.types import (
    PROMPT_STATS,
    SKIPPED_IN_A_ROW,
    STEP_METRICS,
    CheckpointRecord,
    EvalRecord,
    NonFiniteGradients,
    Prompt,
    PromptUpdateStats,
    Recorder,
    RoundStat,
    StepRecord,
    StopRequested,
)
from trainer.visits import VISITS_STATE, PromptVisits

# trainer_state.json key of the seconds trained up to the checkpoint: a resumed run's wall-time
# limit counts them.
ELAPSED_STATE = "elapsed_seconds"
# The coefficient of the KL in the reward the next step uses (the adaptive controller's state).
KL_COEF_STATE = "kl_in_reward_coef"


@dataclass
class TrainResult:
    status: str                    # "completed", "cancelled" or "time_limit"
    last_step: int                 # last completed step (0: none)
    checkpoint: str | None         # latest checkpoint written
    metrics: dict[str, float] = field(default_factory=dict)  # of the last completed step

    @property
    def cancelled(self) -> bool:
        return self.status == "cancelled"


class StopPolicy:
    """The loop's one stop signal: the caller's ``should_stop`` (cancel, lost lease) or the
    run's wall-time limit (``max_wall_seconds``, counting ``elapsed`` seconds trained before a
    resume). ``reason`` says which fired first."""

    def __init__(self, should_stop: Callable[[], bool] | None, limit_seconds: float,
                 elapsed: float = 0.0) -> None:
        self.should_stop, self.limit = should_stop, float(limit_seconds)
        self.started = time.monotonic() - elapsed
        self.reason: str | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self) -> bool:
        if self.reason is None:
            if self.limit and self.elapsed() > self.limit:
                self.reason = "time_limit"
            elif self.should_stop is not None and self.should_stop():
                self.reason = "cancelled"
        return self.reason is not None


def make_scorer(config: TrainConfig, verifier: Any = None
                ) -> Callable[[Prompt, list[str]], tuple[list[float], list[str | None]]]:
    """Rewards and per-response verifier errors for one prompt's responses (with ``verifier``,
    else the config's), with DAPO's overlong penalty where ``overlong_buffer_len`` is set (the
    schedulers pass the generations: ``trainer.rewards.RewardScorer``)."""
    from trainer.reward_registry import parse_rewards
    from trainer.rewards import RewardComponents, RewardScorer
    from trainer.verifiers import make_verifier, score_responses

    verifier = verifier if verifier is not None else make_verifier(config)
    # ``rewards`` set: the weighted sum of its components (the verifier one of them, or not).
    components = parse_rewards(config.rewards)
    return RewardScorer(lambda prompt, texts: score_responses(verifier, texts, prompt.answer),
                        config.max_new_tokens, config.overlong_buffer_len,
                        config.overlong_penalty_factor,
                        RewardComponents(components, verifier, config.verifier_timeout_seconds)
                        if components else None)


def sample_step(config: TrainConfig, batch: Sequence[Prompt], backend: Any, scorer: Any,
                step: int, state: Any = None, *,
                on_round: Callable[[RoundStat], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                more_prompts: Callable[[int], Sequence[Prompt]] | None = None,
                prompt_set: Sequence[Prompt] = (), visits: PromptVisits | None = None,
                batch_indices: Sequence[int] | None = None) -> SampledStep:
    """Sample step ``step`` of ``batch`` as the config's algorithm does
    (``Algorithm.sample_step``). ``state`` is the algorithm's persistent state
    (``Algorithm.new_state``: Est's estimator). An algorithm that draws further prompts (DAPO)
    takes them from ``prompt_set`` (the run's training prompts; ``batch_indices``: the batch's
    indices in it, by default found by prompt id) through its ``select_batch``, ordered by
    ``visits`` (how many earlier steps drew each prompt of ``prompt_set``), or from
    ``more_prompts(k)`` (k = 1, 2, ...) where given. A cancelled step returns ``result=None``
    and leaves the state as it was."""
    algorithm = get_algorithm(config.algorithm)
    if batch_indices is None and prompt_set:
        where = {p.id: i for i, p in reversed(list(enumerate(prompt_set)))}
        batch_indices = [where[p.id] for p in batch] if all(p.id in where for p in batch) \
            else None
    return algorithm.sample_step(StepContext(
        config=config, step=step, prompt_set=prompt_set, state=state, visits=visits,
        batch=batch, backend=backend, scorer=scorer, batch_indices=batch_indices,
        on_round=on_round, should_stop=should_stop, more_prompts=more_prompts))


def _seed_all(seed: int, with_torch: bool = True) -> None:
    """Seed Python's, numpy's and (``with_torch``) torch's global generators. A backend
    without a model (``uses_torch = False``: the simulated one) never draws from torch, and
    importing it cost each such run's process a second or more."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if with_torch or "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)


def train(config: TrainConfig, prompts: Sequence[Prompt], backend: Any, recorder: Recorder,
          should_stop: Callable[[], bool] | None = None, *, out_dir: str | Path,
          eval_prompts: Sequence[Prompt] | None = None,
          resume_from: str | Path | None = None, engine_thread: bool = True) -> TrainResult:
    """Train ``backend.model`` (or just sample, for the simulated backend) for
    ``config.total_steps`` steps, emitting every event to ``recorder``.

    ``should_stop`` is polled between sampling rounds, before every mini-batch of the update and
    before every generation call of an evaluation: when it returns True the run stops cleanly,
    makes sure a checkpoint of the last completed step exists (unless the update had already
    taken an optimiser step: weights half-way through a step are never saved) and returns a
    result with ``status == "cancelled"``; past ``config.max_wall_seconds`` the same happens
    with ``status == "time_limit"``. A step's evaluation runs before its checkpoint is saved, so
    a crash between the two replays both on resume. ``resume_from`` (a checkpoint directory)
    restores weights, optimiser, scheduler, RNG states and step; the next step is the one after
    the checkpoint's. ``engine_thread`` (asynchronous runs): the generation placed during an
    update runs on an engine thread while it trains; False runs the same schedule serially,
    with identical records (``trainer.asyncloop``; for tests and benchmarks).
    """
    config.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.max_policy_lag > 0:
        from trainer.asyncloop import AsyncTraining

        run: _Training = AsyncTraining(config, prompts, backend, recorder, out, eval_prompts,
                                       engine_thread=engine_thread)
    else:
        run = _Training(config, prompts, backend, recorder, out, eval_prompts)
    run.start(should_stop, resume_from)
    if run.first_step == 1 and config.eval_every:
        try:
            run.evaluate(0)
        except StopRequested:
            return run.stopped(0, clean=True)
    for step in range(run.first_step, config.total_steps + 1):
        stopped = run.step(step)
        if stopped is not None:
            return stopped
    return TrainResult("completed", config.total_steps, run.last_ckpt, run.last_metrics)


class _Training:
    """One ``train`` call's run state across its steps: who trains (the learner), the
    algorithm and its persistent state, how many steps drew each prompt (the visits), the stop
    policy, the last checkpoint and the optimiser steps skipped in a row."""

    def __init__(self, config: TrainConfig, prompts: Sequence[Prompt], backend: Any,
                 recorder: Recorder, out: Path, eval_prompts: Sequence[Prompt] | None) -> None:
        from trainer.learner import make_learner
        from trainer.verifiers import make_verifier

        self.config, self.prompts, self.backend, self.recorder = config, prompts, backend, recorder
        self.out, self.eval_prompts = out, eval_prompts
        # One verifier (math-verify's helper process) for sampling and evaluation alike.
        self.verifier = make_verifier(config)
        self.scorer = make_scorer(config, self.verifier)
        # Who trains the policy (this process, the ranks of a distributed run, or nobody for
        # the simulated backend): the steps below are the same for each.
        self.learner = make_learner(config, backend)
        self.algorithm = get_algorithm(config.algorithm)
        # The algorithm's persistent state (Est's pass-rate estimator): run state,
        # checkpointed.
        self.algo_state = self.algorithm.new_state(config)
        # How many steps drew each training prompt: every step's prompts_revisited, and the
        # order of DAPO's further prompts. Run state, checkpointed.
        self.visits = PromptVisits(len(prompts))
        self.first_step = 1
        self.last_ckpt: str | None = None
        self.last_metrics: dict[str, float] = {}
        self.skip_streak = 0
        self.stop = StopPolicy(None, 0.0)
        # use_kl_in_reward: the coefficient of the next step (run state, checkpointed).
        self.kl_coef = config.kl_ctrl_coef

    def start(self, should_stop: Callable[[], bool] | None,
              resume_from: str | Path | None) -> None:
        """Restore the run from ``resume_from`` or seed a fresh one; start the clock."""
        elapsed = 0.0
        state = self.learner.prepare(resume_from)
        if state is not None:
            self.first_step = int(state["step"]) + 1
            elapsed = float(state.get(ELAPSED_STATE, 0.0))
            self._restore(state, resume_from)
            self.last_ckpt = str(resume_from)
        else:
            _seed_all(self.config.seed, getattr(self.backend, "uses_torch", True))
        self.stop = StopPolicy(should_stop, self.config.max_wall_seconds, elapsed)

    def _restore(self, state: dict[str, Any], resume_from: str | Path | None) -> None:
        if self.algo_state is not None:
            key = self.algorithm.state_key
            if key not in state:
                raise ValueError(f"checkpoint {resume_from} has no {key}: it was not written "
                                 f"by an {self.algorithm.name} run")
            self.algo_state.load_state_dict(state[key])
        if self.config.use_kl_in_reward:
            # A checkpoint of a run without the KL in the reward: its start.
            self.kl_coef = float(state.get(KL_COEF_STATE, self.config.kl_ctrl_coef))
        if VISITS_STATE in state:
            self.visits.load_state_dict(state[VISITS_STATE])
        else:  # a checkpoint older than the counts: the batches it selected are all it knows
            self.visits = PromptVisits.from_selections(
                len(self.prompts), self.first_step - 1,
                lambda s: choose_batch(self.config, self.prompts, s))

    def save(self, step: int) -> str:
        from trainer import checkpoint as ckpt

        before = getattr(self.recorder, "before_checkpoint", None)
        if before is not None:
            before(step)  # may raise: e.g. the run's lease is lost, so no files are written
        extra: dict[str, Any] = {ELAPSED_STATE: self.stop.elapsed(),
                                 VISITS_STATE: self.visits.state_dict()}
        if self.algo_state is not None:
            extra[self.algorithm.state_key] = self.algo_state.state_dict()
        if self.config.use_kl_in_reward:
            extra[KL_COEF_STATE] = self.kl_coef
        extra.update(self.run_state())
        path = self.learner.save(ckpt.checkpoint_dir(self.out, step), step=step,
                                 config=self.config.to_dict(), extra=extra)
        self.recorder.on_checkpoint(CheckpointRecord(step=step, path=str(path)))
        return str(path)

    def run_state(self) -> dict[str, Any]:
        """What else a checkpoint holds for a resume (none when synchronous: the asynchronous
        producer's admission state)."""
        return {}

    def evaluate(self, step: int) -> None:
        if not self.eval_prompts:
            return
        from trainer.evaluate import evaluate as run_eval

        config = self.config
        metrics = run_eval(self.backend, list(self.eval_prompts), self.verifier, config.eval_k,
                           seeds.derive_seed(config.seed, step, seeds.EVAL),
                           should_stop=self.stop, positive_threshold=config.positive_threshold)
        self.recorder.on_eval(EvalRecord(step=step, metrics={k: float(v)
                                                             for k, v in metrics.items()}))

    def stopped(self, done: int, clean: bool) -> TrainResult:
        from trainer import checkpoint as ckpt

        if clean and (self.last_ckpt is None
                      or ckpt.read_state(self.last_ckpt)["step"] != done):
            self.last_ckpt = self.save(done)
        return TrainResult(self.stop.reason or "cancelled", done, self.last_ckpt,
                           self.last_metrics)

    def step(self, step: int) -> TrainResult | None:
        """One training step, its records, evaluation and checkpoint; a ``TrainResult`` where
        the run stops at it (cancel, wall time), else None."""
        config = self.config
        t_step = time.perf_counter()
        sampled, own = self.sample(step)
        res, outcome, allocation = sampled.result, sampled.outcome, sampled.allocation
        batch = sampled.prompts  # DAPO: every batch of prompts it drew
        if res is None:
            return self.stopped(step - 1, clean=True)
        kl_metrics: dict[str, float] = {}
        if config.use_kl_in_reward:
            res, kl_metrics = self._kl_in_reward(res, outcome, batch)
        kept = res.kept
        if config.passive_filtering:
            kept = passive_filter(res.advantages, res.sample_prompt, res.kept, res.num_prompts)
        if config.drop_unresolved:
            kept = drop_unresolved(kept, res.sample_prompt, res.exit_round > 0)
        metrics = step_metrics(config, res, outcome, kept, allocation) | kl_metrics
        metrics.update(self.sampling_metrics(sampled, kept))
        drawn = own if sampled.prompt_indices is None else sampled.prompt_indices
        metrics["prompts_revisited"] = float(self.visits.revisited(drawn))
        try:
            stats = self._update(step, res, outcome, batch, kept, metrics, t_step)
        except StopRequested as exc:
            # The algorithm's state (Est's estimator) already counted this step: only a
            # clean stop without such state may save.
            return self.stopped(step - 1, clean=exc.clean and self.algo_state is None)
        self.visits.mark(drawn)  # after the update: a step stopped before it drew nothing
        self.trained(sampled)
        if self.algorithm.after_update is not None:
            self.algorithm.after_update(UpdateFeedback(
                config=config, step=step, state=self.algo_state, prompts=batch,
                prompt_indices=list(drawn), result=res, kept=kept, stats=stats))
        self._record(step, res, outcome, batch, kept, allocation, metrics, sampled.versions)
        if config.eval_every and step % config.eval_every == 0:
            try:
                self.evaluate(step)
            except StopRequested:
                return self.stopped(step, clean=True)
        if (config.save_every and step % config.save_every == 0) or step == config.total_steps:
            self.last_ckpt = self.save(step)
        return None

    def _kl_in_reward(self, res: Any, outcome: Any, batch: Sequence[Prompt]
                      ) -> tuple[Any, dict[str, float]]:
        """``use_kl_in_reward`` (verl's ``apply_kl_penalty``): every sample of the step's pools
        loses the coefficient times its KL summed over its tokens from the reward its
        advantage uses (the baseline reads the whole pool), then the controller moves the
        coefficient on the step's KL over that many responses. Returns the result and the
        step's KL and the coefficient it used."""
        sums, means = self.learner.sequence_kl(res, outcome, batch)
        coef = self.kl_coef
        kl = current_kl(means)
        self.kl_coef = next_kl_coef(self.config, coef, kl, len(sums))
        return res.with_kl_penalty(coef * sums), {"reward_kl": kl, "reward_kl_coef": coef}

    def sample(self, step: int) -> tuple[SampledStep, list[int]]:
        """Step ``step``'s sampling and its own batch's indices: the algorithm's step on the
        weights of the previous one (synchronous; ``trainer.asyncloop`` overrides it)."""
        own = choose_batch(self.config, self.prompts, step, state=self.algo_state,
                           visits=self.visits)
        batch = [self.prompts[i] for i in own]

        def on_round(stat: RoundStat, step: int = step) -> None:
            self.recorder.on_round(step, stat)

        return sample_step(self.config, batch, self.backend, self.scorer, step, self.algo_state,
                           on_round=on_round, should_stop=self.stop, prompt_set=self.prompts,
                           visits=self.visits, batch_indices=own), own

    def sampling_metrics(self, sampled: SampledStep, kept: np.ndarray) -> dict[str, float]:
        """Metrics of how the step was sampled beyond the common ones (none when
        synchronous)."""
        return {}

    def trained(self, sampled: SampledStep) -> None:
        """The step's update is done (asynchronous training advances its policy version)."""

    def before_sync(self, outcome: Any, metrics: dict[str, float],
                    update: tuple[float, float]) -> None:
        """The update is done (from ``update[0]`` to ``update[1]``, perf_counter seconds), its
        weights not yet in the engine (asynchronous training waits for the engine's tick
        here)."""

    def timeline_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """What the engine and the trainer did during the step (none when synchronous)."""
        return {}

    def _update(self, step: int, res: Any, outcome: Any, batch: Sequence[Prompt],
                kept: np.ndarray, metrics: dict[str, float], t_step: float
                ) -> PromptUpdateStats | None:
        """The learner's update and the weights into the engine; their metrics and the step's
        times go into ``metrics``. Returns the update's per-prompt statistics where the
        algorithm asks for them (``after_update``)."""
        config = self.config
        t_update = time.perf_counter()
        upd = self.learner.update(res, outcome, batch, kept, step=step,
                                  seed=seeds.derive_seed(config.seed, step, seeds.UPDATE),
                                  should_stop=self.stop,
                                  prompt_stats=self.algorithm.after_update is not None)
        stats = upd.pop(PROMPT_STATS, None)
        # Optimiser steps skipped in a row (a non-finite gradient norm), across steps.
        in_a_row = upd.pop(SKIPPED_IN_A_ROW, None)
        if in_a_row is not None:
            self.skip_streak = self.skip_streak + int(in_a_row) \
                if upd["optimizer_steps"] == 0 else int(in_a_row)
        t_trained = time.perf_counter()
        self.before_sync(outcome, metrics, (t_update, t_trained))
        t_sync = time.perf_counter()
        self.learner.sync_weights()
        upd["time_sync"] = time.perf_counter() - t_sync
        metrics.update(upd)
        metrics["time_generation"] = outcome.time_generation
        metrics["time_scoring"] = outcome.time_scoring
        metrics.setdefault("time_sync", 0.0)
        # The update alone: pushing the new weights into the engine is time_sync (and waiting
        # for the engine, asynchronously, is neither).
        metrics["time_update"] = t_trained - t_update
        metrics["time_step"] = time.perf_counter() - t_step
        metrics.update(self.timeline_metrics(metrics))
        missing = set(STEP_METRICS) - set(metrics)
        assert not missing, f"step metrics lack {missing}"
        return stats

    def _record(self, step: int, res: Any, outcome: Any, batch: Sequence[Prompt],
                kept: np.ndarray, allocation: Any, metrics: dict[str, float],
                versions: np.ndarray | None = None) -> None:
        """The step's records to the recorder; then fail the run if too many optimiser steps
        in a row were skipped (recorded first, so the run page shows the step that ended
        it)."""
        prompt_recs, sample_recs = step_records(batch, res, outcome, kept, allocation,
                                                versions)
        # Where each rank ran and how its step split (a distributed learner's
        # ``rank_records()``); a one-process learner has no ranks to report.
        rank_records = getattr(self.learner, "rank_records", None)
        self.recorder.on_step(StepRecord(step=step, metrics=metrics,
                                         rounds=list(outcome.round_stats), prompts=prompt_recs,
                                         samples=sample_recs,
                                         ranks=list(rank_records()) if rank_records else []))
        self.last_metrics = metrics
        if self.skip_streak > self.config.max_skipped_updates:
            raise NonFiniteGradients(
                f"the gradient norm was not finite in {self.skip_streak:,} optimiser steps in a "
                f"row (up to step {step:,}), more than max_skipped_updates = "
                f"{self.config.max_skipped_updates:,}; each was skipped, so the weights are those "
                f"of the last finite update. Look for inf or NaN advantages or rewards, or lower "
                f"lr.")
