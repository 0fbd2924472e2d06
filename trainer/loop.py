"""The training loop: sample in rounds, down-sample, compute advantages, update, record.

Step randomness derives from ``(config.seed, step)`` alone (data order, generation seeds per round,
down-sampling, mini-batch order), so resuming from the checkpoint of step k replays step k+1
exactly as an uninterrupted run would have drawn it, given the same weights and optimiser state.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainer.advantages import drop_unresolved, passive_filter, zero_advantage_groups
from trainer.allocation import Allocation, PassRateEstimator, plan_allocation
from trainer.config import TrainConfig
from trainer.sampler import (
    RoundsOutcome,
    SamplerResult,
    concat_results,
    derive_seed,
    make_sampler,
    signal_groups,
)
from trainer.schedulers import run_scheduler
from trainer.types import (
    PASS_RATE_METRICS,
    PASS_RATE_THRESHOLDS,
    STEP_METRICS,
    CheckpointRecord,
    EvalRecord,
    Prompt,
    PromptStepRecord,
    Recorder,
    RoundStat,
    SampleRecord,
    StepRecord,
    StopRequested,
)

# Sub-streams of derive_seed(config.seed, step, <stream>).
_GEN, _DOWNSAMPLE, _UPDATE, _EVAL = 0, 1, 2, 3
# Seed of the order in which DAPO draws its further batches of prompts.
_DAPO_BATCHES = 11
# trainer_state.json key of Reinforce-Ada-Est's estimator (run state, like the weights).
ESTIMATOR_STATE = "pass_rate_estimator"
# trainer_state.json key of the seconds trained up to the checkpoint: a resumed run's wall-time
# limit counts them.
ELAPSED_STATE = "elapsed_seconds"


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


def batch_indices(num_prompts: int, batch_size: int, seed: int, step: int) -> list[int]:
    """Prompt indices of ``step`` (1-based). Each epoch is a permutation seeded by (seed, epoch)
    cut into ``num_prompts // batch_size`` batches; the remainder of the permutation is dropped
    (a different remainder every epoch), as verl's ``drop_last`` does, so a batch never holds a
    prompt twice (per-prompt records are keyed by (run, step, prompt)). A function of
    (seed, step) only, so resume is free."""
    if num_prompts == 0:
        raise ValueError("no training prompts")
    if batch_size > num_prompts:
        raise ValueError(f"batch_size {batch_size} is larger than the {num_prompts} prompts")
    epoch, k = divmod(step - 1, num_prompts // batch_size)
    perm = np.random.default_rng([seed, epoch, 7]).permutation(num_prompts)
    return perm[k * batch_size:(k + 1) * batch_size].tolist()


def dapo_batch_indices(num_prompts: int, batch_size: int, seed: int, step: int, k: int
                       ) -> list[int]:
    """Prompt indices of DAPO's further batch ``k`` (1-based) of ``step``: a permutation seeded
    by (seed, step) of the prompts not in the step's own batch (``batch_indices``), cut into
    batches of ``batch_size``; shorter or empty when the prompt set runs out. A function of
    (seed, step, k) alone, so resume is free and a step never draws a prompt twice.

    verl draws its further batches from the data loader, so a DAPO step there consumes the
    next steps' prompts; here every step keeps its own batch (the same prompts as a GRPO run of
    the same seed) and further batches come from the rest of the set."""
    first = set(batch_indices(num_prompts, batch_size, seed, step))
    rest = [i for i in np.random.default_rng([seed, step, _DAPO_BATCHES]).permutation(
        num_prompts).tolist() if i not in first]
    return rest[(k - 1) * batch_size:k * batch_size]


def make_scorer(config: TrainConfig, verifier: Any = None
                ) -> Callable[[Prompt, list[str]], tuple[list[float], list[str | None]]]:
    """Rewards and per-response verifier errors for one prompt's responses (with ``verifier``,
    else the config's)."""
    from trainer.verifiers import make_verifier, score_responses

    verifier = verifier if verifier is not None else make_verifier(config)
    return lambda prompt, texts: score_responses(verifier, texts, prompt.answer)


