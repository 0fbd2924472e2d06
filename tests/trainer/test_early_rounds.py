"""Early rounds of the per-prompt schedulers on the simulated backend: ``certain`` and
``speculative`` give exactly the round-based step; ``certain`` generates exactly its tokens;
``speculative`` discards only early rounds of prompts that exited, never goes past round N or
draws more than M per round; a cancel aborts early rounds too; the sampler's certainty test;
the config fields and the recorded step metrics."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.trainer.test_schedulers import CountingEngine, batch, config
from trainer import train
from trainer.algorithms.dapo import group_signal_bounds
from trainer.backends.simulated import SimulatedBackend
from trainer.config import TrainConfig
from trainer.enginetime import EngineTimeModel
from trainer.loop import make_scorer, sample_step
from trainer.recorders import ListRecorder
from trainer.sampler import AdaptiveSampler, make_sampler
from trainer.schedulers import Batch, BatchRule, run_batches, run_per_prompt, run_scheduler
from trainer.seeds import derive_seed
from trainer.types import Prompt

# Long responses (512 tokens; the paper allows 2048) so that a round's samples come back
# at very different times and early rounds have something to gain.
LONG = dict(max_new_tokens=512)


class RecordingEngine(CountingEngine):
    """Also sees every request the scheduler submits, and passes on the engine's optional
    ``capacity()`` and ``now()`` (speculative early rounds need them)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.submitted: list[tuple[int, int, int]] = []

    def submit(self, key, prompt, sample, seed) -> None:
        self.submitted.append(key)
        super().submit(key, prompt, sample, seed)

    def capacity(self) -> int:
        return self.inner.capacity()

    def now(self, prompt) -> float:
        return self.inner.now(prompt)


class RecordingBackend(SimulatedBackend):
    def request_engine(self, count_partial: bool = True) -> RecordingEngine:
        self.engine = RecordingEngine(super().request_engine(count_partial))
        return self.engine


def sample(cfg: TrainConfig, prompts, step: int = 2):
    backend = RecordingBackend(cfg)
    return sample_step(cfg, prompts, backend, make_scorer(cfg), step), backend


# --- the sampler's certainty test --------------------------------------------------------------

def test_exit_possible_knows_when_the_next_round_is_certain() -> None:
    s = AdaptiveSampler(2, algorithm="ada-balance", group_size=4, samples_per_round=8,
                        max_rounds=4)  # exit at >= 2 positives and >= 2 negatives
    s.start_per_prompt()
    for _ in range(6):
        s.observe(0, 0.0)
    # 6 negatives, no positive: 2 samples out can still bring the 2 positives, 1 cannot.
    assert s.exit_possible(0, 2)
    assert not s.exit_possible(0, 1)
    # One positive back but not yet observed: then one sample out can still do it.
    assert s.exit_possible(0, 1, extra_pos=1)
    # Per sample (streaming) every partial outcome counts too; with a full pool, as at round end.
    assert not s.exit_possible(0, 1, partial=True)
    assert s.exit_possible(0, 2, partial=True)
    pos = AdaptiveSampler(1, algorithm="ada-pos", group_size=4, samples_per_round=8,
                          max_rounds=4)
    pos.start_per_prompt()
    # ada-pos needs one positive: possible while anything is out, certain only with nothing out.
    assert pos.exit_possible(0, 1) and not pos.exit_possible(0, 0)


def test_exit_probability_ranks_the_prompts_least_likely_to_exit_first() -> None:
    s = AdaptiveSampler(3, algorithm="ada-balance", group_size=4, samples_per_round=8,
                        max_rounds=4)
    s.start_per_prompt()
    for i, rewards in enumerate(([0.0] * 4, [1.0, 0.0, 1.0, 0.0], [1.0] * 4)):
        for r in rewards:
            s.observe(i, r)
    p = [s.exit_probability(i, 4) for i in range(3)]
    assert all(0.0 <= x <= 1.0 for x in p)
    assert p[1] == pytest.approx(1.0)  # already balanced: exits whatever comes back
    assert p[0] < p[1] and p[2] < p[1]
    # With nothing out the rule's current value: 0 or 1.
    assert s.exit_probability(0, 0) == 0.0 and s.exit_probability(1, 0) == 1.0


