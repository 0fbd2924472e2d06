"""Where DAPO's further prompts come from (issue 21): unseen prompts first by default, the whole
rest of the set as an option; prompts_revisited per step for every algorithm; the generation
batch G (dapo_gen_batch_size). On the simulated backend."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import train
from trainer.algorithms.dapo import further_batch_indices, further_prompt_order
from trainer.backends.simulated import SimulatedBackend
from trainer.checkpoint import checkpoint_dir
from trainer.config import ConfigError, TrainConfig
from trainer.recorders import ListRecorder
from trainer.seeds import batch_indices
from trainer.types import Prompt
from trainer.visits import PromptVisits, own_batches_after


def prompts(n: int, rate: float = 0.0) -> list[Prompt]:
    # Pass rate 0: no group has signal, so DAPO draws every further batch it may.
    return [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": rate}) for i in range(n)]


def config(**kw) -> TrainConfig:
    base = dict(backend="simulated", algorithm="dapo", batch_size=4, group_size=4,
                total_steps=4, save_every=0, eval_every=0, seed=3, max_num_gen_batches=3)
    return TrainConfig(**(base | kw))


def drawn_ids(step) -> list[str]:
    return [p.prompt_id for p in step.prompts]


def revisits_from_records(steps) -> list[int]:
    """prompts_revisited recomputed from what each step recorded it drew."""
    seen: set[str] = set()
    out = []
    for s in steps:
        ids = drawn_ids(s)
        out.append(sum(p in seen for p in ids))
        seen |= set(ids)
    return out


@pytest.mark.parametrize("mode", ["unseen-first", "any"])
def test_prompts_revisited_counts_what_earlier_steps_drew(tmp_path, mode) -> None:
    rec = ListRecorder()
    train(config(dapo_further_prompts=mode), prompts(40), SimulatedBackend(), rec,
          out_dir=tmp_path)
    assert [s.metrics["prompts_revisited"] for s in rec.steps] == revisits_from_records(rec.steps)
    assert all(s.metrics["gen_batches"] == 3 for s in rec.steps)  # no signal: every batch


def test_unseen_first_revisits_no_prompt_while_fresh_ones_remain(tmp_path) -> None:
    # 4 steps x 3 batches x 4 prompts = 48 draws of 64 prompts: unseen-first never revisits
    # (no later own batch is drawn early either); the whole-set order does.
    counts = {}
    for mode in ("unseen-first", "any"):
        rec = ListRecorder()
        train(config(dapo_further_prompts=mode), prompts(64), SimulatedBackend(), rec,
              out_dir=tmp_path / mode)
        counts[mode] = sum(s.metrics["prompts_revisited"] for s in rec.steps)
        if mode == "unseen-first":
            ids = [p for s in rec.steps for p in drawn_ids(s)]
            assert len(ids) == 48 and len(set(ids)) == 48
    assert counts["unseen-first"] == 0 < counts["any"]


def test_unseen_first_order_puts_fresh_then_later_batches_then_the_least_drawn() -> None:
    n, B, seed, step, last = 20, 2, 0, 3, 6
    visits = PromptVisits(n)
    for s in range(1, step):
        visits.mark(batch_indices(n, B, seed, s))
    visits.mark([5, 6, 7])
    visits.mark([5])
    order = further_prompt_order(n, B, seed, step, visits=visits, last_step=last)
    own = set(batch_indices(n, B, seed, step))
    assert sorted(order) == sorted(set(range(n)) - own)
    later = own_batches_after(n, B, seed, step, last)
    key = [int(visits.counts[i]) * 2 + int(later[i]) for i in order]
    assert key == sorted(key) and key[0] == 0 and order[-1] == 5  # drawn twice: last
    # Within a class the seeded whole-set order is kept.
    anyorder = further_prompt_order(n, B, seed, step, mode="any")
    fresh = [i for i in order if key[order.index(i)] == 0]
    assert fresh == [i for i in anyorder if i in set(fresh)]


def test_own_batches_after_matches_batch_indices() -> None:
    n, B, seed = 10, 3, 4  # 3 batches an epoch, one prompt dropped each epoch
    later = own_batches_after(n, B, seed, 2, 7)
    expected = {i for s in range(3, 8) for i in batch_indices(n, B, seed, s)}
    assert set(np.flatnonzero(later).tolist()) == expected
    assert not own_batches_after(n, B, seed, 7, 7).any()


def test_other_algorithms_revisit_only_after_an_epoch(tmp_path) -> None:
    rec = ListRecorder()
    # 12 prompts, B = 4: 3 steps an epoch; steps 4-6 draw prompts of steps 1-3 again.
    train(config(algorithm="grpo", total_steps=6), prompts(12, 0.5), SimulatedBackend(), rec,
          out_dir=tmp_path)
    assert [s.metrics["prompts_revisited"] for s in rec.steps] == [0, 0, 0, 4, 4, 4]


def test_a_resumed_dapo_run_draws_the_same_prompts(tmp_path) -> None:
    cfg = config(total_steps=4, save_every=2)
    full = ListRecorder()
    train(cfg, prompts(30), SimulatedBackend(), full, out_dir=tmp_path / "full")
    resumed = ListRecorder()
    # 30 prompts, 12 draws a step: steps 3 and 4 must revisit, in an order the counts decide.
    train(cfg, prompts(30), SimulatedBackend(), resumed, out_dir=tmp_path / "resumed",
          resume_from=checkpoint_dir(tmp_path / "full", 2))
    assert [drawn_ids(s) for s in resumed.steps] == [drawn_ids(s) for s in full.steps[2:]]
    assert [s.metrics["prompts_revisited"] for s in resumed.steps] == \
        [s.metrics["prompts_revisited"] for s in full.steps[2:]]
    assert sum(s.metrics["prompts_revisited"] for s in full.steps) > 0


def test_gen_batch_size_draws_g_prompts_per_batch(tmp_path) -> None:
    rec = ListRecorder()
    train(config(dapo_gen_batch_size=12, total_steps=1), prompts(60, 0.5), SimulatedBackend(),
          rec, out_dir=tmp_path)
    step = rec.steps[0]
    own = {f"p{i}" for i in batch_indices(60, 4, 3, 1)}
    batches: dict[int, list[str]] = {}
    for p in step.prompts:
        batches.setdefault(p.exit_round, []).append(p.prompt_id)
    assert len(batches[1]) == 12 and own <= set(batches[1])
    assert all(len(b) == 12 for b in batches.values())
    assert step.metrics["prompts_drawn"] == 12 * step.metrics["gen_batches"]
    kept_groups = {s.prompt_id for s in step.samples if s.kept}
    assert len(kept_groups) <= 4  # the update takes the first B groups with signal
    assert further_batch_indices(60, 4, 3, 1, 0, gen_batch_size=12) == \
        further_prompt_order(60, 4, 3, 1)[:8]


def test_gen_batch_size_below_b_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        config(dapo_gen_batch_size=3).validate()
    assert err.value.field == "dapo_gen_batch_size" and "at least batch_size" in str(err.value)
    assert config(dapo_gen_batch_size=0).validate().max_samples_per_step == 4 * 4 * 3
    assert config(dapo_gen_batch_size=12).validate().max_samples_per_step == 12 * 4 * 3
    with pytest.raises(ConfigError) as err:
        config(dapo_further_prompts="fresh").validate()
    assert err.value.field == "dapo_further_prompts"


def test_max_num_gen_batches_help_says_batches_of_g_and_whose_default_is_what() -> None:
    """Issue 34 item 3: a generation batch holds G = dapo_gen_batch_size prompts (the record's
    work is G x n x cap), not B; verl's default is 0 (no limit), the recipe's scripts set 10."""
    from trainer.algorithms.dapo import OPTIONS

    spec = {o.name: o for o in OPTIONS}["max_num_gen_batches"]
    assert "G = dapo_gen_batch_size" in spec.help and "of B prompts" not in spec.help
    assert "whose default is 0" in spec.help and "scripts set 10" in spec.help
    assert spec.default == 10 and spec.ge == 0  # 0 is accepted: no limit
    c = config(dapo_gen_batch_size=12, max_num_gen_batches=5).validate()
    assert c.max_samples_per_step == 12 * c.group_size * 5


def test_a_run_stored_before_the_option_reads_as_it_ran() -> None:
    stored = TrainConfig(algorithm="dapo").to_dict()
    del stored["dapo_further_prompts"]
    assert TrainConfig.from_stored(stored).dapo_further_prompts == "any"
    assert TrainConfig.from_stored(TrainConfig(algorithm="dapo").to_dict()
                                   ).dapo_further_prompts == "unseen-first"
