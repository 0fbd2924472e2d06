"""A run across two ranks on a real local Ray: two RankActors, each with a gloo FSDP2 shard of
the tiny model and a real vLLM CPU engine, driven by ``trainer.train`` unchanged.

One private Ray for the module (``RAY_ADDRESS`` points the runs at it) and one group of ranks
for the training tests (a resume reloads the ranks from the checkpoint, so it may reuse them):
starting Ray, two actors and two engines costs minutes on 2 shared cores. The single-process
comparisons share one engine (``vllm_backend``). Last, a second group splits the two ranks
(``rollout_ranks = 1``: a train rank and a rollout rank) once the first is stopped. Slow: about
3.5 minutes in all here (200 s measured, 45 s of it the split ranks').
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.vllm import TEST_KV_CACHE_GIB, requires_vllm
from tests.trainer.test_vllm_backend import comparable, vllm_config
from trainer.recorders import ListRecorder
from trainer.types import STEP_METRICS

pytestmark = [requires_vllm(), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    from trainer.distributed.placement import LocalRay

    ray_head = LocalRay.start(num_cpus=2)
    with pytest.MonkeyPatch.context() as mp:  # monkeypatch is per test, this fixture per module
        mp.setenv("RAY_ADDRESS", ray_head.address)
        yield ray_head
    ray_head.stop()


def two_rank_config(model_dir: Path, **kw: Any) -> Any:
    """Two ranks with the device and the engine's dtype left at their defaults ("auto": cpu
    and float32 here), as a user leaves them: the ranks are built with the resolved values and
    every run on them must compare as resolved (issue 27: a default-device run failed)."""
    return vllm_config(model_dir, **{"world_size": 2, "device": "auto", "rollout_dtype": "auto",
                                     "save_every": 2, **kw})


def test_a_stop_while_the_ranks_start_abandons_them_at_once(local_ray: Any,
                                                             tiny_model_dir: Path) -> None:
    """A cancel while the ranks load the model and build their engines (minutes for a large
    model) waited for the start to finish, up to START_TIMEOUT_S (15 min). The start is
    abandoned at the next poll: the ranks are killed, their bundles freed. First in the module:
    the module's own group (``ranks``) takes every CPU of its Ray once started."""
    import ray

    from trainer.distributed.launcher import RankGroup
    from trainer.distributed.placement import waiting_with
    from trainer.types import StopRequested

    asked: list[float] = []

    def should_stop() -> bool:  # the cancel arrives once the ranks are placed and starting
        asked.append(time.monotonic())
        return True

    with waiting_with(lambda need: True, should_stop), pytest.raises(StopRequested) as stop:
        RankGroup(two_rank_config(tiny_model_dir))
    assert "the ranks' start" in str(stop.value) and stop.value.clean
    # Abandoned at the first poll, without waiting for a start (its model load alone takes
    # seconds) or a close queued behind it.
    assert len(asked) == 1
    # Nothing is left holding the cluster: the next group gets both bundles (the module's).
    ray.init(address=local_ray.address, log_to_driver=False)
    try:
        deadline = time.monotonic() + 60  # Ray frees a killed actor's bundle asynchronously
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0) == 2, ray.available_resources()
    finally:
        ray.shutdown()


def test_a_rank_that_raises_stops_every_rank_and_its_reason_leads_the_error(
        local_ray: Any, tiny_model_dir: Path, tmp_path: Path) -> None:
    """A rank's exception reaches the driver through Ray as a coloured remote traceback
    (``RayTaskError``) with the reason on its last line. The run's error leads with that reason
    in plain text and says which rank failed in which call; the whole traceback stays below it
    without colour codes; every rank is stopped (the module's group gets both CPUs next). A
    model directory without its weights: the ranks fail in their start, before any engine."""
    from trainer.distributed.launcher import RankFailed, RankGroup
    from trainer.errors import plain_traceback, reason

    broken = tmp_path / "no-weights"
    broken.mkdir()
    for f in tiny_model_dir.glob("*.json"):
        shutil.copy(f, broken / f.name)
    with pytest.raises(RankFailed) as failed:
        RankGroup(two_rank_config(broken))
    assert "\x1b[" in str(failed.value.__cause__)  # what Ray hands over: colour codes
    error, trace = reason(failed.value), plain_traceback(failed.value)
    assert error.startswith(f"OSError: Error no file named model.safetensors, or "
                            f"pytorch_model.bin, found in directory {broken}")
    assert re.search(r"\(rank [01] of 2 failed in start; every rank was stopped\)$", error)
    assert "\x1b" not in error and "\x1b" not in trace and "\n" not in error
    assert "Traceback (most recent call last)" in trace and "in start" in trace
    # A traceback's last line (the CLI prints it) says where and why too.
    assert str(failed.value).startswith("rank ") and "OSError: Error no file" in str(failed.value)


