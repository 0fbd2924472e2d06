"""End to end on CPU with the hf backend and the warm-started tiny model: a few training steps,
the CLI, and exact resume (step k+1 after a resume equals the uninterrupted run's step k+1)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trainer.backends.hf")

from trainer.config import TrainConfig  # noqa: E402
from trainer.loop import train  # noqa: E402
from trainer.recorders import ListRecorder, read_events  # noqa: E402
from trainer.types import STEP_METRICS  # noqa: E402

pytestmark = pytest.mark.slow


def hf_config(model_dir: Path, **kw) -> TrainConfig:
    base = dict(model=str(model_dir), backend="hf", device="cpu", algorithm="ada-balance",
                batch_size=4, group_size=4, samples_per_round=4, max_rounds=2, total_steps=3,
                lr=2e-4, save_every=1, eval_every=0, task_num_prompts=64, task_max_digits=2,
                max_new_tokens=6, seed=0)
    base.update(kw)
    return TrainConfig(**base).validate()


def run(config: TrainConfig, out: Path, rec: ListRecorder | None = None,
        **kw) -> tuple[ListRecorder, object]:
    from trainer.backends import make_backend
    from trainer.data import resolve_prompts

    prompts, _ = resolve_prompts(config)
    rec = rec if rec is not None else ListRecorder()
    result = train(config, prompts, make_backend(config, prompts), rec, out_dir=out, **kw)
    return rec, result


def comparable(step) -> tuple:
    metrics = {k: v for k, v in step.metrics.items() if not k.startswith("time_")}
    samples = [(s.prompt_id, s.round, s.index, s.response, s.reward, s.kept, s.advantage)
               for s in step.samples]
    prompts = [(p.prompt_id, p.samples, p.p_hat, p.allocated) for p in step.prompts]
    return metrics, samples, prompts


def test_hf_training_steps_and_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from trainer.kl import adaptive_kl_coef

    # Every KL option on at once (issue 34 item 6): k1 with k2's gradient in the loss, k3 in
    # the reward with the adaptive controller (a target and horizon that move it visibly).
    config = hf_config(tiny_model_dir, total_steps=2, algorithm="ada-pos", kl_coef=0.01,
                       kl_loss_type="k1+", use_kl_in_reward=True, kl_penalty="k3",
                       kl_ctrl_type="adaptive", kl_ctrl_coef=0.5, kl_ctrl_target=1e-4,
                       kl_ctrl_horizon=100)
    rec, result = run(config, tmp_path)
    assert result.status == "completed"
    steps = rec.steps
    assert [s.step for s in steps] == [1, 2]
    for s in steps:
        assert set(STEP_METRICS) <= set(s.metrics)
        assert all(math.isfinite(v) for v in s.metrics.values())
        assert s.metrics["tokens"] > 0 and s.metrics["response_length"] > 0
        assert all(x.tokens > 0 for x in s.samples)
    assert any(s.metrics["grad_norm"] > 0 for s in steps)
    # Step 1 samples with the reference's own weights: no KL; step 2 after an update: some,
    # and the coefficient each step used is the controller's answer to the step before.
    first, second = (s.metrics for s in steps)
    assert first["reward_kl"] == pytest.approx(0.0, abs=1e-5)
    assert second["reward_kl"] > 1e-6
    assert first["reward_kl_coef"] == 0.5
    assert second["reward_kl_coef"] == pytest.approx(
        adaptive_kl_coef(0.5, first["reward_kl"], 1e-4, 100, int(first["samples"])))
    # The global baseline is the pool's mean final reward: with the KL in it, the kept
    # advantages no longer sum to (r - pool mean) of the rewards alone.
    pools: dict[str, list[float]] = {}
    for x in steps[1].samples:
        pools.setdefault(x.prompt_id, []).append(x.reward)
    reward_only = [x.reward - sum(pools[x.prompt_id]) / len(pools[x.prompt_id])
                   for x in steps[1].samples if x.kept]
    assert [x.advantage for x in steps[1].samples if x.kept] != pytest.approx(reward_only,
                                                                             abs=1e-9)
    ckpt = Path(result.checkpoint)
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "optimizer.pt").is_file()
    # The controller's state travels with the checkpoint: the coefficient step 3 would use.
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["kl_in_reward_coef"] == pytest.approx(
        adaptive_kl_coef(second["reward_kl_coef"], second["reward_kl"], 1e-4, 100,
                         int(second["samples"])))
    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    assert model.config.model_type == "qwen2"


# ada-est: 8 prompts in batches of 4, so step 3 revisits prompts of step 1 and allocates from the
# estimator that steps 1 and 2 left: the estimator must travel in the checkpoint with the weights.
# ada-balance with the KL in the reward (adaptive) and in the loss: the reference and the
# coefficient steps 1 and 2 left must travel too.
KL = {"use_kl_in_reward": True, "kl_ctrl_type": "adaptive", "kl_ctrl_coef": 0.2,
      "kl_ctrl_target": 1e-3, "kl_ctrl_horizon": 50, "kl_coef": 0.02}


@pytest.mark.parametrize(("algorithm", "kl"), [("ada-balance", KL), ("ada-est", {})])
def test_resume_replays_step_k_plus_one(tiny_model_dir: Path, tmp_path: Path,
                                        algorithm: str, kl: dict) -> None:
    config = hf_config(tiny_model_dir, total_steps=3, save_every=0, ppo_mini_batch_size=2,
                       warmup_steps=2, algorithm=algorithm, task_num_prompts=8,
                       budget_per_prompt=4, est_max_samples=8, **kl)
    full, _ = run(config, tmp_path / "full")
    # Stop cleanly after step k=2 (the cancel comes between rounds of step 3), then resume with a
    # fresh backend loaded from the original weights, as a new worker process would.
    cut = ListRecorder()
    cut, cancelled = run(config, tmp_path / "cut", cut,
                         should_stop=lambda: len(cut.steps) >= 2)
    assert cancelled.status == "cancelled" and cancelled.last_step == 2
    assert [s.step for s in cut.steps] == [1, 2]
    assert comparable(cut.steps[1]) == comparable(full.steps[1])
    resumed, result = run(config, tmp_path / "cut", resume_from=cancelled.checkpoint)
    assert result.status == "completed"
    assert [s.step for s in resumed.steps] == [3]
    assert comparable(resumed.steps[0]) == comparable(full.steps[2])
    if kl:  # the coefficient moved, and step 3 went on from where it was
        assert full.steps[2].metrics["reward_kl_coef"] != kl["kl_ctrl_coef"]
    if algorithm == "ada-est":
        assert resumed.steps[0].metrics["samples"] == 4 * 4
        assert all(p.p_hat != 1 / 17 for p in resumed.steps[0].prompts)  # not the prior


def test_cli_run_builtin_model(builtin_model: Path, tmp_path: Path, capsys) -> None:
    from trainer.cli import main

    cfg = tmp_path / "run.toml"
    cfg.write_text('algorithm = "grpo"\nbatch_size = 4\ntotal_steps = 2\nsave_every = 0\n'
                   'eval_every = 2\neval_num_prompts = 8\neval_k = 2\ntask_num_prompts = 32\n'
                   'max_new_tokens = 6\nlr = 2e-4\ndevice = "cpu"\n')
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["status"] == "completed"
    events = read_events(out / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2]
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2]
    assert "greedy_accuracy" in evals[0]["metrics"]
    assert [e["step"] for e in events if e["type"] == "checkpoint"] == [2]


@pytest.mark.parametrize("algorithm", ["grpo", "ada-balance"])
def test_two_mini_batches_clip_at_both_sides(tiny_model_dir: Path, tmp_path: Path,
                                             algorithm: str) -> None:
    """One real step of the tiny model with B=32 in two mini-batches of 16 prompts: the second
    optimiser step starts from weights the first one moved, so ratios leave 1 and tokens are
    clipped on both sides (A > 0 above 1 + eps_high, A < 0 below 1 - eps_low). With the whole
    batch in one mini-batch nothing is clipped: the ratio is exactly 1. (On this model the high
    side is the rarer one, a few tokens in a thousand at lr 5e-3, the low side a few percent.)"""
    metrics = {}
    for mini in (16, 0):
        rec, _ = run(hf_config(tiny_model_dir, algorithm=algorithm, batch_size=32,
                               ppo_mini_batch_size=mini, total_steps=1, save_every=0,
                               lr=5e-3, entropy_coef=0.0, weight_decay=0.0, seed=1),
                     tmp_path / f"mini{mini}")
        metrics[mini] = rec.steps[0].metrics
    two, one = metrics[16], metrics[0]
    assert two["optimizer_steps"] == 2 and one["optimizer_steps"] == 1
    assert two["clip_frac_low"] > 0 and two["clip_frac_high"] > 0, two
    assert one["clip_frac_low"] == 0 and one["clip_frac_high"] == 0


def test_dapo_trains_on_the_hf_backend(tiny_model_dir: Path, tmp_path: Path) -> None:
    """DAPO through the real model: each step draws batches of B = 4 prompts x n = 4 until 4
    groups carry signal (or 10 batches), trains on at most B groups, and records its cost."""
    rec, result = run(hf_config(tiny_model_dir, algorithm="dapo", total_steps=2, save_every=0),
                      tmp_path)
    assert result.status == "completed"
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert 1 <= m["gen_batches"] <= 10 and m["samples"] == 16 * m["gen_batches"]
        assert m["prompts_drawn"] == len(s.prompts) == 4 * m["gen_batches"]
        assert m["kept_samples"] == 4 * min(4, m["signal_groups"])
        assert (m["gen_batches"] == 10) or (m["signal_groups"] >= 4)
        assert len({p.prompt_id for p in s.prompts}) == len(s.prompts)
        if m["kept_samples"]:
            assert m["grad_norm"] > 0


def test_pods_trains_on_the_hf_backend(tiny_model_dir: Path, tmp_path: Path) -> None:
    """PODS through the real model: B = 4 prompts draw n = 8 responses each, the update trains
    on the m = 4 of largest reward variance (the paper's rule, against a brute force over every
    subset of 4 of the 8), with GRPO's advantage over them."""
    import itertools

    import numpy as np

    rec, result = run(hf_config(tiny_model_dir, algorithm="pods", pods_rollouts=8,
                                total_steps=2, save_every=0), tmp_path)
    assert result.status == "completed"
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert (m["samples"], m["kept_samples"]) == (4 * 8, 4 * 4)
        for p in s.prompts:
            rewards = np.array([x.reward for x in s.samples if x.prompt_id == p.prompt_id])
            kept = np.array([x.kept for x in s.samples if x.prompt_id == p.prompt_id])
            best = max(np.var(rewards[list(c)]) for c in itertools.combinations(range(8), 4))
            assert len(rewards) == 8 and kept.sum() == 4
            assert np.var(rewards[kept]) == pytest.approx(best)
        if any(x.kept and x.advantage for x in s.samples):
            assert m["grad_norm"] > 0