# --- exactly the round-based step ------------------------------------------------------------

def requested(engine: RecordingEngine, result, algorithm: str) -> Counter:
    """The requests the engine got, as (prompt, round) -> count in ``result``'s numbering (DAPO:
    request (k, i, j) is sample j of prompt i of batch k, the result's round k + 1)."""
    if algorithm != "dapo":
        return Counter((i, t) for i, t, _ in engine.submitted)
    first = np.searchsorted(result.exit_round, np.arange(1, result.exit_round.max() + 2))
    return Counter((int(first[k]) + i, k + 1) for k, i, _ in engine.submitted)


EARLY_CASES = [
    dict(algorithm="ada-balance"),
    dict(algorithm="ada-pos"),
    dict(algorithm="ada-balance", K_pos=3, K_neg=2),
    dict(algorithm="ada-pos", K_pos=4),
    dict(algorithm="ada-balance", K_pos=6, K_neg=2, samples_per_round=4),
    dict(algorithm="dapo"),
]


@pytest.mark.parametrize("case", EARLY_CASES, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_early_rounds_give_exactly_the_round_based_step(case: dict, seed: int) -> None:
    prompts = batch(24, seed)
    base, base_backend = sample(config(seed=seed, scheduler="round", **LONG, **case), prompts)
    # The round scheduler's draws, as (prompt, round) -> count.
    drawn = Counter((int(p), int(t)) for p, t in zip(
        base.result.sample_prompt, base.result.sample_round, strict=True))
    for early in ("off", "certain", "speculative"):
        s, backend = sample(config(seed=seed, scheduler="per-prompt", early_rounds=early,
                                   **LONG, **case), prompts)
        ra, rb = base.result, s.result
        for name in ("sample_prompt", "sample_pool_index", "sample_round", "rewards", "kept",
                     "advantages", "samples", "positives", "negatives", "rounds_used",
                     "exit_round", "baseline", "kept_positives", "kept_negatives"):
            np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name),
                                          err_msg=f"{early}: {name}")
        assert ra.missing == rb.missing
        assert [[(g.text, len(g.response_token_ids)) for g in gs]
                for gs in base.outcome.generations] == \
            [[(g.text, len(g.response_token_ids)) for g in gs] for gs in s.outcome.generations]
        assert base.outcome.round_stats == s.outcome.round_stats
        out, engine = s.outcome, backend.engine
        if early != "speculative":
            # Not one request more than round-based sampling draws, so not one token more.
            # (DAPO with early_rounds off: batch after batch, each through run_per_prompt.)
            assert requested(engine, ra, case["algorithm"] if early != "off" else "") == drawn
            assert out.tokens_discarded == 0 and out.early_rounds_discarded == 0
            assert not engine.aborted
        if early == "off":
            assert out.early_rounds_started == 0
    if case["algorithm"] != "dapo":
        assert len(set(base.result.exit_round.tolist())) > 1  # not vacuous


DAPO = dict(algorithm="dapo", batch_size=8, max_num_gen_batches=6, **LONG)


