"""Generation schedulers on the simulated backend: per-prompt rounds give exactly the round-based
step, streaming stops prompts per sample and aborts their requests, cancel aborts in flight; and
the sampler's per-prompt round counters and the scheduler config field."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import train
from trainer.backends.simulated import SimulatedBackend
from trainer.config import ConfigError, TrainConfig
from trainer.loop import make_scorer, sample_step
from trainer.recorders import ListRecorder
from trainer.sampler import AdaptiveSampler, make_sampler
from trainer.schedulers import run_per_prompt, run_scheduler
from trainer.seeds import derive_seed
from trainer.types import Prompt


def batch(n: int, seed: int = 0) -> list[Prompt]:
    """Prompts whose pass rates cover easy, hard, never and always solved."""
    rates = np.random.default_rng(seed).choice([0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0], n)
    return [Prompt(f"p{seed}-{i}", f"q{i}", str(i), {"pass_rate": float(r)})
            for i, r in enumerate(rates)]


def config(**kw) -> TrainConfig:
    base = dict(backend="simulated", algorithm="ada-balance", batch_size=4, total_steps=2,
                save_every=0, eval_every=0, seed=3, max_new_tokens=64)
    base.update(kw)
    return TrainConfig(**base)


def sample(cfg: TrainConfig, prompts: list[Prompt], step: int = 1):
    return sample_step(cfg, prompts, SimulatedBackend(cfg), make_scorer(cfg), step)


# --- the sampler's per-prompt rounds ---------------------------------------------------------

def test_per_prompt_rounds_advance_each_prompt_alone_and_emit_round_stats_when_closed() -> None:
    s = AdaptiveSampler(3, algorithm="ada-balance", group_size=4, samples_per_round=4,
                        max_rounds=3, seed=0)
    s.start_per_prompt()
    for r in (1.0, 1.0, 0.0, 0.0):  # prompt 0: balanced in round 1
        s.observe(0, r)
    assert s.end_prompt_round(0, tokens=7) is False and not s.is_open(0)
    for _ in range(4):
        s.observe(1, 0.0)
    assert s.end_prompt_round(1) is True and s.prompt_round(1) == 2
    assert s.round_stats == []  # prompt 2 is still in round 1
    for _ in range(4):
        s.observe(1, 0.0)
    assert s.end_prompt_round(1) is True  # round 2 of prompt 1 before round 1 of prompt 2
    for _ in range(4):
        s.observe(2, 1.0)
    assert s.end_prompt_round(2) is True
    assert [(r.round, r.active_prompts, r.samples, r.positives, r.finished, r.tokens)
            for r in s.round_stats] == [(1, 3, 12, 6, 1, 7)]
    for p in (2, 1):
        for _ in range(4):
            s.observe(p, 0.5 if p == 2 else 0.0)  # 0.5 is not above the threshold
    assert s.end_prompt_round(2) is False  # 4 positives and 4 negatives: met in round 2
    assert not s.done
    assert s.end_prompt_round(1) is False  # round 3 was its last: unresolved
    assert s.done
    assert [(r.round, r.active_prompts, r.samples, r.positives, r.finished)
            for r in s.round_stats[1:]] == [(2, 2, 8, 0, 1), (3, 1, 4, 0, 0)]
    res = s.finalize()
    assert res.exit_round.tolist() == [1, 0, 2]
    assert res.rounds_used.tolist() == [1, 3, 2]
    assert res.sample_round[res.sample_prompt == 1].tolist() == [1] * 4 + [2] * 4 + [3] * 4
    assert res.first_round_positives.tolist() == [2, 0, 4]
    assert res.missing == [None, "positives", None]


def test_per_prompt_and_round_based_paths_do_not_mix() -> None:
    s = AdaptiveSampler(2, algorithm="ada-pos", group_size=2, samples_per_round=2, max_rounds=2)
    s.observe(0, 1.0)
    with pytest.raises(RuntimeError, match="before the first observation"):
        s.start_per_prompt()
    t = AdaptiveSampler(2, algorithm="ada-pos", group_size=2, samples_per_round=2, max_rounds=2)
    t.start_per_prompt()
    with pytest.raises(RuntimeError, match="end_prompt_round"):
        t.end_round()
    with pytest.raises(RuntimeError, match="observe"):
        t.observe_many([0], [1.0])
    t.observe(0, 1.0)
    t.end_prompt_round(0)  # met: retired
    with pytest.raises(ValueError, match="not active"):
        t.observe(0, 1.0)
    t.observe(1, 0.0)
    t.end_prompt_round(1)
    t.observe(1, 0.0)
    t.end_prompt_round(1)  # its last round: unresolved, still active, but done sampling
    with pytest.raises(ValueError, match="no round open"):
        t.observe(1, 0.0)
    with pytest.raises(ValueError, match="no round open"):
        t.end_prompt_round(1)


# --- the config field ------------------------------------------------------------------------

@pytest.mark.parametrize("scheduler", ["per-prompt", "streaming"])
def test_hf_supports_only_round_and_says_so(scheduler: str) -> None:
    errors = TrainConfig(backend="hf", scheduler=scheduler).errors()
    assert [e.field for e in errors] == ["scheduler"]
    assert "hf backend supports only 'round'" in errors[0].reason


def test_ada_est_supports_only_round_and_says_why() -> None:
    errors = TrainConfig(backend="simulated", algorithm="ada-est", scheduler="per-prompt").errors()
    assert [e.field for e in errors] == ["scheduler"]
    assert "single round" in errors[0].reason


@pytest.mark.parametrize("backend", ["simulated", "vllm"])
@pytest.mark.parametrize("algorithm", ["grpo", "dapo", "ada-pos", "ada-balance"])
@pytest.mark.parametrize("scheduler", ["round", "per-prompt", "streaming"])
def test_request_backends_take_every_scheduler(backend: str, algorithm: str,
                                               scheduler: str) -> None:
    assert TrainConfig(backend=backend, algorithm=algorithm, scheduler=scheduler).errors() == []


def test_unknown_scheduler_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict({"backend": "simulated", "scheduler": "async"})
    assert err.value.field == "scheduler" and "round, per-prompt, streaming" in err.value.reason


# --- per-prompt == round ---------------------------------------------------------------------

EQUALITY_CASES = [
    dict(algorithm="ada-balance"),
    dict(algorithm="ada-pos"),
    dict(algorithm="grpo"),
    dict(algorithm="dapo"),
    dict(algorithm="ada-balance", K_pos=3, K_neg=2),
    dict(algorithm="ada-pos", K_pos=4),
    dict(algorithm="ada-balance", group_size=8, samples_per_round=8, max_rounds=3),
]


@pytest.mark.parametrize("case", EQUALITY_CASES, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_per_prompt_gives_exactly_the_round_based_step(case: dict, seed: int) -> None:
    prompts = batch(24, seed)
    a = sample(config(seed=seed, scheduler="round", **case), prompts, step=2)
    b = sample(config(seed=seed, scheduler="per-prompt", **case), prompts, step=2)
    ra, rb = a.result, b.result
    for name in ("sample_prompt", "sample_pool_index", "sample_round", "rewards", "kept",
                 "advantages", "samples", "positives", "negatives", "rounds_used", "exit_round",
                 "baseline", "kept_positives", "kept_negatives", "first_round_positives",
                 "first_round_samples"):
        np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name), err_msg=name)
    assert ra.missing == rb.missing
    # The pools themselves: same responses, same lengths, in the same order.
    assert [[(g.text, len(g.response_token_ids)) for g in gs] for gs in a.outcome.generations] \
        == [[(g.text, len(g.response_token_ids)) for g in gs] for gs in b.outcome.generations]
    assert a.outcome.round_stats == b.outcome.round_stats
    assert b.outcome.tokens_discarded == 0
    # Not a vacuous check: the batch has prompts that stop at different rounds.
    if case["algorithm"] not in ("grpo", "dapo"):
        assert len(set(ra.exit_round.tolist())) > 1


def test_per_prompt_run_records_the_round_based_run(tmp_path) -> None:
    prompts = batch(16, 4)
    runs = []
    for scheduler in ("round", "per-prompt"):
        rec = ListRecorder()
        cfg = config(scheduler=scheduler, batch_size=8, total_steps=2)
        train(cfg, prompts, SimulatedBackend(cfg), rec, out_dir=tmp_path / scheduler)
        runs.append(rec)
    for sa, sb in zip(runs[0].steps, runs[1].steps, strict=True):
        assert sa.samples == sb.samples and sa.prompts == sb.prompts and sa.rounds == sb.rounds
        # Everything but time, and how the time was won (per-prompt's early rounds).
        assert {k: v for k, v in sa.metrics.items() if not k.startswith(("time_", "early_"))} \
            == {k: v for k, v in sb.metrics.items() if not k.startswith(("time_", "early_"))}
    assert runs[0].of_type("round") == runs[1].of_type("round")


def test_per_prompt_removes_the_round_barrier_on_the_simulated_clock() -> None:
    """The per-prompt step is shorter in simulated engine time than the round-based one with the
    same samples: later rounds no longer wait for the slowest response of the batch."""
    prompts = batch(64, 2)
    times = {}
    for scheduler in ("round", "per-prompt"):
        cfg = config(scheduler=scheduler, max_new_tokens=2048)
        backend = SimulatedBackend(cfg)
        sample_step(cfg, prompts, backend, make_scorer(cfg), 1)
        times[scheduler] = backend.sim_seconds
    assert 0 < times["per-prompt"] < times["round"]


# --- streaming ---------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["ada-pos", "ada-balance"])
def test_streaming_stops_at_the_rule_and_favours_short_responses(algorithm: str) -> None:
    prompts = batch(64, 5)
    a = sample(config(algorithm=algorithm, scheduler="round"), prompts)
    s = sample(config(algorithm=algorithm, scheduler="streaming"), prompts)
    ra, rs = a.result, s.result
    # Every resolved prompt stopped the moment its rule held with a full group (n samples):
    # either it had just n, or removing its last sample would break the rule; and no prompt
    # drew more than under round-based sampling.
    cfg = config(algorithm=algorithm)
    k_pos, k_neg = cfg.exit_counts
    for i in np.flatnonzero(rs.exit_round > 0).tolist():
        pos, neg = int(rs.positives[i]), int(rs.negatives[i])
        last_positive = bool(rs.positive[rs.offsets[i + 1] - 1])
        assert pos >= k_pos and neg >= k_neg and pos + neg >= cfg.group_size
        needed = (pos - 1 < k_pos) if last_positive else (neg - 1 < k_neg)
        assert needed or pos + neg == cfg.group_size
    assert (rs.samples <= ra.samples).all() and rs.samples.sum() < ra.samples.sum()
    assert s.outcome.tokens_discarded > 0 and a.outcome.tokens_discarded == 0
    # Length bias: the responses that reach the pool first are the short ones, so a prompt's
    # kept responses are shorter than under round-based sampling (compared prompt by prompt:
    # streaming also changes how many samples each prompt contributes).
    def kept_lengths(sampled) -> list[float]:
        res = sampled.result
        return [np.mean([len(g.response_token_ids) for g, k in zip(
            gs, res.kept[res.offsets[i]:res.offsets[i + 1]], strict=True) if k])
            for i, gs in enumerate(sampled.outcome.generations)]
    both = (ra.exit_round > 0) & (rs.exit_round > 0)
    gap = np.asarray(kept_lengths(s)) - np.asarray(kept_lengths(a))
    assert both.sum() > 10 and gap[both].mean() < 0


def test_streaming_grpo_is_per_prompt() -> None:
    prompts = batch(12, 6)
    a = sample(config(algorithm="grpo", scheduler="per-prompt"), prompts)
    s = sample(config(algorithm="grpo", scheduler="streaming"), prompts)
    np.testing.assert_array_equal(a.result.advantages, s.result.advantages)
    assert s.outcome.tokens_discarded == 0


def test_streaming_run_records_discarded_tokens_and_kept_length(tmp_path) -> None:
    rec = ListRecorder()
    cfg = config(scheduler="streaming", batch_size=8)
    train(cfg, batch(16, 8), SimulatedBackend(cfg), rec, out_dir=tmp_path)
    for s in rec.steps:
        kept = [x.tokens for x in s.samples if x.kept]
        assert s.metrics["kept_response_length"] == pytest.approx(sum(kept) / len(kept))
        assert s.metrics["tokens_discarded"] >= 0
    assert sum(s.metrics["tokens_discarded"] for s in rec.steps) > 0


# --- cancel ------------------------------------------------------------------------------------

class CountingEngine:
    """Wraps a request engine to see what the scheduler does with it."""

    def __init__(self, inner) -> None:
        self.inner, self.steps, self.aborted = inner, 0, []

    def submit(self, *args) -> None:
        self.inner.submit(*args)

    def step(self):
        self.steps += 1
        return self.inner.step()

    def abort(self, keys):
        self.aborted.extend(keys)
        return self.inner.abort(keys)

    def pending(self) -> int:
        return self.inner.pending()


@pytest.mark.parametrize("scheduler", ["per-prompt", "streaming"])
def test_cancel_is_checked_in_flight_and_aborts_the_requests(scheduler: str) -> None:
    cfg = config(scheduler=scheduler)
    prompts = batch(16, 9)
    backend = SimulatedBackend(cfg)
    engine = CountingEngine(backend.request_engine())
    sampler = make_sampler(cfg, len(prompts), seed=0)
    calls = []

    def stop() -> bool:
        calls.append(engine.steps)
        return engine.steps >= 3  # mid-round: the first round alone takes more steps

    out = run_per_prompt(sampler, prompts, engine, make_scorer(cfg), seed=derive_seed(1, 1),
                         streaming=scheduler == "streaming", should_stop=stop, stop_poll_s=0)
    assert out.cancelled and calls == [0, 1, 2, 3]  # before submitting, then per engine step
    assert engine.aborted and engine.pending() == 0
    assert out.tokens_discarded > 0


def test_cancelled_streaming_run_stops_cleanly(tmp_path) -> None:
    cfg = config(scheduler="streaming", total_steps=3)
    rec = ListRecorder()

    def stop() -> bool:
        # Once step 1 is recorded (a count of polls would depend on how long a step takes:
        # in-flight polls are throttled by wall time).
        return len(rec.steps) >= 1

    result = train(cfg, batch(8, 10), SimulatedBackend(cfg), rec, stop, out_dir=tmp_path)
    assert result.cancelled and result.last_step == 1 and len(rec.steps) == 1


def test_in_flight_polls_are_throttled() -> None:
    """A worker's stop check is a database query: not one per engine step."""
    cfg = config(scheduler="per-prompt")
    prompts = batch(16, 9)
    engine = CountingEngine(SimulatedBackend(cfg).request_engine())
    polls = []
    out = run_per_prompt(make_sampler(cfg, len(prompts), seed=0), prompts, engine,
                         make_scorer(cfg), seed=0, should_stop=lambda: polls.append(1) or False,
                         stop_poll_s=3600)
    assert not out.cancelled and engine.steps > 10 and polls == [1]


def test_round_scheduler_on_a_backend_without_request_engine_only() -> None:
    class RoundOnly:
        def generate(self, prompts, counts, *, seed, greedy=False):
            return SimulatedBackend().generate(prompts, counts, seed=seed)

    cfg = config()
    sampler = make_sampler(cfg, 2, seed=0)
    with pytest.raises(ValueError, match="request_engine"):
        run_scheduler("per-prompt", sampler, batch(2), RoundOnly(), make_scorer(cfg), seed=0)