def test_gvm_raft_trains_on_the_hf_backend(tiny_model_dir: Path, tmp_path: Path) -> None:
    """GVM-RAFT through the real model: B = 2 prompts draw 2 responses each in the first stage,
    the second stage's 2 x 2 are allocated by the paper's rule from those acceptance rates, and
    the update trains on the second stage alone (GRPO's advantage within it)."""
    import numpy as np

    from trainer.algorithms.gvm_raft import gvm_allocate, gvm_weights

    rec, result = run(hf_config(tiny_model_dir, algorithm="gvm-raft", batch_size=2,
                                gvm_stage1=2, gvm_budget=4, total_steps=2, save_every=0),
                      tmp_path)
    assert result.status == "completed"
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert (m["samples"], m["kept_samples"]) == (2 * 4, 2 * 2)
        rates = [p.p_hat for p in s.prompts]
        expected, _ = gvm_allocate(gvm_weights(np.array(rates), 1e-3, 2.0), 4, 0, 32)
        assert [p.allocated for p in s.prompts] == expected.tolist()
        for p in s.prompts:
            mine = [x for x in s.samples if x.prompt_id == p.prompt_id]
            assert [x.kept for x in mine] == [False] * 2 + [True] * p.allocated
            assert p.p_hat == sum(x.reward > 0.5 for x in mine[:2]) / 2
        if any(x.kept and x.advantage for x in s.samples):
            assert m["grad_norm"] > 0