@pytest.fixture(scope="module")
def ranks(local_ray: Any, tiny_model_dir: Path) -> Iterator[Any]:
    from trainer.distributed.launcher import RankGroup
    from trainer.phases import reporting_phases

    said: list[str] = []  # what the run's page showed while it started
    with reporting_phases(said.append):
        group = RankGroup(two_rank_config(tiny_model_dir))
    group.phases_said = said  # test_the_ranks_start_says_its_phases_in_order
    yield group
    group.stop()


def test_the_ranks_start_says_its_phases_in_order(ranks: Any) -> None:
    """The 25-45 s start of a 2-rank run read "step 0 of N" only; each phase is said as it
    begins, in the order the start goes through them."""
    from trainer.distributed.rank_phases import RANK_PHASES, READY

    # Every rank logged every phase of its start, in order (engines included).
    for rank in range(2):
        assert [p for r, p in ranks.start_log if r == rank] == [*RANK_PHASES[1:], READY]
    said = ranks.phases_said
    assert said[:3] == [f"connecting to the Ray cluster at {os.environ['RAY_ADDRESS']}",
                        "placing 2 ranks on the Ray cluster",
                        "starting 2 ranks (0 of 2 ready): starting up"]
    assert said[-1] == "starting 2 ranks (2 of 2 ready)"
    # In between, the driver's reads (once a second) of the least advanced rank's phase: it
    # never goes back, and the ready count never drops.
    order = {p: k for k, p in enumerate(RANK_PHASES)}
    seen = []
    for text in said[2:-1]:
        ready = int(text.split("(")[1].split(" of ")[0])
        first = text.split("): ", 1)[1].split(", ")[0]
        first = first.split(" ", 2)[2] if first.startswith("rank ") else first
        seen.append((ready, order[first]))
    assert seen, said
    assert [r for r, _ in seen] == sorted(r for r, _ in seen), said
    assert [p for _, p in seen] == sorted(p for _, p in seen), said


def run(config: Any, group: Any, out: Path, **kw: Any) -> tuple[ListRecorder, Any]:
    from trainer.data import resolve_prompts
    from trainer.distributed.backend import DistributedBackend
    from trainer.loop import train

    prompts, _ = resolve_prompts(config)
    rec = ListRecorder()
    result = train(config, prompts, DistributedBackend(config, group=group), rec, out_dir=out,
                   **kw)
    return rec, result


def assert_one_engine_like(backend: Any, config: Any) -> None:
    """The module's single-process engine (``vllm_backend``) is the one ``make_backend``
    builds for ``config`` (one engine for the module instead of one per comparison: an engine
    costs seconds to build): the same sampling settings, dtype and engine seed."""
    from trainer.backends.vllm import vllm_device
    from trainer.config import resolve_rollout_dtype

    assert (backend.temperature, backend.top_p, backend.max_new_tokens) == (
        config.temperature, config.top_p, config.max_new_tokens)
    assert backend.dtype == resolve_rollout_dtype(config.rollout_dtype, vllm_device())
    assert config.seed % 2**31 == 0 and config.vllm_kv_cache_gib == TEST_KV_CACHE_GIB