def dapo_step(seed: int, **kw):
    """A DAPO step of B = 8 whose further batches of 8 come from a pool of mostly never- and
    always-solved prompts, so it needs several."""
    pool = batch(64, seed)
    cfg = config(seed=seed, **{**DAPO, **kw})
    backend = RecordingBackend(cfg)
    s = sample_step(cfg, pool[:8], backend, make_scorer(cfg), 2,
                    more_prompts=lambda k: pool[8 * k:8 * k + 8])
    return s, backend


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_dapo_further_batches_drawn_early_keep_exactly_the_round_based_groups(seed: int) -> None:
    base, _ = dapo_step(seed, scheduler="round")
    ra = base.result
    assert ra.exit_round.max() > 1  # several batches: not vacuous
    # Streaming: DAPO's GRPO groups have no exit rule, so it draws what per-prompt does.
    for scheduler, early in (("per-prompt", "off"), ("per-prompt", "certain"),
                             ("per-prompt", "speculative"), ("streaming", "certain")):
        s, backend = dapo_step(seed, scheduler=scheduler, early_rounds=early)
        rb, out, engine = s.result, s.outcome, backend.engine
        for name in ("sample_prompt", "sample_round", "rewards", "kept", "advantages",
                     "exit_round", "kept_positives", "kept_negatives"):
            np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name),
                                          err_msg=f"{early}: {name}")
        assert [[g.response_token_ids for g in gs] for gs in base.outcome.generations] == \
            [[g.response_token_ids for g in gs] for gs in out.generations]
        assert base.outcome.round_stats == out.round_stats
        assert [p.id for p in base.prompts] == [p.id for p in s.prompts]
        if early == "off":
            continue  # batch after batch on a fresh engine each: covered above
        kept_batches = int(ra.exit_round.max())
        if early == "certain":
            # Not one request more than batch-after-batch sampling draws.
            assert requested(engine, ra, "dapo") == Counter(
                zip(ra.sample_prompt.tolist(), ra.sample_round.tolist(), strict=True))
            assert out.tokens_discarded == 0 and out.early_rounds_discarded == 0
            assert not engine.aborted
        else:
            # Only requests of batches that turned out not to be needed are aborted.
            assert all(k >= kept_batches for k, _, _ in engine.aborted)
            assert out.early_rounds_started >= out.early_rounds_discarded


@pytest.mark.parametrize("early", ["certain", "speculative"])
def test_dapo_fewer_groups_raise_holds_with_batches_drawn_early(early: str) -> None:
    """dapo_fewer_groups = raise (verl's) on the early-batches path too: 2 batches of 8
    never- and always-solved prompts cannot fill B = 8."""
    from trainer.algorithms.dapo import FewerGroups

    with pytest.raises(FewerGroups, match=r"max_num_gen_batches = 2\)"):
        dapo_step(0, scheduler="per-prompt", early_rounds=early, max_num_gen_batches=2,
                  dapo_fewer_groups="raise")
    s, _ = dapo_step(0, scheduler="per-prompt", early_rounds=early, max_num_gen_batches=2)
    assert s.result.exit_round.max() == 2  # train: the same step goes on with what it has


def test_dapo_batches_start_early_and_speculation_pays_in_discarded_tokens() -> None:
    certain = [dapo_step(seed, scheduler="per-prompt", early_rounds="certain")[0].outcome
               for seed in (0, 1, 7)]
    assert sum(o.early_rounds_started for o in certain) > 0
    assert sum(o.early_rounds_saved_s for o in certain) > 0
    spec = [dapo_step(seed, scheduler="per-prompt", early_rounds="speculative")[0].outcome
            for seed in (0, 1, 7)]
    assert sum(o.early_rounds_discarded for o in spec) > 0
    assert sum(o.tokens_discarded for o in spec) > 0


def test_dapo_cancel_aborts_early_batches_too() -> None:
    pool = batch(64, 1)
    cfg = config(seed=1, **DAPO)
    engine = RecordingEngine(SimulatedBackend(cfg).request_engine())

    def make_batch(k: int) -> Batch:
        return Batch(make_sampler(cfg, 8, seed=k), pool[8 * k:8 * k + 8], derive_seed(1, k))

    rule = BatchRule(target=8, max_batches=6, counts=group_signal_bounds)
    out = run_batches(make_batch, rule, engine, make_scorer(cfg), early_rounds="speculative",
                      should_stop=lambda: engine.steps >= 3, stop_poll_s=0)
    assert out.cancelled and engine.pending() == 0
    assert any(k > 0 for k, _, _ in engine.aborted), "a further batch was in flight"


