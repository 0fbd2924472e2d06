"""Who trains the policy: the loop (``trainer.loop.train``) samples, scores, down-samples and
records; a learner turns a step's kept responses into new weights, puts them into the
generation engine(s) and saves or restores its part of a checkpoint.

- ``LocalLearner``: one process holds the policy (``backend.model``), its AdamW state and, with
  a KL penalty, the frozen reference (a LoRA policy's: its adapter switched off,
  ``trainer.lora``); the update is ``trainer.update.update_policy``.
- ``SamplingOnly``: no policy at all (the simulated backend): the step's update metrics are
  zeros and the schedule's lr.
- ``trainer.distributed.DistributedLearner`` (world_size > 1): the policy sharded across ranks.

The loop asks ``make_learner`` for one and never looks at which it got, so the orchestration of
a step (sampling, stops, records, checkpoints) stays in one place for every layout.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from trainer.config import TrainConfig
from trainer.lora import AdapterOff, is_lora
from trainer.result import SamplerResult
from trainer.types import Prompt, RoundsOutcome


class Learner(Protocol):
    """What the loop asks of whoever trains the policy."""

    def prepare(self, resume_from: str | Path | None) -> dict[str, Any] | None:
        """Restore weights, optimiser, schedule and RNG states from ``resume_from`` (then
        return the checkpoint's ``trainer_state``, the new weights already in the engine), or
        start fresh (return None)."""
        ...

    def update(self, res: SamplerResult, outcome: RoundsOutcome, batch: Sequence[Prompt],
               kept: np.ndarray, *, step: int, seed: int,
               should_stop: Callable[[], bool] | None = None,
               prompt_stats: bool = False) -> dict[str, Any]:
        """One training step's update on the kept responses (each weighted by the algorithm's
        ``res.weights``); the ``UPDATE_METRICS`` and, with ``prompt_stats``, the per-prompt
        statistics under ``PROMPT_STATS`` (``trainer.types.PromptUpdateStats``; none where
        nothing trains). Raises ``StopRequested`` when ``should_stop`` fires between
        mini-batches."""
        ...

    def sequence_kl(self, res: SamplerResult, outcome: RoundsOutcome,
                    batch: Sequence[Prompt]) -> tuple[np.ndarray, np.ndarray]:
        """``use_kl_in_reward``: every sample's KL (``kl_penalty``) between the weights that
        sampled it and the frozen reference, summed over its tokens and its token mean, in
        sample order (``trainer.update.sequence_kl``)."""
        ...

    def sync_weights(self) -> None:
        """Put the weights the last update produced into the generation engine(s)."""
        ...

    def save(self, path: Path, *, step: int, config: dict[str, Any],
             extra: dict[str, Any]) -> Path:
        """Write the checkpoint of the state after ``step`` to ``path`` (``trainer_state``
        gets ``extra``: the loop's run state)."""
        ...


def make_learner(config: TrainConfig, backend: Any) -> Learner:
    """The learner of ``backend``: its own where it brings one (the distributed backend's
    ranks), else one process training ``backend.model``, else none (simulated)."""
    own = getattr(backend, "learner", None)
    if own is not None:
        return own
    if getattr(backend, "model", None) is None:
        return SamplingOnly(config)
    return LocalLearner(config, backend)


class SamplingOnly:
    """No policy (the simulated backend): nothing trains, a checkpoint holds the run state."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def prepare(self, resume_from: str | Path | None) -> dict[str, Any] | None:
        from trainer import checkpoint as ckpt

        return None if resume_from is None else ckpt.load_checkpoint(resume_from)

    def update(self, res: SamplerResult, outcome: RoundsOutcome, batch: Sequence[Prompt],
               kept: np.ndarray, *, step: int, seed: int,
               should_stop: Callable[[], bool] | None = None,
               prompt_stats: bool = False) -> dict[str, Any]:
        from trainer.schedule import warmup_factor
        from trainer.types import UPDATE_METRICS

        upd = dict.fromkeys(UPDATE_METRICS, 0.0)
        upd["lr"] = self.config.lr * warmup_factor(step - 1, self.config.warmup_steps)
        return upd

    def sequence_kl(self, res: SamplerResult, outcome: RoundsOutcome,
                    batch: Sequence[Prompt]) -> tuple[np.ndarray, np.ndarray]:
        # validate() refuses use_kl_in_reward on the simulated backend.
        raise ValueError("use_kl_in_reward needs a policy: backend hf or vllm")

    def sync_weights(self) -> None:
        pass

    def save(self, path: Path, *, step: int, config: dict[str, Any],
             extra: dict[str, Any]) -> Path:
        from trainer import checkpoint as ckpt

        return ckpt.save_checkpoint(path, step=step, config=config, extra=extra)


class LocalLearner:
    """The policy, its optimiser and (with ``kl_coef`` or ``use_kl_in_reward``) its frozen
    reference in this process."""

    def __init__(self, config: TrainConfig, backend: Any) -> None:
        from trainer.update import make_optimizer

        self.config, self.backend = config, backend
        self.model, self.tokenizer = backend.model, backend.tokenizer
        self.optimizer, self.scheduler = make_optimizer(self.model, config)
        self.pad_id = int(getattr(self.tokenizer, "pad_token_id", None) or 0)
        self.ref_model: Any = None

    def prepare(self, resume_from: str | Path | None) -> dict[str, Any] | None:
        from trainer import checkpoint as ckpt

        state = None
        if resume_from is not None:
            state = ckpt.load_checkpoint(resume_from, model=self.model,
                                         optimizer=self.optimizer, scheduler=self.scheduler)
            self.backend.sync_weights()
            ref_dir = Path(resume_from) / "reference"
            if self.config.uses_reference and ref_dir.is_dir() and not is_lora(self.model):
                self.ref_model = copy.deepcopy(self.model)
                ckpt.load_checkpoint(ref_dir, model=self.ref_model, restore_rng=False)
        if self.config.uses_reference and self.ref_model is None and is_lora(self.model):
            # W alone: the frozen initial policy a LoRA policy already holds.
            self.ref_model = AdapterOff(self.model)
        if self.config.uses_reference and self.ref_model is None:
            self.ref_model = copy.deepcopy(self.model)
        if self.ref_model is not None and not isinstance(self.ref_model, AdapterOff):
            self.ref_model.eval().requires_grad_(False)
        return state

    def update(self, res: SamplerResult, outcome: RoundsOutcome, batch: Sequence[Prompt],
               kept: np.ndarray, *, step: int, seed: int,
               should_stop: Callable[[], bool] | None = None,
               prompt_stats: bool = False) -> dict[str, Any]:
        from trainer.update import update_policy

        ub = update_batch(res, outcome, batch, kept, self.tokenizer, prompt_stats=prompt_stats,
                          behaviour_as_rollout=self.config.max_policy_lag > 0)
        metrics = update_policy(self.model, self.optimizer, self.scheduler, ub, self.config,
                                pad_token_id=self.pad_id, ref_model=self.ref_model, seed=seed,
                                micro_batch_size=self.config.ppo_micro_batch_size or None,
                                should_stop=should_stop)
        if not math.isfinite(metrics["policy_loss"]):
            raise FloatingPointError(f"non-finite policy loss {metrics['policy_loss']}")
        return metrics

    def sequence_kl(self, res: SamplerResult, outcome: RoundsOutcome,
                    batch: Sequence[Prompt]) -> tuple[np.ndarray, np.ndarray]:
        """Every sample's KL to the reference, summed over its tokens and its token mean
        (``trainer.update.sequence_kl`` with ``kl_penalty``), in sample order."""
        from trainer.update import sequence_kl

        every = np.ones(len(res.rewards), dtype=bool)
        ub = update_batch(res, outcome, batch, every, self.tokenizer)
        return sequence_kl(self.model, self.ref_model, ub, self.config.kl_penalty,
                           pad_token_id=self.pad_id, temperature=float(self.config.temperature),
                           micro_batch_size=self.config.ppo_micro_batch_size or None)

    def sync_weights(self) -> None:
        self.backend.sync_weights()

    def save(self, path: Path, *, step: int, config: dict[str, Any],
             extra: dict[str, Any]) -> Path:
        from trainer import checkpoint as ckpt

        path = ckpt.save_checkpoint(path, step=step, config=config, model=self.model,
                                    tokenizer=self.tokenizer, optimizer=self.optimizer,
                                    scheduler=self.scheduler, extra=extra)
        if self.ref_model is not None and not is_lora(self.model):
            self.ref_model.save_pretrained(path / "reference", safe_serialization=True)
            (path / "reference" / ckpt.STATE_FILE).write_text('{"step": 0}')
        return path


def update_batch(res: SamplerResult, outcome: RoundsOutcome, batch: Sequence[Prompt],
                 kept: np.ndarray, tokenizer: Any, *, prompt_stats: bool = False,
                 behaviour_as_rollout: bool = False) -> Any:
    """The kept responses of a step as an ``UpdateBatch``, in sample order, with their loss
    weights; ``groups`` are the prompts' indices in ``batch``. ``behaviour_as_rollout``
    (asynchronous training): the recorded log-probs are the behaviour policy's, older than the
    weights the update starts from, so they go in as the rollout's and the update recomputes
    the old (proximal) ones before its first mini-batch (``trainer.offpolicy``)."""
    from trainer.update import UpdateBatch

    ub = UpdateBatch([], [], [], [], [], [], prompt_stats=prompt_stats,
                     num_prompts=len(batch))
    for k in np.flatnonzero(kept).tolist():
        i = int(res.sample_prompt[k])
        g = outcome.generations[i][int(res.sample_pool_index[k])]
        prompt_ids = g.prompt_token_ids or list(tokenizer(batch[i].text)["input_ids"])
        ub.prompt_ids.append(list(prompt_ids))
        ub.response_ids.append(list(g.response_token_ids))
        ub.advantages.append(float(res.advantages[k]))
        ub.groups.append(i)
        if behaviour_as_rollout:
            ub.old_logprobs.append(None)
            ub.rollout_logprobs.append(g.rollout_logprobs if g.rollout_logprobs is not None
                                       else g.logprobs)
        else:
            ub.old_logprobs.append(g.logprobs)
            ub.rollout_logprobs.append(g.rollout_logprobs)
        ub.weights.append(float(res.weights[k]))
        ub.rewards.append(float(res.rewards[k]))
    return ub
