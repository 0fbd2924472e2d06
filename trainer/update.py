"""The policy update: ``ppo_epochs`` passes of dual-clip PPO over mini-batches of prompts, AdamW
with verl's constant-with-warm-up schedule and grad-norm clipping.

With one mini-batch (the default) the single optimiser step starts at the sampling weights, so
every ratio is 1 and neither clip acts: the update is REINFORCE with a baseline. Clipping engages
from the second mini-batch on (the authors: B=512 in mini-batches of 128, 4 optimiser steps).

The "old" log-probabilities of PPO are the sampling policy's, recorded by the backend at sampling
time (``Generation.logprobs``); where a backend did not record them they are computed once with the
current weights before the first mini-batch (the same thing when the update starts from the
sampling weights, as it does here).

Asynchronous training (``max_policy_lag`` > 0) hands the recorded log-probs in as the rollout's
(the behaviour policy's, older than the weights the update starts from), so the old ones are
recomputed: they are the proximal policy's. ``off_policy_correction`` then weighs each token
(``tis``, ``decoupled``), and ``vcpo`` also scales each optimiser step's lr by sqrt(ESS) and
replaces the algorithm's baseline by its minimum-variance one (``trainer.offpolicy``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainer.loss import (
    Aggregation,
    agg_loss,
    agg_rows,
    entropy_bonus,
    kl_penalty,
    ppo_clip_loss,
)
from trainer.offpolicy import (
    decoupled_weights,
    ess_lr_scale,
    sequence_ratios,
    tis_weights,
)
from trainer.schedule import warmup_factor
from trainer.types import (
    PROMPT_STATS,
    SKIPPED_IN_A_ROW,
    UPDATE_METRICS,
    PromptUpdateStats,
    StopRequested,
)

_LOSS_METRICS = ("policy_loss", "entropy", "entropy_agg", "kl", "clip_frac_low",
                 "clip_frac_high", "dual_clip_frac")


@dataclass
class UpdateBatch:
    """The kept responses of a step. ``groups[i]`` is the prompt a response belongs to
    (mini-batches split by prompt, so a group is never cut in two)."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    advantages: list[float]
    groups: list[int]
    old_logprobs: list[list[float] | None] = field(default_factory=list)
    # The sampling engine's own log-probs (vllm), for truncated importance sampling.
    rollout_logprobs: list[list[float] | None] = field(default_factory=list)
    # Each response's weight in the policy loss, set by the algorithm (empty: all 1).
    weights: list[float] = field(default_factory=list)
    # Each response's reward (empty where unknown; VCPO's baseline needs them).
    rewards: list[float] = field(default_factory=list)
    # Whether to measure the per-prompt statistics (``PromptUpdateStats``) of the step's
    # ``num_prompts`` prompts (the algorithm's ``after_update`` reads them).
    prompt_stats: bool = False
    num_prompts: int = 0

    def __len__(self) -> int:
        return len(self.response_ids)

    def weight(self, i: int) -> float:
        return self.weights[i] if i < len(self.weights) else 1.0

    @property
    def weighted(self) -> bool:
        """Whether any response's loss weight is not 1 (else the loss is the unweighted one,
        computed exactly as it is without weights)."""
        return any(w != 1.0 for w in self.weights)