@dataclass
class SampledStep:
    """One step's sampling: the finalized sampler (None when cancelled), what the rounds drew,
    Est's allocation (None for the other algorithms) and the prompts sampled, in the result's
    order (DAPO: every batch it drew; the others: the step's batch)."""

    result: SamplerResult | None
    outcome: RoundsOutcome
    allocation: Allocation | None = None
    prompts: list[Prompt] = field(default_factory=list)


def sample_step(config: TrainConfig, batch: Sequence[Prompt], backend: Any, scorer: Any,
                step: int, estimator: PassRateEstimator | None = None, *,
                on_round: Callable[[RoundStat], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                more_prompts: Callable[[int], Sequence[Prompt]] | None = None) -> SampledStep:
    """Sample step ``step`` of ``batch``: for Est, estimate and allocate first; run the rounds;
    finalize; for Est, update the estimator with the step's counts. A cancelled step returns
    ``result=None`` and leaves the estimator as it was. DAPO draws its further batches of
    prompts from ``more_prompts(k)`` (k = 1, 2, ...; none: ``batch`` alone)."""
    if config.algorithm == "dapo":
        return _sample_dapo(config, batch, backend, scorer, step, more_prompts,
                            on_round=on_round, should_stop=should_stop)
    allocation = None
    ids = [p.id for p in batch]
    if estimator is not None:
        allocation = plan_allocation(estimator, ids, config)
    sampler = make_sampler(config, len(batch), derive_seed(config.seed, step, _DOWNSAMPLE),
                           allocation=None if allocation is None else allocation.counts)
    outcome = run_scheduler(config.scheduler, sampler, batch, backend, scorer,
                            seed=derive_seed(config.seed, step, _GEN), on_round=on_round,
                            should_stop=should_stop)
    if outcome.cancelled:
        return SampledStep(None, outcome, allocation, list(batch))
    res = sampler.finalize()
    if estimator is not None:
        estimator.update(ids, res.positives, res.samples)
    return SampledStep(res, outcome, allocation, list(batch))


def _sample_dapo(config: TrainConfig, batch: Sequence[Prompt], backend: Any, scorer: Any,
                 step: int, more_prompts: Callable[[int], Sequence[Prompt]] | None, *,
                 on_round: Callable[[RoundStat], None] | None,
                 should_stop: Callable[[], bool] | None) -> SampledStep:
    """DAPO's dynamic sampling (verl's ``filter_groups``): one GRPO round of n per prompt of a
    batch; groups whose rewards are all equal are dropped; while fewer than B groups carry
    signal and fewer than ``max_num_gen_batches`` batches were drawn, draw the next batch of
    prompts. The step trains on the first B groups with signal. Where verl raises once the
    batches run out, the step here trains on the groups it has (fewer than B; none at all
    leaves the update empty) and records how many batches it drew."""
    B = config.batch_size
    results: list[SamplerResult] = []
    outcomes: list[RoundsOutcome] = []
    drawn: list[Prompt] = []
    prompts: Sequence[Prompt] = batch
    with_signal = 0
    for k in range(config.max_num_gen_batches):
        if k > 0:
            prompts = list(more_prompts(k)) if more_prompts is not None else []
            if not prompts:
                break  # the prompt set ran out
        sampler = make_sampler(config, len(prompts),
                               derive_seed(config.seed, step, _DOWNSAMPLE, k))

        def renumbered(stat: RoundStat, k: int = k) -> None:
            if on_round is not None:
                on_round(dataclasses.replace(stat, round=k + 1))

        # Batch 0 draws with GRPO's seed, so its samples are a same-seed GRPO run's.
        gen_seed = derive_seed(config.seed, step, _GEN) if k == 0 else \
            derive_seed(config.seed, step, _GEN, k)
        outcome = run_scheduler(config.scheduler, sampler, prompts, backend, scorer,
                                seed=gen_seed, on_round=renumbered, should_stop=should_stop)
        if outcome.cancelled:
            return SampledStep(None, outcome, None, drawn)
        res = sampler.finalize()
        results.append(res)
        outcomes.append(outcome)
        drawn.extend(prompts)
        with_signal += int(signal_groups(res).sum())
        if with_signal >= B:
            break
    merged = RoundsOutcome(
        generations=[g for o in outcomes for g in o.generations],
        rewards=[r for o in outcomes for r in o.rewards],
        errors=[e for o in outcomes for e in o.errors],
        round_stats=[dataclasses.replace(st, round=k + 1)
                     for k, o in enumerate(outcomes) for st in o.round_stats],
        time_generation=sum(o.time_generation for o in outcomes),
        time_scoring=sum(o.time_scoring for o in outcomes),
        tokens_discarded=sum(o.tokens_discarded for o in outcomes))
    return SampledStep(concat_results(results, keep_groups=B), merged, None, drawn)


def make_estimator(config: TrainConfig) -> PassRateEstimator | None:
    """Est's persistent pass-rate estimator; None for the algorithms without one."""
    return PassRateEstimator.from_config(config) if config.algorithm == "ada-est" else None


def step_metrics(config: TrainConfig, res: SamplerResult, outcome: RoundsOutcome,
                 kept_mask: np.ndarray, allocation: Allocation | None = None) -> dict[str, float]:
    """The sampling half of STEP_METRICS (the update half comes from ``update_policy``), plus
    EST_STEP_METRICS for an Est step."""
    n = config.group_size
    P = res.num_prompts
    rewards = res.rewards
    tokens = np.array([len(g.response_token_ids) for gens in outcome.generations for g in gens],
                      dtype=np.float64)
    errors = sum(e is not None for errs in outcome.errors for e in errs)
    has_kept = np.bincount(res.sample_prompt, weights=res.kept, minlength=P) > 0
    zero = zero_advantage_groups(res.advantages, res.sample_prompt, res.kept, P)
    unresolved = res.exit_round == 0
    missing_pos = sum(m == "positives" for m in res.missing)
    missing_neg = sum(m == "negatives" for m in res.missing)
    first_pos, first_drawn = first_n_counts(res, n)
    # outcome.generations is prompt-major in pool order: the order of res's sample arrays.
    kept_tokens = tokens[kept_mask] if len(tokens) else tokens
    est = {} if allocation is None else {
        "p_hat_mean": _mean(allocation.p_hat), "alloc_scale": float(allocation.scale)}
    if config.algorithm == "dapo":
        signal = signal_groups(res)
        est = {"gen_batches": float(res.exit_round.max()) if P else 0.0,
               "signal_groups": float(signal.sum()),
               "prompts_drawn": float(P)}
    return est | {
        "reward_all": _mean(rewards),
        "real_reward": real_reward(res, n),
        "kept_reward": _mean(rewards[kept_mask]),
        "samples": float(len(rewards)),
        "tokens": float(tokens.sum()),
        "zero_adv_frac": float(zero[has_kept].mean()) if has_kept.any() else 0.0,
        # Over each prompt's first n samples for every algorithm (GRPO's n, the first n of
        # Seq's M in round 1), so that the figures compare: over the whole first round Seq's M=8
        # would be all-correct / all-wrong less often than GRPO's n=4 by construction.
        "first_round_all_correct": float(np.mean((first_pos == first_drawn)
                                                 & (first_drawn > 0))) if P else 0.0,
        "first_round_all_wrong": float(np.mean(first_pos == 0)) if P else 0.0,
        "unresolved": float(unresolved.sum()),
        "unresolved_missing_pos": float(missing_pos),
        "unresolved_missing_neg": float(missing_neg),
        "response_length": _mean(tokens),
        "kept_response_length": _mean(kept_tokens),
        "tokens_discarded": float(outcome.tokens_discarded),
        "verifier_errors": float(errors),
        "kept_samples": float(kept_mask.sum()),
        "dropped_groups": (float(np.sum(~signal_groups(res))) if config.algorithm == "dapo"
                           else float(np.sum(has_kept & zero)) if config.passive_filtering
                           else 0.0),
        "dropped_unresolved": float(np.sum(has_kept & unresolved)) if config.drop_unresolved
        else 0.0,
        **low_pass_rate_fractions(res, n),
    }


def first_n_counts(res: SamplerResult, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt: positives among its first min(n, pool) samples, and that count of samples.

    The first n samples are i.i.d. draws of the current policy under every algorithm (GRPO
    draws n; Seq draws M >= n in round 1; DAPO n per group), so figures over them compare. Est
    may allocate a prompt fewer than n (N_min = 2): it then counts over all it drew, which makes
    an easy prompt with 2 samples all-correct more often than it would be over n; we keep those
    prompts rather than drop them so the fraction stays one of the whole batch."""
    P = res.num_prompts
    first = res.sample_pool_index < n
    positives = np.bincount(res.sample_prompt[first], weights=res.positive[first], minlength=P)
    drawn = np.bincount(res.sample_prompt[first], minlength=P)
    return positives.astype(np.int64), drawn


def low_pass_rate_fractions(res: SamplerResult, n: int) -> dict[str, float]:
    """``pass_rate_le_<t>``: the fraction of the batch whose pass rate is at most t, each
    prompt's pass rate taken over its first n samples (i.i.d. under every algorithm, as for the
    real reward: a Reinforce-Ada pool is larger and stops adaptively, GRPO's is n)."""
    P = res.num_prompts
    positives, drawn = first_n_counts(res, n)
    rate = positives / np.maximum(drawn, 1)
    return {key: float(np.mean(rate <= t)) if P else 0.0
            for key, t in zip(PASS_RATE_METRICS, PASS_RATE_THRESHOLDS, strict=True)}


def real_reward(res: SamplerResult, n: int) -> float:
    """Mean over prompts of the mean reward of each prompt's first min(n, pool) samples: i.i.d.
    draws from the current policy, every prompt weighing the same. With n samples of every
    prompt (GRPO, Seq) that is the plain mean of the first n; Est can give an easy prompt fewer
    than n, and a plain mean would then lean towards the prompts it sampled more, the hard ones."""
    first = res.sample_pool_index < n
    counts = np.bincount(res.sample_prompt[first], minlength=res.num_prompts)
    sums = np.bincount(res.sample_prompt[first], weights=res.rewards[first],
                       minlength=res.num_prompts)
    sampled = counts > 0
    return _mean(sums[sampled] / counts[sampled])


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else 0.0


def step_records(batch: Sequence[Prompt], res: SamplerResult, outcome: RoundsOutcome,
                 kept_mask: np.ndarray, allocation: Allocation | None = None,
                 ) -> tuple[list[PromptStepRecord], list[SampleRecord]]:
    prompts: list[PromptStepRecord] = []
    samples: list[SampleRecord] = []
    for i, prompt in enumerate(batch):
        lo, hi = int(res.offsets[i]), int(res.offsets[i + 1])
        gens, errs = outcome.generations[i], outcome.errors[i]
        tok = kept_pos = kept_neg = 0
        for j, k in enumerate(range(lo, hi)):
            g = gens[j]
            kept = bool(kept_mask[k])
            tok += len(g.response_token_ids)
            if kept:
                if res.positive[k]:
                    kept_pos += 1
                else:
                    kept_neg += 1
            samples.append(SampleRecord(
                prompt_id=prompt.id, round=int(res.sample_round[k]), index=j, response=g.text,
                tokens=len(g.response_token_ids), reward=float(res.rewards[k]), kept=kept,
                advantage=float(res.advantages[k]) if kept else None,
                verifier_error=errs[j]))
        er = int(res.exit_round[i])
        prompts.append(PromptStepRecord(
            prompt_id=prompt.id, samples=int(res.samples[i]), positives=int(res.positives[i]),
            negatives=int(res.negatives[i]), rounds=int(res.rounds_used[i]),
            # Counted from the mask the update used, so passive filtering's drops show as 0.
            exit_round=er if er > 0 else None, kept_positives=kept_pos,
            kept_negatives=kept_neg, baseline=float(res.baseline[i]),
            missing=res.missing[i], tokens=tok,
            p_hat=None if allocation is None else float(allocation.p_hat[i]),
            allocated=None if allocation is None else int(allocation.counts[i])))
    return prompts, samples


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a hard dependency of the CPU install
        pass


def train(config: TrainConfig, prompts: Sequence[Prompt], backend: Any, recorder: Recorder,
          should_stop: Callable[[], bool] | None = None, *, out_dir: str | Path,
          eval_prompts: Sequence[Prompt] | None = None,
          resume_from: str | Path | None = None) -> TrainResult:
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
    the checkpoint's.
    """
    from trainer import checkpoint as ckpt

    config.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = getattr(backend, "model", None), getattr(backend, "tokenizer", None)
    from trainer.verifiers import make_verifier

    # One verifier (math-verify's helper process) for sampling and evaluation alike.
    verifier = make_verifier(config)
    scorer = make_scorer(config, verifier)
    optimizer = scheduler = ref_model = None
    pad_id = 0
    if model is not None:
        from trainer.update import make_optimizer

        optimizer, scheduler = make_optimizer(model, config)
        pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
    start = 0
    elapsed = 0.0
    last_ckpt: str | None = None
    estimator = make_estimator(config)
    if resume_from is not None:
        state = ckpt.load_checkpoint(resume_from, model=model, optimizer=optimizer,
                                     scheduler=scheduler)
        start = int(state["step"])
        elapsed = float(state.get(ELAPSED_STATE, 0.0))
        if estimator is not None:
            if ESTIMATOR_STATE not in state:
                raise ValueError(f"checkpoint {resume_from} has no {ESTIMATOR_STATE}: it was "
                                 "not written by an ada-est run")
            estimator.load_state_dict(state[ESTIMATOR_STATE])
        last_ckpt = str(resume_from)
        backend.sync_weights()
        ref_dir = Path(resume_from) / "reference"
        if model is not None and config.kl_coef > 0 and ref_dir.is_dir():
            ref_model = copy.deepcopy(model)
            ckpt.load_checkpoint(ref_dir, model=ref_model, restore_rng=False)
    else:
        _seed_all(config.seed)
    if model is not None and config.kl_coef > 0 and ref_model is None:
        ref_model = copy.deepcopy(model)
    if ref_model is not None:
        ref_model.eval().requires_grad_(False)

    stop = StopPolicy(should_stop, config.max_wall_seconds, elapsed)
    last_metrics: dict[str, float] = {}

    def save(step: int) -> str:
        before = getattr(recorder, "before_checkpoint", None)
        if before is not None:
            before(step)  # may raise: e.g. the run's lease is lost, so no files are written
        extra = {ELAPSED_STATE: stop.elapsed()}
        if estimator is not None:
            extra[ESTIMATOR_STATE] = estimator.state_dict()
        path = ckpt.save_checkpoint(ckpt.checkpoint_dir(out, step), step=step,
                                    config=config.to_dict(), model=model, tokenizer=tokenizer,
                                    optimizer=optimizer, scheduler=scheduler, extra=extra)
        if ref_model is not None:
            ref_model.save_pretrained(path / "reference", safe_serialization=True)
            (path / "reference" / ckpt.STATE_FILE).write_text('{"step": 0}')
        recorder.on_checkpoint(CheckpointRecord(step=step, path=str(path)))
        return str(path)

    def evaluate(step: int) -> None:
        if not eval_prompts:
            return
        from trainer.evaluate import evaluate as run_eval
        metrics = run_eval(backend, list(eval_prompts), verifier, config.eval_k,
                           derive_seed(config.seed, step, _EVAL), should_stop=stop)
        recorder.on_eval(EvalRecord(step=step, metrics={k: float(v) for k, v in metrics.items()}))

    def stopped(done: int, clean: bool) -> TrainResult:
        nonlocal last_ckpt
        if clean and (last_ckpt is None or ckpt.read_state(last_ckpt)["step"] != done):
            last_ckpt = save(done)
        return TrainResult(stop.reason or "cancelled", done, last_ckpt, last_metrics)

    if start == 0 and config.eval_every:
        try:
            evaluate(0)
        except StopRequested:
            return stopped(0, clean=True)
    for step in range(start + 1, config.total_steps + 1):
        t_step = time.perf_counter()
        batch = [prompts[i] for i in batch_indices(len(prompts), config.batch_size, config.seed,
                                                   step)]

        def on_round(stat: RoundStat, step: int = step) -> None:
            recorder.on_round(step, stat)

        def more_prompts(k: int, step: int = step) -> list[Prompt]:
            return [prompts[i] for i in dapo_batch_indices(len(prompts), config.batch_size,
                                                           config.seed, step, k)]

        sampled = sample_step(config, batch, backend, scorer, step, estimator,
                              on_round=on_round, should_stop=stop,
                              more_prompts=more_prompts)
        res, outcome, allocation = sampled.result, sampled.outcome, sampled.allocation
        batch = sampled.prompts  # DAPO: every batch of prompts it drew
        if res is None:
            return stopped(step - 1, clean=True)
        kept = res.kept
        if config.passive_filtering:
            kept = passive_filter(res.advantages, res.sample_prompt, res.kept, res.num_prompts)
        if config.drop_unresolved:
            kept = drop_unresolved(kept, res.sample_prompt, res.exit_round > 0)
        metrics = step_metrics(config, res, outcome, kept, allocation)

        t_update = time.perf_counter()
        if model is not None:
            try:
                upd = _update(model, optimizer, scheduler, config, res, outcome, batch, kept,
                              pad_id=pad_id, ref_model=ref_model,
                              seed=derive_seed(config.seed, step, _UPDATE), tokenizer=tokenizer,
                              backend=backend, should_stop=stop)
            except StopRequested as exc:
                # Est's estimator already counted this step: only a clean stop may save.
                return stopped(step - 1, clean=exc.clean and estimator is None)
            t_sync = time.perf_counter()
            backend.sync_weights()
            upd["time_sync"] = time.perf_counter() - t_sync
        else:
            from trainer.update import UPDATE_METRICS, warmup_factor

            upd = dict.fromkeys(UPDATE_METRICS, 0.0)
            upd["lr"] = config.lr * warmup_factor(step - 1, config.warmup_steps)
        metrics.update(upd)
        metrics["time_generation"] = outcome.time_generation
        metrics["time_scoring"] = outcome.time_scoring
        metrics.setdefault("time_sync", 0.0)
        # The update alone: pushing the new weights into the engine is time_sync.
        metrics["time_update"] = time.perf_counter() - t_update - metrics["time_sync"]
        metrics["time_step"] = time.perf_counter() - t_step
        missing = set(STEP_METRICS) - set(metrics)
        assert not missing, f"step metrics lack {missing}"
        prompt_recs, sample_recs = step_records(batch, res, outcome, kept, allocation)
        recorder.on_step(StepRecord(step=step, metrics=metrics, rounds=list(outcome.round_stats),
                                    prompts=prompt_recs, samples=sample_recs))
        last_metrics = metrics
        if config.eval_every and step % config.eval_every == 0:
            try:
                evaluate(step)
            except StopRequested:
                return stopped(step, clean=True)
        if (config.save_every and step % config.save_every == 0) or step == config.total_steps:
            last_ckpt = save(step)
    return TrainResult("completed", config.total_steps, last_ckpt, last_metrics)


def _update(model: Any, optimizer: Any, scheduler: Any, config: TrainConfig, res: SamplerResult,
            outcome: RoundsOutcome, batch: Sequence[Prompt], kept: np.ndarray, *, pad_id: int,
            ref_model: Any, seed: int, tokenizer: Any, backend: Any,
            should_stop: Callable[[], bool] | None = None) -> dict[str, float]:
    from trainer.update import UpdateBatch, update_policy

    ub = UpdateBatch([], [], [], [], [], [])
    for k in np.flatnonzero(kept).tolist():
        i = int(res.sample_prompt[k])
        g = outcome.generations[i][int(res.sample_pool_index[k])]
        prompt_ids = g.prompt_token_ids or list(tokenizer(batch[i].text)["input_ids"])
        ub.prompt_ids.append(list(prompt_ids))
        ub.response_ids.append(list(g.response_token_ids))
        ub.advantages.append(float(res.advantages[k]))
        ub.groups.append(i)
        ub.old_logprobs.append(g.logprobs)
        ub.rollout_logprobs.append(g.rollout_logprobs)
    metrics = update_policy(model, optimizer, scheduler, ub, config, pad_token_id=pad_id,
                            ref_model=ref_model, seed=seed,
                            micro_batch_size=config.ppo_micro_batch_size or None,
                            should_stop=should_stop)
    if not math.isfinite(metrics["policy_loss"]):
        raise FloatingPointError(f"non-finite policy loss {metrics['policy_loss']}")
    return metrics