def test_vade_trains_on_the_hf_backend(tiny_model_dir: Path, tmp_path: Path) -> None:
    """VADE through the real model: each step's B = 4 prompts are the Thompson sampler's choice
    from the posteriors the earlier steps left (replayed here from the records), each prompt's
    record carries its posterior mean before sampling, and GRPO's group update trains on them;
    the checkpoint holds the posteriors."""
    import numpy as np

    from trainer.algorithms import BatchContext
    from trainer.algorithms.vade import VADE_STATE, BetaPosteriors, vade_select
    from trainer.checkpoint import read_state
    from trainer.data import resolve_prompts

    config = hf_config(tiny_model_dir, algorithm="vade", total_steps=2, save_every=2)
    rec, result = run(config, tmp_path)
    assert result.status == "completed"
    prompt_set, _ = resolve_prompts(config)
    post = BetaPosteriors.from_config(config)
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert (m["samples"], m["kept_samples"]) == (4 * 4, 4 * 4)
        chosen = vade_select(BatchContext(config=config, step=s.step, prompt_set=prompt_set,
                                          state=post), 4, ())
        ids = [p.prompt_id for p in s.prompts]
        assert sorted(ids) == sorted(prompt_set[i].id for i in chosen)
        assert [p.p_hat for p in s.prompts] == pytest.approx(post.mean(ids).tolist())
        post.update(ids, np.array([p.positives for p in s.prompts]),
                    np.array([p.samples for p in s.prompts]))
        if any(x.kept and x.advantage for x in s.samples):
            assert m["grad_norm"] > 0
    assert read_state(result.checkpoint)[VADE_STATE] == post.state_dict()