def make_optimizer(model: torch.nn.Module, config: Any
                   ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters and the warm-up scheduler, stepped once per training
    step (hand-written lambda: torch has no constant-with-warm-up schedule and transformers'
    would be the same one line)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    warmup = int(config.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_factor(s, warmup))
    return opt, sched


def response_logprobs(model: Any, prompt_ids: list[list[int]], response_ids: list[list[int]],
                      pad_token_id: int, temperature: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token log-probs, entropies and mask ``[batch, max_resp_len]`` (see trainer.policy)."""
    from trainer.policy import response_logprobs as impl

    return impl(model, prompt_ids, response_ids, pad_token_id, temperature)


def _pad(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        n = min(len(r), width)
        if n:
            out[i, :n] = torch.tensor(r[:n], dtype=torch.float32)
    return out


def _chunks(idx: list[int], size: int | None) -> list[list[int]]:
    if not size or size >= len(idx):
        return [idx]
    return [idx[i:i + size] for i in range(0, len(idx), size)]


class UpdateShard:
    """Which part of an update this process computes, and how its partial sums combine.

    This one is a single process: it takes everything and its sums are the totals.
    ``trainer.distributed.rank.ProcessGroupShard`` is one rank of several: it takes its part of
    every mini-batch (balanced by tokens) and all-reduces the sums, so the loss stays the token
    mean over the whole mini-batch and each rank's gradient is its share of the global one.
    """

    def take(self, idx: list[int], lengths: Sequence[int]) -> list[int]:
        """This process's part of the responses ``idx`` (``lengths``: every response's)."""
        return idx

    def total(self, values: list[float]) -> list[float]:
        """Element-wise sums over the processes."""
        return values

    def most(self, value: float) -> float:
        """The largest ``value`` over the processes."""
        return value

    def chunks(self, idx: list[int], size: int | None) -> list[list[int]]:
        """``idx`` in micro-batches of ``size`` responses; sharded, every process gets as many
        (empty ones added) because each forward pass of a sharded model is a collective."""
        return _chunks(idx, size)


LOCAL = UpdateShard()


def _forward(model: Any, batch: UpdateBatch, part: list[int], pad_token_id: int,
             temperature: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``response_logprobs`` of ``part``; an empty part (a rank with less work than another)
    runs one token through the model all the same, so that its collectives match the others'.
    Its mask is all False: nothing it returns counts."""
    if not part or not any(batch.response_ids[i] for i in part):
        lp, ent, mask = response_logprobs(model, [[pad_token_id]], [[pad_token_id]],
                                          pad_token_id, temperature)
        return lp, ent, torch.zeros_like(mask)
    return response_logprobs(model, [batch.prompt_ids[i] for i in part],
                             [batch.response_ids[i] for i in part], pad_token_id, temperature)


@torch.no_grad()
def _logprobs_no_grad(model: Any, batch: UpdateBatch, idx: list[int], pad_token_id: int,
                      temperature: float, micro: int | None,
                      shard: UpdateShard = LOCAL) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for part in shard.chunks(idx, micro):
        lp, _, _ = _forward(model, batch, part, pad_token_id, temperature)
        for row, i in enumerate(part):
            out[i] = lp[row, :len(batch.response_ids[i])].tolist()
    return out


def _old_logprobs(model: Any, batch: UpdateBatch, idx: list[int], pad_token_id: int,
                  temperature: float, micro: int | None, shard: UpdateShard
                  ) -> dict[int, list[float]]:
    """The sampling policy's log-probs of the responses ``idx``: recorded at sampling time
    where the backend gave them (one per token), else computed with ``model`` (the weights
    that sampled, before the update moves them)."""
    old: dict[int, list[float]] = {}
    missing = []
    for i in idx:
        rec = batch.old_logprobs[i] if i < len(batch.old_logprobs) else None
        if rec is not None and len(rec) == len(batch.response_ids[i]):
            old[i] = list(rec)
        else:
            missing.append(i)
    # A sharded model's forward is a collective: every rank runs the pass, with or without
    # work.
    if shard.most(float(len(missing))) > 0:
        old.update(_logprobs_no_grad(model, batch, missing, pad_token_id, temperature, micro,
                                     shard))
    return old


def sequence_kl(model: Any, ref_model: Any, batch: UpdateBatch, kind: str, *,
                pad_token_id: int, temperature: float, micro_batch_size: int | None = None,
                shard: UpdateShard = LOCAL) -> tuple[np.ndarray, np.ndarray]:
    """Each response's KL to the reference for the KL in the reward (``trainer.kl``): the
    per-token ``kl_estimate`` of ``kind`` between the sampling policy (the old log-probs:
    recorded at sampling time where the backend gave them, else ``model``'s, the weights that
    sampled) and ``ref_model``, summed over the response and its token mean (0 for an empty
    response). verl measures it between its recomputed old log-probs and the reference's
    (``apply_kl_penalty``).

    With several ranks each computes its token-balanced part of the responses (both models'
    forward passes are collectives) and the sums are all-reduced: every rank gets every
    response's figures."""
    from trainer.loss import kl_estimate

    n = len(batch)
    lengths = [len(r) for r in batch.response_ids]
    mine = shard.take(list(range(n)), lengths)
    model.eval()
    old = _old_logprobs(model, batch, mine, pad_token_id, temperature, micro_batch_size, shard)
    ref = _logprobs_no_grad(ref_model, batch, mine, pad_token_id, temperature,
                            micro_batch_size, shard)
    sums, means = np.zeros(n), np.zeros(n)
    with torch.no_grad():
        for i in mine:
            if lengths[i]:
                k = kl_estimate(torch.tensor(old[i], dtype=torch.float64),
                                torch.tensor(ref[i], dtype=torch.float64), kind)
                sums[i], means[i] = float(k.sum()), float(k.mean())
    total = np.asarray(shard.total([*sums.tolist(), *means.tolist()]), dtype=np.float64)
    return total[:n], total[n:]


def update_policy(model: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                  batch: UpdateBatch, config: Any, *, pad_token_id: int,
                  ref_model: Any = None, seed: int = 0, micro_batch_size: int | None = None,
                  should_stop: Callable[[], bool] | None = None,
                  shard: UpdateShard = LOCAL) -> dict[str, float]:
    """One training step's policy update. Returns the UPDATE_METRICS, averaged over the optimiser
    steps taken (``lr`` is the learning rate the step used), ``SKIPPED_IN_A_ROW`` and, where
    ``batch.prompt_stats``, ``PROMPT_STATS`` (``PromptUpdateStats``).

    A mini-batch whose gradient norm is not finite takes no optimiser step (``skipped_updates``
    counts them; ``optimizer_steps`` counts the steps taken). With several ranks the norm is the
    whole model's, so every rank skips the same mini-batches.

    Mini-batches hold ``config.ppo_mini_batch_size`` prompts (0: the whole batch) in an order
    shuffled per epoch by ``seed``; each is one optimiser step whose loss is the token-mean over
    the mini-batch (micro-batches of ``micro_batch_size`` responses accumulate gradients divided
    by the mini-batch's token count, so splitting does not change the gradient). A response's
    policy-loss terms are multiplied by its weight (``batch.weights``, the algorithm's) in
    every ``loss_agg_mode``; the denominators stay the unweighted token and response counts.

    ``should_stop`` is polled before every mini-batch (``ppo_epochs`` x mini-batches can take
    long): when it says stop, ``StopRequested`` is raised, ``clean`` when no optimiser step was
    taken yet.

    ``shard``: with several ranks (FSDP), each calls this with the whole batch and computes its
    ``shard.take`` of every mini-batch; the denominator is the mini-batch's token count summed
    over the ranks (a rank's own count would weigh a rank with fewer tokens more: the gradient of
    a per-rank mean is not the token mean's), and the metrics are summed over the ranks.
    """
    metrics = dict.fromkeys(UPDATE_METRICS, 0.0)
    metrics["lr"] = float(optimizer.param_groups[0]["lr"])
    if len(batch) == 0:
        # Nothing kept (e.g. passive filtering dropped every group): the schedule still advances
        # so that the lr of step s does not depend on earlier steps' contents.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "scheduler.step() before optimizer"
            scheduler.step()
        if batch.prompt_stats:
            metrics[PROMPT_STATS] = _Stats(batch, 1).result(shard, [[]])
        return metrics
    lengths = [len(r) for r in batch.response_ids]
    plan, mb_prompts = _plan(batch, config, seed, shard, lengths)
    epochs = config.ppo_epochs
    inputs = _Inputs.prepare(model, batch, config, plan, pad_token_id, micro_batch_size, shard,
                             ref_model)
    metrics.update(inputs.gap)
    if getattr(config, "off_policy_correction", "tis") == "vcpo" and inputs.seq_ratio \
            and len(batch.rewards) == len(batch):
        batch, metrics["baseline_shift"] = vcpo_batch(model, batch, inputs.seq_ratio,
                                                      pad_token_id, float(config.temperature))
    done = _Pass(batch, config, epochs)
    for idx, (epoch, mb) in zip(plan, _plan_positions(plan, epochs), strict=True):
        if should_stop is not None and should_stop():
            optimizer.zero_grad(set_to_none=True)
            raise StopRequested("the policy update", clean=done.n_updates == 0)
        _minibatch(model, optimizer, batch, config, idx, lengths, inputs, done, shard,
                   micro_batch_size, pad_token_id, (epoch, mb))
    optimizer.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        if done.n_updates == 0:  # every step skipped: "scheduler.step() before optimizer.step()"
            warnings.simplefilter("ignore", UserWarning)
        scheduler.step()
    model.eval()
    return done.metrics(metrics, shard, mb_prompts)


def _plan(batch: UpdateBatch, config: Any, seed: int, shard: UpdateShard,
          lengths: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
    """Every mini-batch of every epoch, as this process's part of it, planned up front (the
    old log-probs are needed for every response this process will train on), and the prompts
    of each whole mini-batch (the same on every process)."""
    groups = sorted(set(batch.groups))
    members: dict[int, list[int]] = {g: [] for g in groups}
    for i, g in enumerate(batch.groups):
        members[g].append(i)
    mb_prompts = config.ppo_mini_batch_size or len(groups)
    plan: list[list[int]] = []
    prompts: list[list[int]] = []
    for epoch in range(config.ppo_epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(groups)).tolist()
        for start in range(0, len(groups), mb_prompts):
            idx = [i for k in order[start:start + mb_prompts] for i in members[groups[k]]]
            plan.append(shard.take(idx, lengths))
            prompts.append([groups[k] for k in order[start:start + mb_prompts]])
    return plan, prompts


def _plan_positions(plan: list[list[int]], epochs: int) -> list[tuple[int, int]]:
    """(epoch, mini-batch of the epoch) of each entry of the plan."""
    per_epoch = len(plan) // epochs
    return [divmod(k, per_epoch) for k in range(len(plan))]


@dataclass
class _Inputs:
    """What the update computes once before its mini-batches: the old log-probs of every
    response this process trains on, the reference's (KL), the engine's (truncated
    importance sampling) and their gap to the old ones."""

    old: dict[int, list[float]]
    ref: dict[int, list[float]]
    rollout: dict[int, list[float]] | None
    gap: dict[str, float]
    # Each response's sequence importance ratio pi_prox / pi_behav (trainer.offpolicy), where
    # the behaviour log-probs are known and the step reports or uses them (ESS).
    seq_ratio: dict[int, float] = field(default_factory=dict)

    @classmethod
    def prepare(cls, model: Any, batch: UpdateBatch, config: Any, plan: list[list[int]],
                pad_token_id: int, micro: int | None, shard: UpdateShard,
                ref_model: Any) -> _Inputs:
        temperature = float(config.temperature)
        mine = sorted({i for part in plan for i in part})
        model.eval()  # no dropout in the reference forward passes
        old = _old_logprobs(model, batch, mine, pad_token_id, temperature, micro, shard)
        rollout = _rollout_logprobs(batch)
        gap: dict[str, float] = {}
        if rollout is not None:
            # Each response counted once: by the process that trains it in the first
            # mini-batches.
            first = sorted({i for part in plan[:len(plan) // config.ppo_epochs] for i in part})
            gap = rollout_gap(old, rollout, first, shard)
        seq_ratio: dict[int, float] = {}
        if rollout is not None and reports_off_policy(config):
            seq_ratio = {i: float(sequence_ratios(torch.tensor([old[i]]),
                                                  torch.tensor([rollout[i]]),
                                                  torch.ones(1, len(old[i])))[0])
                         for i in mine}
            first = sorted({i for part in plan[:len(plan) // config.ppo_epochs] for i in part})
            gap["ess"] = _ess(seq_ratio, first, shard)
        ref: dict[int, list[float]] = {}
        if ref_model is not None and config.kl_coef > 0:
            ref = _logprobs_no_grad(ref_model, batch, mine, pad_token_id, temperature, micro,
                                    shard)
        model.train()
        return cls(old, ref, rollout, gap, seq_ratio)


def reports_off_policy(config: Any) -> bool:
    """Whether the step measures and reports the off-policy figures (ESS, truncated share,
    lr applied): asynchronous runs and the corrections other than today's ``tis``. A
    synchronous ``tis`` run's records stay what they were."""
    return int(getattr(config, "max_policy_lag", 0) or 0) > 0 \
        or getattr(config, "off_policy_correction", "tis") != "tis"


def _ess(seq_ratio: dict[int, float], keys: Sequence[int], shard: UpdateShard) -> float:
    """The normalised ESS of ``keys``' sequence ratios, over every process's part."""
    w = np.asarray([seq_ratio[i] for i in keys if i in seq_ratio], dtype=np.float64)
    total, sq, n = shard.total([float(w.sum()), float((w * w).sum()), float(w.size)])
    if n == 0 or sq <= 0:
        return 1.0
    return min(1.0, total * total / (n * sq))


class _Stats:
    """The per-prompt statistics of an update (``PromptUpdateStats``), gathered per
    (epoch, prompt) over the optimiser steps taken and summed over the processes at the end."""

    def __init__(self, batch: UpdateBatch, epochs: int) -> None:
        self.P = max(batch.num_prompts, max(batch.groups, default=-1) + 1)
        self.loss = np.zeros((epochs, self.P))
        self.mass = np.zeros((epochs, self.P))
        self.tokens = np.zeros(self.P)
        self.stepped = np.zeros((epochs, self.P))
        self.batch = batch

    def add(self, epoch: int, part: list[int], rows_loss: torch.Tensor, rows_mass: torch.Tensor,
            lengths: Sequence[int], into: dict[str, np.ndarray]) -> None:
        for row, i in enumerate(part):
            g = self.batch.groups[i]
            into["loss"][g] += float(rows_loss[row])
            into["mass"][g] += float(rows_mass[row])
            if epoch == 0:
                into["tokens"][g] += lengths[i]
            into["seen"][g] = 1.0

    def commit(self, epoch: int, mb: dict[str, np.ndarray]) -> None:
        """A mini-batch that took its optimiser step."""
        self.loss[epoch] += mb["loss"]
        self.mass[epoch] += mb["mass"]
        self.tokens += mb["tokens"]
        self.stepped[epoch] += mb["seen"]

    def fresh(self) -> dict[str, np.ndarray]:
        return {k: np.zeros(self.P) for k in ("loss", "mass", "tokens", "seen")}

    def result(self, shard: UpdateShard, mb_prompts: list[list[int]]) -> PromptUpdateStats:
        """The statistics, summed over the processes; ``mb_prompts``: the prompts of each
        mini-batch of each epoch, in order (the same on every process)."""
        E, P = self.loss.shape
        flat = np.concatenate([self.loss.ravel(), self.mass.ravel(), self.tokens,
                               self.stepped.ravel()])
        total = np.asarray(shard.total(flat.tolist()), dtype=np.float64) if len(flat) else flat
        loss = total[:E * P].reshape(E, P)
        mass = total[E * P:2 * E * P].reshape(E, P)
        tokens = total[2 * E * P:2 * E * P + P]
        # A prompt trained by several processes is marked by each.
        stepped = total[2 * E * P + P:].reshape(E, P) > 0
        share = np.zeros((E, P))
        per_epoch = len(mb_prompts) // E
        for k, members in enumerate(mb_prompts):
            # The prompts of one mini-batch share its total (each prompt is in one per epoch).
            e, mb = k // per_epoch, np.asarray(members, dtype=np.int64)
            denom = mass[e, mb].sum()
            if denom > 0:
                share[e, mb] = mass[e, mb] / denom
        n = np.maximum(stepped.sum(axis=0), 1)
        return PromptUpdateStats(loss=loss.sum(axis=0) / n, grad_mass=mass.sum(axis=0) / n,
                                 grad_share=(share * stepped).sum(axis=0) / n, tokens=tokens)


class _Pass:
    """What the mini-batches of one update add up: the loss metrics and gradient norms of the
    optimiser steps taken, the skipped ones, truncated importance sampling's figures and the
    per-prompt statistics."""

    def __init__(self, batch: UpdateBatch, config: Any, epochs: int) -> None:
        self.totals = dict.fromkeys((*_LOSS_METRICS, "grad_norm"), 0.0)
        self.n_updates = self.skipped = self.in_a_row = 0
        self.tis_cap = float(getattr(config, "tis_cap", 0.0) or 0.0)
        self.tis = [0.0, 0.0, 0.0]  # weight sum, tokens at the cap, tokens
        self.stats = _Stats(batch, epochs) if batch.prompt_stats else None
        self.tis_on = False
        self.correction = str(getattr(config, "off_policy_correction", "tis"))
        self.report = reports_off_policy(config)
        self.lr_applied = 0.0  # summed over the optimiser steps taken

    def metrics(self, metrics: dict[str, Any], shard: UpdateShard,
                mb_prompts: list[list[int]]) -> dict[str, Any]:
        for k, v in self.totals.items():
            metrics[k] = v / max(self.n_updates, 1)
        metrics["optimizer_steps"] = float(self.n_updates)
        metrics["skipped_updates"] = float(self.skipped)
        metrics[SKIPPED_IN_A_ROW] = float(self.in_a_row)
        if self.tis_on:
            tis_sum, tis_hit, tis_tokens = shard.total(self.tis)
            metrics["tis_weight_mean"] = tis_sum / max(tis_tokens, 1.0)
            metrics["tis_truncated_frac"] = tis_hit / max(tis_tokens, 1.0)
        if self.report:
            tis_sum, tis_hit, tis_tokens = shard.total(self.tis)
            metrics["is_truncated_frac"] = tis_hit / max(tis_tokens, 1.0)
            metrics["lr_applied"] = self.lr_applied / self.n_updates if self.n_updates \
                else metrics["lr"]
            metrics.setdefault("ess", 1.0)
        if self.stats is not None:
            metrics[PROMPT_STATS] = self.stats.result(shard, mb_prompts)
        return metrics


def _minibatch(model: Any, optimizer: torch.optim.Optimizer, batch: UpdateBatch, config: Any,
               idx: list[int], lengths: Sequence[int], inputs: _Inputs, done: _Pass,
               shard: UpdateShard, micro_batch_size: int | None, pad_token_id: int,
               where: tuple[int, int]) -> None:
    """One mini-batch: its micro-batches' forward and backward passes (gradients accumulated
    over the whole mini-batch's denominators), then one optimiser step unless the gradient norm
    is not finite."""
    n_tokens, n_seqs = shard.total([float(sum(lengths[i] for i in idx)), float(len(idx))])
    agg = Aggregation(getattr(config, "loss_agg_mode", "token-mean"), n_tokens, n_seqs,
                      float(getattr(config, "max_new_tokens", 1) or 1))
    optimizer.zero_grad(set_to_none=True)
    mb = dict.fromkeys(_LOSS_METRICS, 0.0)
    mb_stats = done.stats.fresh() if done.stats is not None else None
    for part in shard.chunks(idx, micro_batch_size):
        lp, ent, mask = _forward(model, batch, part, pad_token_id, float(config.temperature))
        mask = mask.to(lp.dtype)
        width = lp.shape[1]
        old_lp = _pad([inputs.old[i] for i in part] or [[]], width).to(lp.device)
        adv = torch.tensor([batch.advantages[i] for i in part] or [0.0], dtype=lp.dtype,
                           device=lp.device)
        weights = _token_weights(batch, part, inputs, old_lp, mask, done, lp)
        pg, clip = ppo_clip_loss(lp, old_lp, adv, mask, config.clip_eps_low,
                                 config.clip_eps_high, denominator=n_tokens,
                                 token_weights=weights, clip_ratio_c=config.clip_ratio_c,
                                 agg=agg, per_token=mb_stats is not None)
        if mb_stats is not None:
            rows_mass = (torch.autograd.grad(pg, lp, retain_graph=True)[0].abs() * mask).sum(-1)
            rows_loss = agg_rows(clip["per_token"].detach(), mask, agg)
            done.stats.add(where[0], part, rows_loss, rows_mass, lengths,  # type: ignore[union-attr]
                           mb_stats)
        ent_term, h = entropy_bonus(ent, mask, config.entropy_coef, denominator=n_tokens,
                                    agg=agg)
        with torch.no_grad():
            # The mode's aggregate over the whole mini-batch (its micro-batches' parts add up).
            mb["entropy_agg"] += agg_loss(ent.detach(), mask, agg).item()
        loss = pg + ent_term
        if inputs.ref:
            ref_lp = _pad([inputs.ref[i] for i in part] or [[]], width).to(lp.device)
            kl_term, kl = kl_penalty(lp, ref_lp, mask, config.kl_coef, denominator=n_tokens,
                                     agg=agg, kind=getattr(config, "kl_loss_type",
                                                           "low_var_kl"))
            loss = loss + kl_term
            mb["kl"] += kl.item()
        loss.backward()
        mb["policy_loss"] += pg.item()
        mb["entropy"] += h.item()
        mb["clip_frac_low"] += clip["clip_frac_low"].item()
        mb["clip_frac_high"] += clip["clip_frac_high"].item()
        mb["dual_clip_frac"] += clip["dual_clip_frac"].item()
    grad_norm = torch.nn.utils.clip_grad_norm_(
        [p for g in optimizer.param_groups for p in g["params"]], config.max_grad_norm)
    if hasattr(grad_norm, "full_tensor"):  # sharded parameters: a DTensor norm
        grad_norm = grad_norm.full_tensor()
    if not torch.isfinite(grad_norm):
        # As verl's actor: an inf/NaN gradient would make every weight NaN. Skip the step
        # (weights and AdamW moments untouched); the loop fails the run after
        # max_skipped_updates in a row. Its losses are left out of the means.
        optimizer.zero_grad(set_to_none=True)
        done.skipped += 1
        done.in_a_row += 1
        return
    done.in_a_row = 0
    _step_optimizer(optimizer, done, inputs, idx, shard)
    for k, v in zip(mb, shard.total(list(mb.values())), strict=True):
        done.totals[k] += v
    done.totals["grad_norm"] += float(grad_norm)
    done.n_updates += 1
    if mb_stats is not None:
        done.stats.commit(where[0], mb_stats)  # type: ignore[union-attr]


def score_grad_sq_norms(model: Any, batch: UpdateBatch, pad_token_id: int,
                        temperature: float) -> list[float]:
    """``||grad_theta log pi(y_i | x_i)||^2`` of every response at the current (proximal)
    weights, one backward pass per response (VCPO measures each trajectory's gradient norm the
    same way; its cost is one extra forward and backward per response)."""
    params = [p for p in model.parameters() if p.requires_grad]
    out = []
    for i in range(len(batch)):
        lp, _, mask = response_logprobs(model, [batch.prompt_ids[i]], [batch.response_ids[i]],
                                        pad_token_id, temperature)
        grads = torch.autograd.grad((lp * mask).sum(), params, allow_unused=True)
        out.append(float(sum((g.double() ** 2).sum() for g in grads if g is not None)))
    return out


def vcpo_batch(model: Any, batch: UpdateBatch, seq_ratio: dict[int, float],
               pad_token_id: int, temperature: float) -> tuple[UpdateBatch, float]:
    """The batch with VCPO's minimum-variance off-policy baseline in place of the algorithm's
    (``trainer.offpolicy.min_variance_baseline``, per prompt group), and the mean
    ``|b_vcpo - b_algorithm|`` over the groups it changed.

    Every built-in advantage is affine in the reward within a group, ``A_i = s_g (R_i - c_g)``
    (GRPO: s = 1/(std + eps), c the group mean; Seq: s = 1, c the pool mean; Est: s =
    1/sqrt(rbar + eps)); the algorithm's scale s_g stays and its baseline c_g becomes b_g:
    ``A_i' = s_g (R_i - b_g)``. A group whose kept rewards are all equal has ``A' = 0`` (b_g is
    their reward)."""
    from trainer.offpolicy import min_variance_baseline

    was_training = model.training
    model.eval()
    sq = score_grad_sq_norms(model, batch, pad_token_id, temperature)
    model.train(was_training)
    rewards = torch.tensor(batch.rewards, dtype=torch.float64)
    groups = torch.tensor(batch.groups, dtype=torch.long)
    b = min_variance_baseline(rewards, torch.tensor([seq_ratio[i] for i in range(len(batch))],
                                                    dtype=torch.float64),
                              torch.tensor(sq, dtype=torch.float64), groups).tolist()
    advantages = list(batch.advantages)
    shifts = []
    for g in sorted(set(batch.groups)):
        members = [i for i, x in enumerate(batch.groups) if x == g]
        R = [batch.rewards[i] for i in members]
        lo, hi = members[int(np.argmin(R))], members[int(np.argmax(R))]
        if batch.rewards[hi] == batch.rewards[lo]:
            for i in members:
                advantages[i] = 0.0
            continue
        scale = (batch.advantages[hi] - batch.advantages[lo]) / (batch.rewards[hi]
                                                                 - batch.rewards[lo])
        baseline = batch.rewards[hi] - batch.advantages[hi] / scale if scale else b[hi]
        shifts.append(abs(b[hi] - baseline))
        for i in members:
            advantages[i] = scale * (batch.rewards[i] - b[i])
    return dataclasses.replace(batch, advantages=advantages), \
        float(np.mean(shifts)) if shifts else 0.0


def _step_optimizer(optimizer: torch.optim.Optimizer, done: _Pass, inputs: _Inputs,
                    idx: list[int], shard: UpdateShard) -> None:
    """The optimiser step; under vcpo at the lr scaled by sqrt of the mini-batch's ESS
    (``trainer.offpolicy.ess_lr_scale``), restored afterwards so the schedule is unchanged."""
    lrs = [g["lr"] for g in optimizer.param_groups]
    scale = 1.0
    if done.correction == "vcpo" and inputs.seq_ratio:
        scale = ess_lr_scale(_ess(inputs.seq_ratio, idx, shard))
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] * scale
    optimizer.step()
    if scale != 1.0:
        for g, lr in zip(optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
    done.lr_applied += float(lrs[0]) * scale


def _token_weights(batch: UpdateBatch, part: list[int], inputs: _Inputs, old_lp: torch.Tensor,
                   mask: torch.Tensor, done: _Pass, lp: torch.Tensor) -> torch.Tensor | None:
    """Each token's weight in the policy loss: truncated importance sampling's (``tis_cap``,
    where the engine's log-probs are known) times its response's weight (the algorithm's);
    None where both are 1 everywhere."""
    weights = None
    decoupled = done.correction == "decoupled"
    if (done.tis_cap > 0 or decoupled) and inputs.rollout is not None:
        done.tis_on = True
        roll_lp = _pad([inputs.rollout[i] for i in part] or [[]], lp.shape[1]).to(lp.device)
        weights, cut = decoupled_weights(old_lp, roll_lp, done.tis_cap) if decoupled \
            else tis_weights(old_lp, roll_lp, done.tis_cap)
        done.tis[0] += float((weights * mask).sum())
        done.tis[1] += float((cut * mask).sum())
        done.tis[2] += float(mask.sum())
    if batch.weighted:
        rows = torch.tensor([batch.weight(i) for i in part] or [1.0], dtype=lp.dtype,
                            device=lp.device).unsqueeze(-1)
        weights = rows.expand_as(lp) if weights is None else weights * rows
    return weights


def rollout_gap(old: dict[int, list[float]], rollout: dict[int, list[float]],
                keys: Sequence[int] | None = None, shard: UpdateShard = LOCAL
                ) -> dict[str, float]:
    """How far the sampling engine's log-probs are from the policy's old ones over the kept
    tokens (of ``keys``, default all of ``old``; summed over ``shard``'s processes): the mean
    and max of ``|logp_old_t - logp_rollout_t|``. Exists only where the backend samples with an
    engine of its own (vllm); in bf16 on a GPU this is the gap users watch."""
    keys = [i for i in (old if keys is None else keys) if old[i]]
    diffs = (np.abs(np.concatenate([old[i] for i in keys])
                    - np.concatenate([rollout[i] for i in keys])) if keys else np.zeros(0))
    total, count = shard.total([float(diffs.sum()), float(diffs.size)])
    largest = shard.most(float(diffs.max()) if diffs.size else -1.0)
    if count == 0:
        return {}
    return {"rollout_logprob_diff_mean": total / count, "rollout_logprob_diff_max": largest}


def _rollout_logprobs(batch: UpdateBatch) -> dict[int, list[float]] | None:
    """The engine's log-probs per response, or None when any response lacks them (the hf backend
    reports none: its rollout is the policy itself)."""
    out: dict[int, list[float]] = {}
    for i, r in enumerate(batch.response_ids):
        rec = batch.rollout_logprobs[i] if i < len(batch.rollout_logprobs) else None
        if rec is None or len(rec) != len(r):
            return None
        out[i] = list(rec)
    return out