def test_certain_rounds_start_early_and_save_simulated_time() -> None:
    """On a rule that is often settled before a round is back (6 positives of 4 + 4 + ...),
    certain rounds start early and the step ends sooner on the simulated clock, with the same
    samples (the test above)."""
    prompts = batch(24, 1)
    times, outcomes = {}, {}
    for early in ("off", "certain"):
        cfg = config(seed=1, scheduler="per-prompt", early_rounds=early, K_pos=6, K_neg=2,
                     samples_per_round=4, **LONG)
        s, backend = sample(cfg, prompts)
        times[early], outcomes[early] = backend.sim_seconds, s.outcome
    assert outcomes["certain"].early_rounds_started > 0
    assert outcomes["certain"].early_rounds_saved_s > 0
    assert times["certain"] < times["off"]
    assert outcomes["off"].early_rounds_saved_s == 0


@pytest.mark.parametrize("algorithm", ["ada-balance", "ada-pos"])
def test_speculative_discards_only_early_rounds_of_prompts_that_exited(algorithm: str) -> None:
    prompts = batch(32, 3)
    cfg = config(seed=3, scheduler="per-prompt", early_rounds="speculative",
                 algorithm=algorithm, **LONG)
    s, backend = sample(cfg, prompts)
    res, out, engine = s.result, s.outcome, backend.engine
    assert engine.aborted and out.early_rounds_discarded > 0 and out.tokens_discarded > 0
    for i, t, _ in engine.aborted:
        # Aborted requests belong to a round after the one the prompt exited in.
        assert 0 < res.exit_round[i] < t, (i, t)
    aborted_rounds = {(i, t) for i, t, _ in engine.aborted}
    # Every discarded early round is a round the prompt never pooled.
    pooled = set(zip(res.sample_prompt.tolist(), res.sample_round.tolist(), strict=True))
    assert not aborted_rounds & pooled
    # Never past round N, never more than M samples of a round, every request once.
    assert all(t <= cfg.max_rounds and j < cfg.samples_per_round for _, t, j in engine.submitted)
    assert len(set(engine.submitted)) == len(engine.submitted)
    # What was drawn beyond the pools is what the scheduler says it discarded.
    assert len(engine.submitted) - int(res.samples.sum()) >= out.early_rounds_discarded
    assert out.early_rounds_started >= out.early_rounds_discarded


def test_speculation_waits_for_spare_capacity() -> None:
    """With the engine's batch limit at 64 and the first round 256 requests, nothing is
    speculated until fewer than 0.5 x 64 = 32 requests are in the engine. ada-pos: its next
    round is never certain while a sample of its round is out, so every early round here is a
    speculated one."""
    prompts = batch(32, 3)
    cfg = config(seed=3, scheduler="per-prompt", early_rounds="speculative",
                 algorithm="ada-pos", speculative_capacity=0.5, **LONG)
    engine = RecordingEngine(SimulatedBackend(
        cfg, engine_time=EngineTimeModel(max_num_seqs=64)).request_engine())
    sampler = make_sampler(cfg, len(prompts), seed=0)
    pending_at_speculation = []
    submit = engine.submit

    def watching_submit(key, *args) -> None:
        i, t, j = key
        if t > sampler.prompt_round(i) and j == 0:
            pending_at_speculation.append(engine.pending())
        submit(key, *args)

    engine.submit = watching_submit  # type: ignore[method-assign]
    out = run_per_prompt(sampler, prompts, engine, make_scorer(cfg), seed=derive_seed(3, 2),
                         early_rounds="speculative", speculative_capacity=0.5)
    assert pending_at_speculation and out.early_rounds_started == len(pending_at_speculation)
    assert max(pending_at_speculation) < 32