def first_step_as_one_process(rec: Any, one: Any, backend: Any, out_dir: Path) -> Any:
    """Train ``one`` (the run's config in one process) on the module's engine and assert that
    ``rec``'s step 1 is its step 1: every sample, reward, kept flag and advantage exactly, the
    update's figures within float noise. Returns the one-process step 1 (``comparable``)."""
    from trainer.data import resolve_prompts
    from trainer.loop import train

    prompts, _ = resolve_prompts(one)
    single = ListRecorder()
    assert_one_engine_like(backend, one)
    train(one, prompts, backend, single, out_dir=out_dir)
    got, want = comparable(rec.steps[0]), comparable(single.steps[0])
    assert got[1] == want[1]  # every sample, reward, kept flag and advantage
    for key in ("policy_loss", "entropy", "grad_norm", "kept_samples", "samples"):
        assert got[0][key] == pytest.approx(want[0][key], rel=1e-4, abs=1e-6), key
    return want


@pytest.fixture(scope="module")
def two_rank_run(ranks: Any, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[Any, ListRecorder, Path]:
    out = tmp_path_factory.mktemp("two-ranks")
    config = two_rank_config(tiny_model_dir)
    rec, result = run(config, ranks, out)
    assert result.status == "completed"
    return config, rec, out


def test_ranks_hold_engines_on_a_placement_group(ranks: Any) -> None:
    where = ranks.where()
    assert len({w["pid"] for w in where}) == 2  # two processes


def test_two_engines_give_one_engines_samples(ranks: Any, tiny_model_dir: Path) -> None:
    """The same requests spread over two engines, in another order: identical tokens and
    log-probs (per-request seeds)."""
    from trainer.distributed.backend import DistributedBackend
    from trainer.tasks import arithmetic_prompts

    backend = DistributedBackend(two_rank_config(tiny_model_dir), group=ranks)
    prompts = arithmetic_prompts(6, max_digits=2, seed=2)
    spread = backend.generate(prompts, [3, 1, 2, 2, 4, 1], seed=11)
    one = ranks.call_each("generate", [((prompts, [3, 1, 2, 2, 4, 1]), {"seed": 11}),
                                       (([], []), {"seed": 11})])[0]
    other = ranks.call_each("generate", [(([], []), {"seed": 11}),
                                         ((prompts[::-1], [1, 4, 2, 2, 1, 3]),
                                          {"seed": 11})])[1][::-1]
    for a, b, c in zip(spread, one, other, strict=True):
        assert [g.response_token_ids for g in a] == [g.response_token_ids for g in b] \
            == [g.response_token_ids for g in c]
        assert [g.rollout_logprobs for g in a] == [g.rollout_logprobs for g in b] \
            == [g.rollout_logprobs for g in c]


def test_per_prompt_and_streaming_schedulers_across_engines(ranks: Any,
                                                           tiny_model_dir: Path) -> None:
    """per-prompt over two engines draws exactly the round scheduler's step (prompts stay on
    their engine, submits and steps go to every engine), with speculative early rounds too
    (spare capacity checked per engine); streaming aborts across engines."""
    import numpy as np

    from trainer.distributed.backend import DistributedBackend
    from trainer.loop import make_scorer, sample_step
    from trainer.tasks import arithmetic_prompts

    prompts = arithmetic_prompts(6, max_digits=2, seed=4)
    steps = {}
    for scheduler, early in (("round", "off"), ("per-prompt", "certain"),
                             ("per-prompt", "speculative"), ("streaming", "certain")):
        cfg = two_rank_config(tiny_model_dir, scheduler=scheduler, early_rounds=early)
        backend = DistributedBackend(cfg, group=ranks)
        steps[scheduler if early != "speculative" else early] = sample_step(
            cfg, prompts, backend, make_scorer(cfg), step=3)
    a = steps["round"]
    for b in (steps["per-prompt"], steps["speculative"]):
        assert [[g.response_token_ids for g in gs] for gs in a.outcome.generations] == \
            [[g.response_token_ids for g in gs] for gs in b.outcome.generations]
        for name in ("rewards", "kept", "advantages", "exit_round"):
            np.testing.assert_array_equal(getattr(a.result, name), getattr(b.result, name),
                                          err_msg=name)
    assert steps["speculative"].outcome.early_rounds_started > 0
    streamed = steps["streaming"].result
    assert streamed is not None and streamed.num_prompts == len(prompts)
    assert steps["streaming"].outcome.tokens_discarded >= 0


def test_two_ranks_train_as_one_process(two_rank_run: Any, tiny_model_dir: Path,
                                        tmp_path: Path, ranks: Any,
                                        restore_policy: Any) -> None:
    """Step 1's pools, kept groups and advantages equal the single-process vllm run's
    exactly (same weights at step 1, per-request seeds); every step's records are complete;
    after the run each engine's log-probs of fixed responses are the gathered policy's. The
    single process trains on the module's one engine (``vllm_backend``: the same settings as
    ``make_backend`` gives this config), its policy put back after."""

    config, rec, out = two_rank_run
    assert [s.step for s in rec.steps] == [1, 2, 3]
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert m["grad_norm"] > 0 and m["time_sync"] > 0
        assert len(s.prompts) == config.batch_size
        assert len(s.samples) == m["samples"]
        # Each rank's own split of the step.
        assert [r.rank for r in s.ranks] == [0, 1] and all(r.device == "cpu" for r in s.ranks)
        assert all(r.generation_s > 0 and r.update_s > 0 and r.weight_gather_s > 0
                   and r.engine_load_s > 0 for r in s.ranks)
    one = dataclasses.replace(config, world_size=1, total_steps=1, save_every=0)
    first_step_as_one_process(rec, one, restore_policy, tmp_path)
    # The checkpoint: shards, the run state and a Hugging Face export of the whole policy.
    final = out / "checkpoints" / "step-000003"
    assert (final / "sharded").is_dir() and (final / "config.json").is_file()
    assert (final / "model.safetensors").is_file()
    # The engines hold the gathered policy: their log-probs of a fixed response are the
    # exported model's within 1e-4.
    import torch

    from trainer.model import load_model_dir
    from trainer.policy import response_logprobs

    model, tok = load_model_dir(final, "cpu")
    prompt_ids = [list(tok("1+2=")["input_ids"])] * 2
    response_ids = [[5, 6, 2], [7, 2]]
    with torch.no_grad():
        lp, _, mask = response_logprobs(model, prompt_ids, response_ids, tok.pad_token_id, 1.0)
    policy = [row[:n] for row, n in zip(lp.tolist(), mask.sum(-1).tolist(), strict=True)]
    for engine in ranks.call_all("engine_logprobs", prompt_ids, response_ids):
        gap = max(abs(a - b) for ra, rb in zip(engine, policy, strict=True)
                  for a, b in zip(ra, rb, strict=True))
        assert gap < 1e-4


def test_resume_from_the_sharded_checkpoint_replays_step_three(two_rank_run: Any,
                                                               ranks: Any,
                                                               tmp_path: Path) -> None:
    config, rec, out = two_rank_run
    resumed_out = tmp_path / "resumed"
    shutil.copytree(out / "checkpoints" / "step-000002",
                    resumed_out / "checkpoints" / "step-000002")
    resumed, result = run(config, ranks, resumed_out,
                          resume_from=resumed_out / "checkpoints" / "step-000002")
    assert result.status == "completed"
    assert [s.step for s in resumed.steps] == [3]
    got, want = comparable(resumed.steps[0]), comparable(rec.steps[2])
    assert got[1] == want[1]
    for key in ("policy_loss", "grad_norm", "entropy"):
        assert got[0][key] == pytest.approx(want[0][key], rel=1e-5, abs=1e-7), key


# Every KL option on the ranks' sharded frozen reference (issue 34 item 6), in the reward with
# the adaptive controller (a target that moves it) and k2 in the loss.
KL = {"use_kl_in_reward": True, "kl_penalty": "k3", "kl_ctrl_type": "adaptive",
      "kl_ctrl_coef": 0.5, "kl_ctrl_target": 1e-4, "kl_ctrl_horizon": 100, "kl_coef": 0.05,
      "kl_loss_type": "k2"}


@pytest.mark.parametrize(("algorithm", "spelled", "kl"),
                         [("ada-est", {}, KL),
                          ("dapo", {"device": "cpu", "rollout_dtype": "float32"}, {})])
def test_ada_est_and_dapo_at_two_ranks_match_one_process(algorithm: str, spelled: dict[str, Any],
                                                        kl: dict[str, Any], ranks: Any,
                                                        tiny_model_dir: Path, tmp_path: Path,
                                                        restore_policy: Any) -> None:
    """As for ada-balance: step 1 (pools, kept groups, advantages; Est's estimator, DAPO's
    further batches) equals the single-process vllm run's exactly and every step's records are
    complete. The module's ranks were trained by the runs above: a new run puts them back to
    the model's weights and takes its own config (DAPO's clip ranges), which this also proves.
    Two steps in each (step 1 is the one compared). DAPO spells the device and dtype out
    ("cpu", "float32") on ranks a default config built: the same ranks take both spellings.
    Est runs with every KL option: the ranks build their reference when a run first asks for
    one; step 1 samples with the reference's weights (no KL), step 2 has some, and the
    coefficient follows the adaptive rule."""

    assert ranks.trained
    config = two_rank_config(tiny_model_dir, algorithm=algorithm, total_steps=2, save_every=0,
                             **spelled, **kl)
    rec, result = run(config, ranks, tmp_path / "ranks")
    assert result.status == "completed" and [s.step for s in rec.steps] == [1, 2]
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert m["grad_norm"] > 0 and len(s.samples) == m["samples"]
        assert [r.rank for r in s.ranks] == [0, 1]
    # The same total_steps: DAPO's further batches depend on it.
    one = dataclasses.replace(config, world_size=1)
    want = first_step_as_one_process(rec, one, restore_policy, tmp_path / "one")
    if kl:
        from trainer.kl import adaptive_kl_coef

        first, second = (s.metrics for s in rec.steps)
        assert first["reward_kl"] == want[0]["reward_kl"] == 0.0
        assert first["kl"] == pytest.approx(want[0]["kl"], abs=1e-7)
        assert second["reward_kl"] > 1e-6 and second["kl"] > 0
        assert second["reward_kl_coef"] == pytest.approx(
            adaptive_kl_coef(kl["kl_ctrl_coef"], 0.0, kl["kl_ctrl_target"],
                             kl["kl_ctrl_horizon"], int(first["samples"])))


def test_a_cancel_mid_step_reaches_every_rank_and_the_run_ends_cleanly(
        ranks: Any, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancel arrives once step 1's update is under way: every rank stops before its first
    mini-batch (none steps alone: the weights are unchanged and no rank is left waiting in a
    collective, so the group still answers), the run ends "cancelled" with no step recorded,
    and closing the backend leaves no rank process. Runs last on the module's ranks (it stops
    them)."""
    import psutil
    import ray
    import torch

    from trainer.data import resolve_prompts
    from trainer.distributed.backend import DistributedBackend, DistributedLearner
    from trainer.loop import train

    cancel = {"set": False}
    real_update = DistributedLearner.update

    def update_then_cancel(self: Any, *args: Any, **kw: Any) -> Any:
        # The user's cancel lands now. The flag is raised before the ranks are called (what
        # the driver's relay does for a cancel a moment earlier), so the stop does not race
        # the tiny model's sub-second update; the relay then sees should_stop too.
        cancel["set"] = True
        ray.get(self.group.stop_flag.set.remote())
        return real_update(self, *args, **kw)

    monkeypatch.setattr(DistributedLearner, "update", update_then_cancel)
    config = two_rank_config(tiny_model_dir, save_every=0)
    from trainer.model import load_model_dir

    # The run starts the ranks from the model's weights; a stop before the first mini-batch
    # leaves them there.
    before = load_model_dir(tiny_model_dir, "cpu")[0].state_dict()
    prompts, _ = resolve_prompts(config)
    rec = ListRecorder()
    backend = DistributedBackend(config, group=ranks)
    result = train(config, prompts, backend, rec, out_dir=tmp_path,
                   should_stop=lambda: cancel["set"])
    assert cancel["set"] and result.status == "cancelled" and result.last_step == 0
    assert rec.steps == []
    # Every rank left the update at the same mini-batch: the group answers, unchanged.
    pids = [w["pid"] for w in ranks.where()]
    after = ranks.call_all("full_state_dict")
    for weights in after:
        assert all(torch.equal(weights[k], v) for k, v in before.items())
    assert not ray.get(ranks.stop_flag.is_set.remote())  # cleared for the next call
    backend.close()
    _, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)],
                                 timeout=60)
    assert not alive, f"ranks still running after the run ended: {[p.pid for p in alive]}"


DRIVER = """
import sys
from trainer.config import TrainConfig
from trainer.distributed.launcher import RankGroup
cfg = TrainConfig(model=sys.argv[1], backend="vllm", world_size=2, vllm_kv_cache_gib=0.125,
                  max_new_tokens=6)
group = RankGroup(cfg, engine=False)
print("ready", flush=True)
while True:
    group.call_all("full_state_dict")  # a collective on both ranks, over and over
"""


def test_a_sigkilled_driver_leaves_no_ray_or_rank_behind(tiny_model_dir: Path) -> None:
    """A driver with its own private Ray, SIGKILLed while its ranks are in a collective: the
    reaper takes down the Ray head, its agents and both ranks (checked by process tree and
    session). Ranks without engines: the reaper is the point, and the worker test
    (tests/platform/test_worker_distributed.py) SIGKILLs a run's driver whose ranks hold
    engines; an engine's start costs each rank most of its start."""
    import psutil

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tiny_model_dir)], cwd=REPO,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "ready"
        time.sleep(1)  # mid-collective
        tree = psutil.Process(driver.pid).children(recursive=True)
        heads = [p for p in tree if "--head" in " ".join(p.cmdline())]
        assert heads, "the private Ray head runs under the driver"
        sessions = {os.getsid(p.pid) for p in heads}
        ray_procs = [p for p in psutil.process_iter() if _sid(p.pid) in sessions]
        assert any("raylet" in " ".join(p.cmdline()) for p in ray_procs)
        assert any("RankActor" in p.name() or "ray::" in " ".join(p.cmdline())
                   for p in ray_procs)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        _, alive = psutil.wait_procs([*tree, *ray_procs], timeout=60)
        assert not alive, [p.pid for p in alive]
        assert not [p for p in psutil.process_iter() if _sid(p.pid) in sessions]
    finally:
        if driver.poll() is None:
            driver.kill()


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (ProcessLookupError, PermissionError):
        return None


