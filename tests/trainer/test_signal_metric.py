"""What a group's signal and a response's positivity are read from, with overlong shaping on
(issue 34 item 4): verl filters DAPO's groups on ``filter_groups.metric`` (the recipe: ``acc``,
the verifier's accuracy) while overlong shaping changes the reward; the platform filtered on the
shaped reward. ``dapo_filter_metric`` and ``positive_metric`` (default ``acc``) choose; stored
configs without them read the shaped reward, as they ran.

The expected decisions are worked out by hand from the scripted responses: the overlong penalty
with L_max = 16, a buffer of B = 8 and factor 1 is 0 up to 8 tokens, then -(t - 8) / 8."""

from __future__ import annotations

import pytest

from tests.trainer.scripted import ScriptedBackend, scripted_prompts
from tests.trainer.test_loop import ALL0, MIXED4, _dapo_run, sim_config
from trainer import train
from trainer.config import SIGNAL_METRICS, TrainConfig
from trainer.recorders import ListRecorder

SHAPING = dict(max_new_tokens=16, overlong_buffer_len=8, overlong_penalty_factor=1.0)
# Four right answers of 2, 10, 12 and 16 tokens: shaped rewards 1, 0.75, 0.5, 0; accuracy 1, 1,
# 1, 1. By accuracy (or score) the group has no signal; by the shaped reward it has.
RIGHT_BUT_LONG = [(1, 2), (1, 10), (1, 12), (1, 16)]


@pytest.mark.parametrize(("metric", "batches", "kept_first"), [
    ("acc", 2, False), ("score", 2, False), ("seq_reward", 1, True),
    ("seq_final_reward", 1, True)])
def test_dapo_filters_on_its_metric_with_overlong_shaping_on(tmp_path, metric: str,
                                                             batches: int,
                                                             kept_first: bool) -> None:
    rec, backend, order = _dapo_run(tmp_path, [[RIGHT_BUT_LONG, MIXED4], [MIXED4, ALL0]], 6,
                                    dapo_filter_metric=metric, **SHAPING)
    step = rec.steps[0]
    assert step.metrics["gen_batches"] == batches and len(backend.calls) == batches
    assert step.metrics["signal_groups"] == 2
    kept = {s.prompt_id for s in step.samples if s.kept}
    assert (order[0][0] in kept) is kept_first
    rewards = [s.reward for s in step.samples if s.prompt_id == order[0][0]]
    assert rewards == pytest.approx([1.0, 0.75, 0.5, 0.0])  # the shaping itself


def test_the_default_is_the_recipes_accuracy_and_stored_runs_read_as_they_ran() -> None:
    assert TrainConfig().dapo_filter_metric == "acc" == TrainConfig().positive_metric
    stored = TrainConfig.from_stored({"algorithm": "dapo", "seed": 3})
    assert (stored.dapo_filter_metric, stored.positive_metric) == ("seq_reward", "seq_reward")
    assert set(SIGNAL_METRICS) == {"acc", "score", "seq_reward", "seq_final_reward"}


def _seq_run(tmp_path, metric: str) -> ListRecorder:
    """One Seq-pos step (B = 2, n = 4, M = 4, N = 3): prompt a answers right but long in every
    round (12 and 16 tokens: shaped rewards 0.5 and 0, none above positive_threshold 0.5),
    prompt b right and short."""
    long_right = [(1, 12), (1, 16), (1, 12), (1, 16)] * 3  # shaped 0.5, 0, 0.5, 0: none > 0.5
    script = {"a": long_right, "b": [1, 1, 1, 1] * 3}
    config = sim_config(algorithm="ada-pos", batch_size=2, group_size=4, samples_per_round=4,
                        max_rounds=3, total_steps=1, positive_metric=metric, **SHAPING)
    rec = ListRecorder()
    train(config, scripted_prompts(["a", "b"]), ScriptedBackend(script), rec,
          out_dir=tmp_path / metric)
    return rec


@pytest.mark.parametrize(("metric", "a_samples", "a_resolved"), [
    ("acc", 4, True), ("score", 4, True), ("seq_reward", 12, False),
    ("seq_final_reward", 12, False)])
def test_seq_exit_rule_counts_positives_by_the_chosen_metric(tmp_path, metric: str,
                                                             a_samples: int,
                                                             a_resolved: bool) -> None:
    """By accuracy prompt a's right answers are positives: Seq-pos stops it after round 1. By
    the shaped reward (at most 0.5, not above positive_threshold 0.5) it has none and samples
    all three rounds, unresolved, missing positives."""
    rec = _seq_run(tmp_path, metric)
    a = next(p for p in rec.steps[0].prompts if p.prompt_id == "a")
    assert a.samples == a_samples and (a.exit_round is not None) is a_resolved
    assert a.positives == (a_samples if a_resolved else 0)
    assert a.missing == (None if a_resolved else "positives")


def test_est_counts_positives_by_the_chosen_metric(tmp_path) -> None:
    """Est's estimate after one step: p_hat = (positives + 1) / (samples + 17) (Beta(1, 16),
    counts from zero). Every response of the two prompts is right and 12 or 16 tokens long:
    positives are all of them by accuracy, none by the shaped reward (0.5 or 0)."""
    p_hat = {}
    for metric in ("acc", "seq_reward"):
        script = {"a": [(1, 12), (1, 16)] * 32, "b": [(1, 16), (1, 12)] * 32}
        config = sim_config(algorithm="ada-est", batch_size=2, group_size=4, total_steps=2,
                            budget_per_prompt=8, positive_metric=metric, **SHAPING)
        rec = ListRecorder()
        train(config, scripted_prompts(["a", "b"]), ScriptedBackend(script), rec,
              out_dir=tmp_path / metric)
        first = {p.prompt_id: p for p in rec.steps[0].prompts}
        assert all(p.positives == (p.samples if metric == "acc" else 0) for p in first.values())
        p_hat[metric] = {p.prompt_id: (p.p_hat, first[p.prompt_id])
                         for p in rec.steps[1].prompts}
    for est, first in p_hat["acc"].values():
        assert est == pytest.approx((first.samples + 1) / (first.samples + 17))
    for est, first in p_hat["seq_reward"].values():
        assert est == pytest.approx(1 / (first.samples + 17))


def test_per_prompt_early_rounds_read_positives_as_the_round_scheduler(tmp_path) -> None:
    """The per-prompt scheduler decides a round's fate from results back but not yet observed
    (early rounds): it asks the sampler what a positive is, so its pools equal the round
    scheduler's under either metric (simulated engine: lengths vary; all answers right)."""
    from trainer.backends.simulated import SimulatedBackend
    from trainer.types import Prompt

    prompts = [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": 1.0}) for i in range(6)]
    for metric in ("acc", "seq_reward"):
        pools = []
        for scheduler in ("round", "per-prompt"):
            config = sim_config(algorithm="ada-pos", batch_size=6, total_steps=1,
                                positive_metric=metric, scheduler=scheduler,
                                max_new_tokens=16, overlong_buffer_len=16)
            rec = ListRecorder()
            train(config, prompts, SimulatedBackend(config), rec,
                  out_dir=tmp_path / f"{metric}-{scheduler}")
            pools.append(sorted((s.prompt_id, s.index, s.reward) for s in rec.steps[0].samples))
        assert pools[0] == pools[1], metric