def test_speculation_checks_spare_capacity_per_engine() -> None:
    """Two simulated engines of 16 slots each: a prompt's requests stay on its engine, so a
    round is speculated only while its own engine runs fewer than 0.5 x 16 = 8 requests,
    however empty the other one is (summed, 16 of 32 would let a busy engine take more)."""
    # Engine 0 serves the even prompts (hard: long wrong answers, every round), engine 1 the
    # odd ones (easy), so the two engines' loads drift apart.
    prompts = [Prompt(f"e{i}", f"q{i}", str(i), {"pass_rate": 0.05 if i % 2 == 0 else 0.9})
               for i in range(12)]
    cfg = config(seed=3, scheduler="per-prompt", early_rounds="speculative",
                 algorithm="ada-pos", speculative_capacity=0.5, **LONG)
    backend = SimulatedBackend(cfg, engine_time=EngineTimeModel(max_num_seqs=16), engines=2)
    engine = backend.request_engine()
    sampler = make_sampler(cfg, len(prompts), seed=0)
    speculated: list[tuple[int, int, int]] = []  # (engine, its load, the other's load)
    submit = engine.submit

    def watching_submit(key, prompt, *args) -> None:
        i, t, j = key
        if t > sampler.prompt_round(i) and j == 0:
            e = backend.engine_of(prompt)
            load = engine.pending_per_engine()
            speculated.append((e, load[e], load[1 - e]))
        submit(key, prompt, *args)

    engine.submit = watching_submit  # type: ignore[method-assign]
    out = run_per_prompt(sampler, prompts, engine, make_scorer(cfg), seed=derive_seed(3, 2),
                         early_rounds="speculative", speculative_capacity=0.5)
    assert speculated and out.early_rounds_started == len(speculated)
    assert {e for e, _, _ in speculated} == {0, 1}  # both engines speculate
    assert all(own < 8 for _, own, _ in speculated), speculated
    # The same step as without speculation.
    base = make_sampler(cfg, len(prompts), seed=0)
    run_per_prompt(base, prompts, SimulatedBackend(cfg, engine_time=EngineTimeModel(
        max_num_seqs=16), engines=2).request_engine(), make_scorer(cfg), seed=derive_seed(3, 2))
    a, b = base.finalize(), sampler.finalize()
    for name in ("rewards", "kept", "advantages", "exit_round"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_streaming_keeps_its_certain_rounds() -> None:
    prompts = batch(24, 2)
    s, backend = sample(config(seed=2, scheduler="streaming", K_pos=6, K_neg=2,
                               samples_per_round=4, **LONG), prompts)
    assert s.outcome.early_rounds_started > 0 and s.outcome.early_rounds_discarded == 0


# --- cancel --------------------------------------------------------------------------------------

def test_cancel_aborts_early_rounds_too() -> None:
    cfg = config(scheduler="per-prompt", early_rounds="speculative", **LONG)
    prompts = batch(16, 9)
    engine = RecordingEngine(SimulatedBackend(cfg).request_engine())
    sampler = make_sampler(cfg, len(prompts), seed=0)
    out = run_per_prompt(sampler, prompts, engine, make_scorer(cfg), seed=derive_seed(1, 1),
                         early_rounds="speculative", should_stop=lambda: engine.steps >= 3,
                         stop_poll_s=0)
    assert out.cancelled and engine.pending() == 0
    early = [k for k in engine.aborted if k[1] > 1]
    assert early, "speculated rounds were in flight and must be aborted"
    assert out.tokens_discarded > 0


# --- config and records --------------------------------------------------------------------------

def test_early_rounds_default_to_certain_with_the_per_prompt_schedulers() -> None:
    assert TrainConfig(backend="simulated", scheduler="per-prompt").early_rounds_mode == "certain"
    assert TrainConfig(backend="simulated", scheduler="streaming").early_rounds_mode == "certain"
    assert TrainConfig().early_rounds_mode == "off"
    assert TrainConfig(backend="simulated", scheduler="per-prompt",
                       early_rounds="off").resolved()["early_rounds"] == "off"


@pytest.mark.parametrize("backend", ["hf", "simulated"])
@pytest.mark.parametrize("early", ["certain", "speculative"])
def test_round_accepts_only_off_and_says_why(backend: str, early: str) -> None:
    errors = TrainConfig(backend=backend, scheduler="round", early_rounds=early).errors()
    assert [e.field for e in errors] == ["early_rounds"]
    assert "accepts only 'off'" in errors[0].reason and "per-prompt" in errors[0].reason
    assert TrainConfig(backend=backend, early_rounds="off").errors() == []
    with pytest.raises(ValueError, match="early_rounds must be 'off'"):
        run_scheduler("round", make_sampler(config(), 2, seed=0), batch(2), SimulatedBackend(),
                      make_scorer(config()), seed=0, early_rounds=early)


def test_bad_early_rounds_values_are_named() -> None:
    errors = TrainConfig(backend="simulated", scheduler="per-prompt",
                         early_rounds="eager", speculative_capacity=0).errors()
    assert {e.field for e in errors} == {"early_rounds", "speculative_capacity"}


def test_a_speculative_run_records_early_rounds_per_step(tmp_path) -> None:
    rec = ListRecorder()
    cfg = config(scheduler="per-prompt", early_rounds="speculative", batch_size=16, **LONG)
    train(cfg, batch(32, 8), SimulatedBackend(cfg), rec, out_dir=tmp_path)
    for s in rec.steps:
        assert s.metrics["early_rounds_started"] >= s.metrics["early_rounds_discarded"] >= 0
        assert s.metrics["early_rounds_saved_s"] >= 0
    assert sum(s.metrics["early_rounds_started"] for s in rec.steps) > 0
    assert sum(s.metrics["early_rounds_discarded"] for s in rec.steps) > 0
    assert sum(s.metrics["tokens_discarded"] for s in rec.steps) > 0


def test_a_stored_run_from_before_early_rounds_reads_as_off() -> None:
    """A per-prompt run recorded before the field existed waited for every round."""
    stored = TrainConfig(backend="simulated", scheduler="per-prompt").to_dict()
    del stored["early_rounds"]
    assert TrainConfig.from_stored(stored).early_rounds_mode == "off"
    assert TrainConfig.from_stored(TrainConfig(
        backend="simulated", scheduler="per-prompt").to_dict()).early_rounds_mode == "certain"


# --- the step-time simulator -------------------------------------------------------------------

def test_simulate_time_compares_early_rounds_against_the_exact_bound() -> None:
    from trainer.steptime import ratio_to_grpo, study

    rates = np.random.default_rng(4).beta(0.5, 0.5, 24).tolist()
    results = study(rates, algorithms=("grpo", "ada-balance"), schedulers=("round", "per-prompt"),
                    early_rounds=("off", "certain", "speculative"), progress=False,
                    max_tokens=512, steps=1)
    by = {(r.algorithm, r.label): r for r in results}
    # GRPO has one round: nothing to draw early, so it runs each scheduler once.
    assert {k for k in by if k[0] == "grpo"} == {("grpo", "round"), ("grpo", "per-prompt")}
    off, certain, spec = (by[("ada-balance", x)] for x in (
        "per-prompt", "per-prompt+certain", "per-prompt+speculative"))
    rnd = by[("ada-balance", "round")]
    # Exact: the same samples; certain not one token more.
    assert off.samples == certain.samples == spec.samples == rnd.samples
    assert certain.tokens_generated == off.tokens_generated and certain.tokens_discarded == 0
    assert certain.early_rounds_started > 0 and certain.early_rounds_discarded == 0
    assert spec.tokens_discarded > 0 and spec.discarded_share > 0
    assert spec.generation_s < off.generation_s
    # Every exact scheduler is above the bound of all needed rounds at once.
    for r in (rnd, off, certain, spec):
        assert r.exact_bound_generation_s <= r.generation_s
    ratios = ratio_to_grpo(results)
    assert ratios[("grpo", "round")] == 1.0 and ("ada-balance", "per-prompt+speculative") in ratios