def test_dppo_trains_on_the_hf_backend(tiny_model_dir: Path, tmp_path: Path) -> None:
    """DPPO through the real model, 2 steps over a set of 4 prompts (so the second step's batch
    has a history): every completion is recorded, a pruned one only where its |A| (over its
    whole group) is below its group's mean, and each kept one's loss weight is its prompt's
    1 / (1 - r_q) (or 1) times its own 1 / (1 - r_o) (or 1)."""
    import numpy as np

    rec, result = run(hf_config(tiny_model_dir, algorithm="dppo", group_size=8,
                                task_num_prompts=4, total_steps=2, save_every=0,
                                dppo_prompt_prune_rate=0.5, dppo_completion_prune_rate=0.5),
                      tmp_path)
    assert result.status == "completed"
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert m["samples"] == 8 * len(s.prompts) == 8 * (4 - m["prompts_pruned"])
        for p in s.prompts:
            mine = [x for x in s.samples if x.prompt_id == p.prompt_id]
            r = np.array([x.reward for x in mine])
            a = np.abs(r - r.mean()) / (r.std(ddof=1) + 1e-6)
            below = a < a.mean() - 1e-9
            assert all(x.kept or b for x, b in zip(mine, below, strict=True))
            for x, b in zip(mine, below, strict=True):
                assert x.weight in ({1.0, 2.0} if not b else {2.0, 4.0}) or not x.kept
        if any(x.kept and x.advantage for x in s.samples):
            assert m["grad_norm"] > 0
    assert sum(s.metrics["samples_pruned"] for s in rec.steps) > 0
