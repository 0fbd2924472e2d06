"""train() on the simulated backend: records, cancel, resume, checkpoints."""

from __future__ import annotations

import json

import pytest

from trainer import train
from trainer.backends.simulated import SimulatedBackend
from trainer.checkpoint import latest_checkpoint, read_state
from trainer.config import TrainConfig
from trainer.recorders import JsonlRecorder, ListRecorder, read_events
from trainer.seeds import batch_indices
from trainer.types import PASS_RATE_THRESHOLDS, STEP_METRICS, Prompt


def prompts(n: int = 12) -> list[Prompt]:
    return [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": (i % 4) / 4}) for i in range(n)]


def sim_config(**kw) -> TrainConfig:
    base = dict(backend="simulated", algorithm="ada-balance", batch_size=4, total_steps=3,
                save_every=2, eval_every=0, seed=1)
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("algorithm", ["grpo", "ada-pos", "ada-balance"])
def test_simulated_run_emits_complete_records(tmp_path, algorithm) -> None:
    rec = ListRecorder()
    result = train(sim_config(algorithm=algorithm), prompts(), SimulatedBackend(), rec,
                   out_dir=tmp_path)
    assert result.status == "completed" and result.last_step == 3
    steps = rec.steps
    assert [s.step for s in steps] == [1, 2, 3]
    for s in steps:
        assert set(STEP_METRICS) <= set(s.metrics)
        assert len(s.prompts) == 4
        assert s.metrics["samples"] == len(s.samples) == sum(p.samples for p in s.prompts)
        assert s.metrics["samples"] == sum(r.samples for r in s.rounds)
        kept = [x for x in s.samples if x.kept]
        assert len(kept) == 4 * 4  # every prompt keeps n=4 (pools are >= n)
        assert all(x.advantage is None for x in s.samples if not x.kept)
        assert s.metrics["unresolved"] == sum(p.exit_round is None for p in s.prompts)
        first = [x.reward for x in s.samples if x.index < 4]
        assert s.metrics["real_reward"] == pytest.approx(sum(first) / len(first))
        # Pass rate over each prompt's first n = 4 samples, against the thresholds.
        rates = [sum(x.reward > 0.5 for x in s.samples if x.prompt_id == p.prompt_id
                     and x.index < 4) / 4 for p in s.prompts]
        for t in PASS_RATE_THRESHOLDS:
            assert s.metrics[f"pass_rate_le_{t:g}"] == sum(r <= t for r in rates) / 4
    rounds = rec.of_type("round")
    assert len(rounds) == sum(len(s.rounds) for s in steps)
    assert [c.step for c in rec.of_type("checkpoint")] == [2, 3]
    if algorithm == "grpo":
        assert all(s.metrics["samples"] == 16 for s in steps)


def test_pass_rate_zero_prompts_are_unresolved_missing_positives(tmp_path) -> None:
    ps = [Prompt(f"z{i}", "q", "1", {"pass_rate": 0.0}) for i in range(4)]
    rec = ListRecorder()
    train(sim_config(total_steps=1), ps, SimulatedBackend(), rec, out_dir=tmp_path)
    m = rec.steps[0].metrics
    assert m["unresolved"] == 4 and m["unresolved_missing_pos"] == 4
    assert m["first_round_all_wrong"] == 1.0 and m["zero_adv_frac"] == 1.0
    assert m["samples"] == 4 * 32


def test_cancel_between_rounds_checkpoints_last_completed_step(tmp_path) -> None:
    rec = ListRecorder()
    calls = {"n": 0}

    def should_stop() -> bool:
        # stop during step 3: after step 1 and 2 have been recorded
        calls["n"] += 1
        return len(rec.steps) == 2 and any(e[0] == "round" and e[1] == 3 for e in rec.events)

    result = train(sim_config(total_steps=5, save_every=0), prompts(), SimulatedBackend(), rec,
                   should_stop, out_dir=tmp_path)
    assert result.status == "cancelled" and result.last_step == 2
    assert [s.step for s in rec.steps] == [1, 2]
    assert read_state(result.checkpoint)["step"] == 2
    assert latest_checkpoint(tmp_path) == latest_checkpoint(tmp_path / "checkpoints")


@pytest.mark.parametrize("algorithm", ["ada-balance", "dapo"])
def test_resume_replays_the_same_next_step(tmp_path, algorithm: str) -> None:
    # DAPO's further batches too are a function of (seed, step): resume draws the same ones.
    config = sim_config(total_steps=4, algorithm=algorithm)
    full = ListRecorder()
    train(config, prompts(), SimulatedBackend(), full, out_dir=tmp_path / "a")
    part = ListRecorder()
    train(config, prompts(), SimulatedBackend(), part, out_dir=tmp_path / "b",
          resume_from=tmp_path / "a" / "checkpoints" / "step-000002")
    assert [s.step for s in part.steps] == [3, 4]
    for a, b in zip(full.steps[2:], part.steps, strict=True):
        assert [x.response for x in a.samples] == [x.response for x in b.samples]
        assert [x.advantage for x in a.samples] == [x.advantage for x in b.samples]
        strip = {k: v for k, v in a.metrics.items() if not k.startswith("time_")}
        assert strip == {k: v for k, v in b.metrics.items() if not k.startswith("time_")}


def test_batch_order_is_seeded_and_reshuffled_per_epoch() -> None:
    steps = [batch_indices(6, 3, 0, s) for s in range(1, 5)]
    assert sorted(steps[0] + steps[1]) == list(range(6)) == sorted(steps[2] + steps[3])
    assert steps[0] + steps[1] != steps[2] + steps[3]
    assert batch_indices(6, 3, 0, 3) == steps[2]
    assert batch_indices(6, 3, 1, 1) != steps[0] or batch_indices(6, 3, 1, 2) != steps[1]


def test_batches_never_repeat_a_prompt_when_the_set_does_not_divide() -> None:
    # 10 prompts, B=4: two batches per epoch, the 2 left over differ from epoch to epoch.
    batches = [batch_indices(10, 4, 0, s) for s in range(1, 41)]
    assert all(len(set(b)) == 4 for b in batches)
    for e in range(20):
        epoch = batches[2 * e] + batches[2 * e + 1]
        assert len(set(epoch)) == 8  # no prompt twice within an epoch
    assert set().union(*map(set, batches)) == set(range(10))  # every prompt gets its turn
    with pytest.raises(ValueError, match="larger than"):
        batch_indices(3, 4, 0, 1)


def test_jsonl_recorder_writes_typed_events(tmp_path) -> None:
    with JsonlRecorder(tmp_path / "events.jsonl") as rec:
        train(sim_config(total_steps=2), prompts(), SimulatedBackend(), rec, out_dir=tmp_path)
    events = read_events(tmp_path / "events.jsonl")
    types = [e["type"] for e in events]
    assert set(types) == {"round", "step", "checkpoint"}
    step = next(e for e in events if e["type"] == "step")
    assert step["step"] == 1 and set(STEP_METRICS) <= set(step["metrics"])
    assert {"prompt_id", "round", "index", "reward", "kept", "advantage"} <= set(
        step["samples"][0])
    json.dumps(events)  # plain JSON all the way down


def test_jsonl_recorder_resume_drops_later_steps(tmp_path) -> None:
    with JsonlRecorder(tmp_path / "events.jsonl") as rec:
        train(sim_config(total_steps=4, save_every=2), prompts(), SimulatedBackend(), rec,
              out_dir=tmp_path)
    with open(tmp_path / "events.jsonl", "a") as fh:
        fh.write('{"type": "step", "st')  # torn line of a crashed write
    with JsonlRecorder(tmp_path / "events.jsonl", resume_step=2) as rec:
        train(sim_config(total_steps=4, save_every=2), prompts(), SimulatedBackend(), rec,
              out_dir=tmp_path, resume_from=tmp_path / "checkpoints" / "step-000002")
    events = read_events(tmp_path / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3, 4]
    assert [e["step"] for e in events if e["type"] == "checkpoint"] == [2, 4]


def test_passive_filtering_drops_zero_advantage_groups(tmp_path) -> None:
    ps = [Prompt("easy", "q", "1", {"pass_rate": 1.0}), Prompt("mixed", "q", "2",
                                                               {"pass_rate": 0.5})]
    rec = ListRecorder()
    train(sim_config(algorithm="grpo", batch_size=2, total_steps=1, passive_filtering=True,
                     group_size=8), ps, SimulatedBackend(), rec, out_dir=tmp_path)
    step = rec.steps[0]
    easy = next(p for p in step.prompts if p.prompt_id == "easy")
    assert (easy.kept_positives, easy.kept_negatives) == (0, 0)
    assert not any(s.kept for s in step.samples if s.prompt_id == "easy")
    assert step.metrics["dropped_groups"] >= 1
    assert step.metrics["kept_samples"] == sum(s.kept for s in step.samples)


def est_config(**kw) -> TrainConfig:
    return sim_config(algorithm="ada-est", budget_per_prompt=6, est_min_samples=2,
                      est_max_samples=16, **kw)


def test_est_run_allocates_the_budget_and_records_the_estimate(tmp_path) -> None:
    from trainer.allocation import pass_rate_estimate

    rec = ListRecorder()
    config = est_config(total_steps=6)
    train(config, prompts(8), SimulatedBackend(), rec, out_dir=tmp_path)
    counts: dict[str, tuple[float, float]] = {}  # the estimator, recomputed from the records
    for s in rec.steps:
        assert s.metrics["samples"] == len(s.samples) == 4 * 6  # exactly budget x B
        assert len(s.rounds) == 1 and s.metrics["unresolved"] == 0
        assert all(x.kept for x in s.samples)  # no down-sampling
        for p in s.prompts:
            assert p.allocated == p.samples and 2 <= p.allocated <= 16
            pos, total = counts.get(p.prompt_id, (0.0, 0.0))
            assert p.p_hat == pytest.approx(pass_rate_estimate(pos, total, 1.0, 16.0))
            counts[p.prompt_id] = (0.9 * pos + p.positives, 0.9 * total + p.samples)
        assert s.metrics["p_hat_mean"] == pytest.approx(
            sum(p.p_hat for p in s.prompts) / len(s.prompts))
        # Real reward weighs every prompt the same, also where Est gave it fewer than n = 4.
        firsts = [[x.reward for x in s.samples if x.prompt_id == p.prompt_id and x.index < 4]
                  for p in s.prompts]
        assert s.metrics["real_reward"] == pytest.approx(
            sum(sum(f) / len(f) for f in firsts) / len(firsts))
        # Harder estimate, more samples (ties aside).
        by_p = sorted(s.prompts, key=lambda p: p.p_hat)
        assert all(a.allocated >= b.allocated for a, b in zip(by_p, by_p[1:], strict=False))
    assert any(p.allocated < 4 for s in rec.steps for p in s.prompts)  # real reward's case
    # Prompts with pass rate 0 (p0, p4) end up with more samples than those at 0.75 (p3, p7).
    last = {p.prompt_id: p for s in rec.steps[-2:] for p in s.prompts}
    assert last["p0"].allocated > last["p3"].allocated
    state = read_state(latest_checkpoint(tmp_path))
    assert state["pass_rate_estimator"]["samples"] == pytest.approx(
        {k: v[1] for k, v in counts.items()})


def test_est_resume_reproduces_the_uninterrupted_run(tmp_path) -> None:
    full = ListRecorder()
    train(est_config(total_steps=6), prompts(8), SimulatedBackend(), full,
          out_dir=tmp_path / "a")
    part = ListRecorder()
    train(est_config(total_steps=6), prompts(8), SimulatedBackend(), part,
          out_dir=tmp_path / "b", resume_from=tmp_path / "a" / "checkpoints" / "step-000002")
    assert [s.step for s in part.steps] == [3, 4, 5, 6]
    for a, b in zip(full.steps[2:], part.steps, strict=True):
        assert [(p.prompt_id, p.p_hat, p.allocated) for p in a.prompts] == [
            (p.prompt_id, p.p_hat, p.allocated) for p in b.prompts]
        assert [x.response for x in a.samples] == [x.response for x in b.samples]
        assert [x.advantage for x in a.samples] == [x.advantage for x in b.samples]
    # Without the estimator's state the resumed steps would allocate from the prior instead.
    assert any(p.p_hat != 1 / 17 for p in part.steps[0].prompts)


def test_est_resume_from_a_checkpoint_without_estimator_fails(tmp_path) -> None:
    train(sim_config(total_steps=2), prompts(8), SimulatedBackend(), ListRecorder(),
          out_dir=tmp_path / "seq")
    with pytest.raises(ValueError, match="pass_rate_estimator"):
        train(est_config(total_steps=4), prompts(8), SimulatedBackend(), ListRecorder(),
              out_dir=tmp_path / "est", resume_from=latest_checkpoint(tmp_path / "seq"))


def _first_round_metrics(algorithm: str, script: dict[str, list[int]],
                         allocation: list[int] | None = None) -> dict[str, float]:
    from tests.trainer.scripted import ScriptedBackend, scripted_prompts
    from trainer.loop import make_scorer
    from trainer.metrics import step_metrics
    from trainer.sampler import make_sampler
    from trainer.schedulers import run_rounds

    config = sim_config(algorithm=algorithm, batch_size=len(script), group_size=4,
                        samples_per_round=8, max_rounds=4, budget_per_prompt=4,
                        est_min_samples=2, est_max_samples=8)
    batch = scripted_prompts(list(script))
    sampler = make_sampler(config, len(batch), 0, allocation=allocation)
    outcome = run_rounds(sampler, batch, ScriptedBackend(script), make_scorer(config), seed=0)
    res = sampler.finalize()
    return step_metrics(config, res, outcome, res.kept)


# Round 1 of M = 8: A's first 4 all right (then 4 wrong), B's first 4 all wrong (then 1 right),
# C mixed from the start, D all right throughout. Later rounds: enough of both to resolve.
FIRST_ROUND_SCRIPT = {"A": [1, 1, 1, 1, 0, 0, 0, 0] + [1, 0] * 12,
                      "B": [0, 0, 0, 0, 1, 0, 0, 0] + [1, 0] * 12,
                      "C": [1, 0, 0, 1, 0, 0, 1, 0] + [1, 0] * 12,
                      "D": [1] * 8 + [1, 0] * 12}


@pytest.mark.parametrize("algorithm", ["grpo", "ada-pos", "ada-balance"])
def test_first_round_fractions_count_the_first_n_samples_for_every_algorithm(
        algorithm: str) -> None:
    # Over the first n = 4: all right A and D, all wrong B, for GRPO and Seq alike. Over Seq's
    # whole first round of 8 only D would be all right and none all wrong.
    m = _first_round_metrics(algorithm, FIRST_ROUND_SCRIPT)
    assert m["first_round_all_correct"] == 2 / 4
    assert m["first_round_all_wrong"] == 1 / 4
    assert m["first_round_all_wrong"] == m["pass_rate_le_0"]


def test_first_round_fractions_for_est_count_at_most_the_allocation() -> None:
    # Est allocates 2 and 6 samples: P's 2 are both right (all-correct over the 2 it drew),
    # Q's first 4 are right, its 5th and 6th wrong (all-correct over the first n = 4).
    m = _first_round_metrics("ada-est", {"P": [1, 1], "Q": [1, 1, 1, 1, 0, 0]},
                             allocation=[2, 6])
    assert m["first_round_all_correct"] == 1.0 and m["first_round_all_wrong"] == 0.0


@pytest.mark.parametrize(("drop", "passive"), [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_drop_unresolved_is_separate_from_passive_filtering(tmp_path, drop: bool,
                                                            passive: bool) -> None:
    from tests.trainer.scripted import ScriptedBackend, scripted_prompts

    # ada-balance, n = 4, M = 4, N = 2, exit at 2 positives and 2 negatives.
    # R: 2 right, 2 wrong in round 1 -> resolved, kept 2 + 2.
    # U: 1 right in 8 -> unresolved (missing positives); global baseline 1/8, so its kept group
    #    (1 right, 3 wrong) has non-zero advantages and passive filtering keeps it.
    # Z: 8 wrong -> unresolved, all advantages 0: passive filtering drops it, and so does
    #    drop_unresolved.
    script = {"R": [1, 0, 1, 0], "U": [0, 0, 1, 0, 0, 0, 0, 0], "Z": [0] * 8}
    rec = ListRecorder()
    config = sim_config(algorithm="ada-balance", batch_size=3, total_steps=1, group_size=4,
                        samples_per_round=4, max_rounds=2, drop_unresolved=drop,
                        passive_filtering=passive)
    train(config, scripted_prompts(list(script)), ScriptedBackend(script), rec,
          out_dir=tmp_path)
    step = rec.steps[0]
    kept = {p: sum(s.kept for s in step.samples if s.prompt_id == p) for p in script}
    u_adv = sorted(s.advantage for s in step.samples if s.prompt_id == "U" and s.kept)
    if drop:
        assert kept == {"R": 4, "U": 0, "Z": 0}
        assert step.metrics["dropped_unresolved"] == 2
    else:
        assert kept == {"R": 4, "U": 4, "Z": 0 if passive else 4}
        assert u_adv == pytest.approx([-1 / 8] * 3 + [7 / 8])
        assert step.metrics["dropped_unresolved"] == 0
    assert step.metrics["dropped_groups"] == (1 if passive else 0)
    assert step.metrics["kept_samples"] == sum(kept.values())
    assert step.metrics["unresolved"] == 2  # the sampling itself is the same


def _dapo_run(tmp_path, outcomes: list[list[list[int]]], num_prompts: int, **kw):
    """A one-step DAPO run (B = 2, n = 4) whose batch k's i-th prompt answers outcomes[k][i]
    (the prompts of each batch come from the loop's own seeded draws)."""
    from tests.trainer.scripted import ScriptedBackend, scripted_prompts
    from trainer.algorithms.dapo import further_batch_indices

    ids = [f"q{i}" for i in range(num_prompts)]
    config = sim_config(algorithm="dapo", batch_size=2, group_size=4, total_steps=1, **kw)
    batches = [batch_indices(num_prompts, 2, config.seed, 1)] + [
        further_batch_indices(num_prompts, 2, config.seed, 1, k)
        for k in range(1, num_prompts // 2)]
    script = {pid: [0] * 4 for pid in ids}
    for k, batch in enumerate(outcomes):
        for i, o in zip(batches[k], batch, strict=True):
            script[ids[i]] = o
    backend = ScriptedBackend(script)
    rec = ListRecorder()
    train(config, scripted_prompts(ids), backend, rec, out_dir=tmp_path)
    order = [[ids[i] for i in b] for b in batches]
    return rec, backend, order


MIXED4, ALL1, ALL0 = [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]


def test_dapo_one_batch_with_signal_is_grpo(tmp_path) -> None:
    rec, backend, order = _dapo_run(tmp_path, [[MIXED4, [1, 1, 0, 0]]], 6)
    step = rec.steps[0]
    assert len(backend.calls) == 1 and step.metrics["gen_batches"] == 1
    assert step.metrics["samples"] == 8 and step.metrics["kept_samples"] == 8
    assert step.metrics["signal_groups"] == 2 and step.metrics["dropped_groups"] == 0
    # GRPO's advantage: (r - mean) / (unbiased std + 1e-6); [1, 0, 0, 0]: mean 1/4, std 1/2.
    adv = [s.advantage for s in step.samples if s.prompt_id == order[0][0]]
    assert adv == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)


def test_dapo_draws_a_further_batch_and_keeps_the_first_b_groups_with_signal(tmp_path) -> None:
    # Batch 0: one group all right (dropped), one with signal. Batch 1: two with signal, of
    # which only the first is needed for B = 2; the other is drawn but not kept.
    rec, backend, order = _dapo_run(tmp_path, [[ALL1, MIXED4], [[0, 1, 1, 1], MIXED4]], 6)
    step = rec.steps[0]
    assert backend.calls == order[:2]
    assert step.metrics["gen_batches"] == 2 and step.metrics["prompts_drawn"] == 4
    assert step.metrics["samples"] == 16 and step.metrics["signal_groups"] == 3
    assert step.metrics["dropped_groups"] == 1 and step.metrics["kept_samples"] == 8
    kept = {p: sum(s.kept for s in step.samples if s.prompt_id == p) for p in sum(order[:2], [])}
    assert kept == {order[0][0]: 0, order[0][1]: 4, order[1][0]: 4, order[1][1]: 0}
    adv = [s.advantage for s in step.samples if s.prompt_id == order[1][0]]
    assert adv == pytest.approx([-1.5, 0.5, 0.5, 0.5], abs=1e-5)
    # Each batch is a round of the step: the records say which batch a prompt came in.
    assert [r.round for r in step.rounds] == [1, 2]
    assert [r.samples for r in step.rounds] == [8, 8]
    assert {p.prompt_id: p.exit_round for p in step.prompts} == {
        order[0][0]: 1, order[0][1]: 1, order[1][0]: 2, order[1][1]: 2}
    assert step.metrics["zero_adv_frac"] == 0.0


def test_dapo_stops_at_max_num_gen_batches_with_fewer_groups(tmp_path) -> None:
    rec, backend, _ = _dapo_run(tmp_path, [[ALL0, ALL1], [ALL1, MIXED4], [MIXED4, MIXED4]], 8,
                                max_num_gen_batches=2)
    step = rec.steps[0]
    assert len(backend.calls) == 2 and step.metrics["gen_batches"] == 2
    assert step.metrics["signal_groups"] == 1 and step.metrics["kept_samples"] == 4
    assert step.metrics["samples"] == 16


def test_dapo_max_num_gen_batches_0_is_no_limit_but_the_prompt_set(tmp_path) -> None:
    """verl's default 0: batches until B groups carry signal, past the default cap of 10 (24
    prompts, B = 2: 12 batches; the only signal comes in batches 11 and 12)."""
    outcomes = [[ALL0, ALL0]] * 10 + [[MIXED4, ALL1], [ALL0, MIXED4]]
    rec, backend, _ = _dapo_run(tmp_path / "cap", outcomes, 24)
    assert rec.steps[0].metrics["gen_batches"] == 10 == len(backend.calls)  # the default cap
    rec, backend, _ = _dapo_run(tmp_path / "none", outcomes, 24, max_num_gen_batches=0)
    step = rec.steps[0]
    assert step.metrics["gen_batches"] == 12 == len(backend.calls)
    assert step.metrics["signal_groups"] == 2 and step.metrics["kept_samples"] == 8
    # The launch's bound: a step draws a prompt at most once, so 24 prompts x n = 4 at most.
    config = sim_config(algorithm="dapo", batch_size=2, max_num_gen_batches=0,
                        task_num_prompts=24)
    assert config.max_samples_per_step == 24 * 4


@pytest.mark.parametrize("cap", [2, 0])
def test_dapo_fewer_groups_raise_fails_the_run_naming_the_cap_as_verl(tmp_path, cap) -> None:
    """dapo_fewer_groups = raise: verl's ValueError once max_num_gen_batches batches did not
    fill the batch (cap 2), or here once the prompt set ran out (no limit: 8 prompts, 4
    batches)."""
    from trainer.algorithms.dapo import FewerGroups

    outcomes = [[ALL0, ALL1], [ALL1, MIXED4], [ALL0, ALL0], [ALL0, ALL0]]
    with pytest.raises(FewerGroups) as err:
        _dapo_run(tmp_path, outcomes, 8, max_num_gen_batches=cap, dapo_fewer_groups="raise")
    message = str(err.value)
    assert "only 1 of the B = 2 groups carried signal" in message
    if cap:
        assert "after 2 generation batches (max_num_gen_batches = 2)" in message
    else:
        assert "the prompt set ran out (8 prompts drawn in 4 batches" in message
    assert "dapo_fewer_groups = train" in message


def test_dapo_stops_when_the_prompt_set_runs_out(tmp_path) -> None:
    # 4 prompts, B = 2: two batches, then nothing left to draw; no group has signal, so the
    # update is empty (the step still completes and records its cost).
    rec, backend, _ = _dapo_run(tmp_path, [[ALL0, ALL0], [ALL1, ALL1]], 4)
    step = rec.steps[0]
    assert len(backend.calls) == 2 and step.metrics["gen_batches"] == 2
    assert step.metrics["kept_samples"] == 0 and step.metrics["signal_groups"] == 0
    assert step.metrics["dropped_groups"] == 4 and step.metrics["samples"] == 16


def test_dapo_further_batches_are_seeded_and_never_repeat_a_prompt() -> None:
    from trainer.algorithms.dapo import further_batch_indices

    first = batch_indices(10, 3, 0, 5)
    further = [further_batch_indices(10, 3, 0, 5, k) for k in (1, 2, 3, 4)]
    assert [len(b) for b in further] == [3, 3, 1, 0]
    drawn = first + sum(further, [])
    assert sorted(drawn) == list(range(10))
    assert further[0] == further_batch_indices(10, 3, 0, 5, 1)
    assert further[0] != further_batch_indices(10, 3, 0, 6, 1) \
        or first != batch_indices(10, 3, 0, 6)