# --- the rollout/train split (rollout_ranks) ---------------------------------------------------
# Last in the module: its group takes both CPUs of the module's Ray, which the module's
# colocated ranks hold until the cancel test above stops them.

@pytest.fixture(scope="module")
def split_ranks(local_ray: Any, tiny_model_dir: Path) -> Iterator[Any]:
    """Rank 0 trains (an FSDP2 shard over a group of one, the optimiser, no engine), rank 1
    generates (a vLLM engine, no shard); every run below (asynchronous or not) uses them."""
    from trainer.distributed.launcher import RankGroup

    group = RankGroup(two_rank_config(tiny_model_dir, rollout_ranks=1))
    yield group
    group.stop()


def policy_gap(group: Any, tiny_model_dir: Path) -> float:
    """The largest gap between the rollout engine's log-probs of fixed responses and the train
    ranks' policy's (its gathered weights in an HF model on the driver)."""
    import torch

    from trainer.model import load_model_dir
    from trainer.policy import response_logprobs

    (full,) = group.call_all("full_state_dict", on=group.train)
    model, tok = load_model_dir(tiny_model_dir, "cpu")
    model.load_state_dict(full)
    prompt_ids = [list(tok("1+2=")["input_ids"])] * 2
    response_ids = [[5, 6, 2], [7, 2]]
    with torch.no_grad():
        lp, _, mask = response_logprobs(model, prompt_ids, response_ids, tok.pad_token_id, 1.0)
    policy = [row[:n] for row, n in zip(lp.tolist(), mask.sum(-1).tolist(), strict=True)]
    (engine,) = group.call_all("engine_logprobs", prompt_ids, response_ids, on=group.rollout)
    return max(abs(a - b) for ra, rb in zip(engine, policy, strict=True)
               for a, b in zip(ra, rb, strict=True))


def test_split_ranks_train_asynchronously_while_the_rollout_rank_generates(
        split_ranks: Any, tiny_model_dir: Path, tmp_path: Path) -> None:
    """max_policy_lag = 1 across split ranks (one round per prompt, as verl's
    one-step-off-policy GRPO): the overlapped tick generates on the rollout rank while the
    train rank updates, its requests finish on the old weights and count as lagging by one, so
    every step after the first trains lag-1 samples and none older; each rank did only its side
    (roles, seconds). The push is staged (``weight_push``, its default): the rollout rank's
    receive began while the tick's generate call still ran (the rank's own timeline), and the
    swap into the engine came after both. PODS draws 64 responses a prompt and trains 2, so
    that a tick's generate call outlasts the update here (0.4 s against 0.1-0.2 s), as
    generation does on GPUs; GRPO's tick of what it trains took 0.06 s, over before the push.
    After the run the rollout engine holds the train rank's weights (its log-probs are the
    policy's, and a staged push with digests shows the bytes it swaps in are the bytes the
    train rank gathers). Last, two steps with ``weight_push`` = after-requests: the same lags,
    the push loaded as it arrives once the tick returned."""
    assert split_ranks.roles == ["train", "rollout"]
    assert (split_ranks.train, split_ranks.rollout) == ([0], [1])
    config = two_rank_config(tiny_model_dir, rollout_ranks=1, max_policy_lag=1,
                             algorithm="pods", pods_rollouts=64, group_size=2, tis_cap=2.0,
                             total_steps=3, save_every=0)
    assert config.weight_push == "staged"
    (before,) = split_ranks.call_all("timeline", on=split_ranks.rollout)
    rec, result = run(config, split_ranks, tmp_path)
    assert result.status == "completed" and [s.step for s in rec.steps] == [1, 2, 3]
    lags = []
    for s in rec.steps:
        m = s.metrics
        assert set(STEP_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert m["grad_norm"] > 0 and len(s.samples) == m["samples"]
        kept = [(s.step - 1) - x.policy_version for x in s.samples if x.kept]
        assert kept and all(0 <= lag <= 1 for lag in kept), (s.step, kept)
        lags.append(max(kept))
        train, rollout = s.ranks
        assert [r.role for r in s.ranks] == ["train", "rollout"]
        assert train.update_s > 0 and train.weight_gather_s > 0 and train.generation_s == 0
        # A rollout rank's weight gather is its receive of the staged push (beside its
        # generation), its engine load the swap alone.
        assert rollout.generation_s > 0 and rollout.update_s == 0
        assert rollout.weight_gather_s > 0 and rollout.engine_load_s > 0
        print(f"step {s.step}: update {m['time_update']:.3f} s, time_sync "
              f"{m['time_sync']:.3f} s, train gather+send {train.weight_gather_s:.3f} s, "
              f"rollout receive {rollout.weight_gather_s:.3f} s, swap "
              f"{rollout.engine_load_s:.3f} s, generation {rollout.generation_s:.3f} s")
    # Step 1 trains the first tick's groups (version 0); steps 2 and 3 the groups the tick
    # during the previous update drew on the weights that update started from.
    assert lags == [0, 1, 1]
    # The rollout rank's timeline of the run. Update 1 had no tick to overlap (the first tick
    # admitted k + 1 batches: no room was left during update 1), so its push received while
    # nothing generated; updates 2 and 3 each had one, and their push was received while it
    # ran (the receive began before that generate call returned, on another thread). Every
    # push was swapped in after its receive and the tick ended, with no generate between.
    (events,) = split_ranks.call_all("timeline", on=split_ranks.rollout)
    events = sorted(events[len(before):], key=lambda e: e[1])  # by when each began
    t0 = events[0][1]
    print([(what, round(a - t0, 3), round(b - t0, 3)) for what, a, b in events])
    receives = [e for e in events if e[0] == "receive"]
    swaps = [e for e in events if e[0] == "swap"]
    assert len(receives) == len(swaps) == 3, events
    for s, (_, begin, end), swap in zip(rec.steps, receives, swaps, strict=True):
        ticks = [e for e in events if e[0] == "generate" and e[1] < begin < e[2]]
        if s.step == 1:
            assert not ticks and s.metrics["time_overlap"] == 0
            continue
        assert len(ticks) == 1, (s.step, "no generate call ran when the receive began")
        tick = ticks[0]
        print(f"step {s.step}: receive began {tick[2] - begin:.3f} s before the tick's "
              f"generate returned; swap {swap[1] - max(end, tick[2]):.3f} s after both")
        assert swap[1] >= max(end, tick[2])
        assert not [e for e in events if e[0] == "generate" and tick[1] < e[1] < swap[1]]
    assert policy_gap(split_ranks, tiny_model_dir) < 1e-4
    # A staged push by hand (what the learner does after an update), digests on both sides.
    g = split_ranks
    sent = g.submit("sync_weights", digest=True, on=g.train)
    received = g.submit("receive_staged", digest=True, on=g.rollout, transfer=True)
    (pushed, staged) = g.wait(sent + received, what="push", on=[*g.train, *g.rollout])
    g.call_all("swap_staged", on=g.rollout)
    g.call_all("step_report")  # its seconds belong to no step
    assert pushed["digest"] == staged["digest"]
    assert policy_gap(split_ranks, tiny_model_dir) < 1e-4
    # weight_push = after-requests: the push after the tick returned, loaded as it arrives
    # (the rollout rank's seconds all engine load), the same lags.
    after = dataclasses.replace(config, weight_push="after-requests", total_steps=2)
    (before,) = split_ranks.call_all("timeline", on=split_ranks.rollout)
    rec, result = run(after, split_ranks, tmp_path / "after")
    assert result.status == "completed"
    for s in rec.steps:
        kept = [(s.step - 1) - x.policy_version for x in s.samples if x.kept]
        assert kept and all(0 <= lag <= 1 for lag in kept), (s.step, kept)
        train, rollout = s.ranks
        assert train.weight_gather_s > 0 and rollout.engine_load_s > 0
        assert rollout.weight_gather_s == 0
        print(f"after-requests step {s.step}: time_sync {s.metrics['time_sync']:.3f} s, "
              f"train gather+send {train.weight_gather_s:.3f} s, rollout receive+load "
              f"{rollout.engine_load_s:.3f} s, generation {rollout.generation_s:.3f} s")
    (events,) = split_ranks.call_all("timeline", on=split_ranks.rollout)
    assert [e[0] for e in events[len(before):]] == ["generate"] * 2


def test_split_ranks_train_synchronously_as_one_process_and_resume(
        split_ranks: Any, tiny_model_dir: Path, tmp_path: Path, restore_policy: Any) -> None:
    """max_policy_lag = 0 across split ranks: generate on the rollout rank, update on the train
    rank, push. Step 1 equals the one-process vllm run's exactly (samples, rewards, kept flags,
    advantages; no policy versions in synchronous records): both start from the model's
    weights and request seeds make a sample independent of the engine. Later steps need not:
    the train rank's FSDP update is the one-process update only to float noise (compared
    within 1e-4), and a flipped token changes every sample after it; a world_size 2
    colocated run splits the update over two ranks, further still. What must hold exactly is
    a resume: from step 1's checkpoint the train rank loads its shard and pushes it to the
    rollout rank (which holds nothing to save), and step 2 replays sample for sample. The
    ranks were trained by the run above: this run starts them from the model's weights."""

    assert split_ranks.trained
    config = two_rank_config(tiny_model_dir, rollout_ranks=1, total_steps=2, save_every=1)
    rec, result = run(config, split_ranks, tmp_path / "split")
    assert result.status == "completed" and [s.step for s in rec.steps] == [1, 2]
    for s in rec.steps:
        assert [r.role for r in s.ranks] == ["train", "rollout"]
        assert all(x.policy_version is None for x in s.samples)
    # Checkpoints: the train rank's shard, the run state and the HF export; nothing else.
    first = tmp_path / "split" / "checkpoints" / "step-000001"
    assert (first / "sharded").is_dir() and (first / "model.safetensors").is_file()
    one = dataclasses.replace(config, world_size=1, rollout_ranks=0, total_steps=1,
                              save_every=0)
    first_step_as_one_process(rec, one, restore_policy, tmp_path / "one")
    resumed_out = tmp_path / "resumed"
    shutil.copytree(first, resumed_out / "checkpoints" / "step-000001")
    resumed, result = run(config, split_ranks, resumed_out,
                          resume_from=resumed_out / "checkpoints" / "step-000001")
    assert result.status == "completed" and [s.step for s in resumed.steps] == [2]
    got, want = comparable(resumed.steps[0]), comparable(rec.steps[1])
    assert got[1] == want[1]
    for key in ("policy_loss", "grad_norm", "entropy"):
        assert got[0][key] == pytest.approx(want[0][key], rel=1e-5, abs=1e-7), key
