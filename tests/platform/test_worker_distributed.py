"""``world_size = 2`` runs through the platform: launched through the service layer, executed
by a real Celery worker that has no ``RAY_ADDRESS`` (so the run's process starts a private local
Ray of two CPUs, with its reaper), two gloo FSDP2 ranks each with a real vLLM CPU engine
(colocated), or split (``rollout_ranks = 1``): a train rank (a shard of one, the optimiser, no
engine) and a rollout rank (a vLLM CPU engine, no shard).

Slow: every worker run starts its own Ray, two rank actors and their engines (half a minute to
a minute and a half each on 2 shared cores); so the module runs as few as its checks allow:
five sets of ranks. Colocated: a run cancelled after its third step. Split: a run killed
and resumed, two, and its resume replayed by ``train()`` in this process from the
same checkpoint, one (the split's rows must be what ``train()`` emits: 305 s measured for the
three on 2 cores shared with other Ray runs, load ~9); the wall-time run, split (110 s
there). That the rows a colocated 2-rank run records are what ``train()`` emits on the same
ranks is the trainer's tests' (tests/trainer/test_distributed.py) and the one-rank worker's
(tests/platform/test_worker.py); here the killed and resumed split run must record, row for
row, what ``train()`` resumed from its checkpoint emits.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import Checkpoint, Run, Sample, Step

from tests.fixtures.services import wait_for
from tests.fixtures.vllm import TEST_KV_CACHE_GIB, requires_vllm
from tests.platform.test_worker import (
    assert_no_duplicates,
    assert_recorded_as_emitted,
    replay_as_the_worker,
    wait_status,
    wait_step,
)

pytestmark = [requires_vllm(), pytest.mark.slow]

# The device and the engine's dtype are left at their defaults ("auto": cpu and float32 on
# these machines), as a user leaves them (issue 27: such a run failed before its first step).
CONFIG = {"backend": "vllm", "model": "builtin:tiny", "world_size": 2,
          "vllm_kv_cache_gib": TEST_KV_CACHE_GIB,
          "algorithm": "ada-balance", "batch_size": 4, "group_size": 4, "samples_per_round": 4,
          "max_rounds": 2, "total_steps": 3, "lr": 2e-4, "save_every": 1, "eval_every": 0,
          "max_new_tokens": 6, "seed": 0}
# The rollout/train split of the same two ranks, asynchronous (the rollout rank generates the
# next samples while the train rank updates: verl's one-step-off-policy), with truncated IS.
SPLIT = CONFIG | {"rollout_ranks": 1, "max_policy_lag": 1, "off_policy_correction": "tis",
                  "tis_cap": 2.0}


def worker_env(model_dir: Path) -> dict[str, str]:
    from trainer.model import MODEL_DIR_ENV

    # No RAY_ADDRESS: the run's process starts a private Ray of its own.
    return {MODEL_DIR_ENV: str(model_dir), "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "RUN_MAX_ATTEMPTS": "5"}


def _cmd(p: psutil.Process) -> str:
    """A process's command line; "" once it is gone (the tree changes while it is read)."""
    try:
        return " ".join(p.cmdline())
    except (OSError, psutil.Error):
        return ""


def _ray_tree(worker_pid: int) -> tuple[list[psutil.Process], set[str]]:
    """The worker's process tree (run process, Ray head, reaper) plus every process of the
    private Ray's sessions (raylet, GCS, agents, the rank actors and their engines), and the
    Ray session directories they name."""
    tree = psutil.Process(worker_pid).children(recursive=True)
    heads = [p for p in tree if "--head" in _cmd(p)]
    sessions = {os.getsid(p.pid) for p in heads}
    procs = {p.pid: p for p in tree}
    dirs: set[str] = set()
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) in sessions:
                procs[p.pid] = p
                dirs.update(re.findall(r"--session[-_]dir=(\S+)", _cmd(p)))
        except (OSError, psutil.Error):
            pass
    return list(procs.values()), dirs


def _naming(dirs: set[str]) -> list[int]:
    found = []
    for p in psutil.process_iter():
        try:
            line = " ".join(p.cmdline())
        except (OSError, psutil.Error):
            continue
        if any(d in line for d in dirs):
            found.append(p.pid)
    return found


def assert_ranks_recorded_and_shown(run: Run, user: Any,
                                    roles: tuple[str, str] = ("train+rollout",) * 2) -> None:
    """Every step carries both ranks (where they ran, their role and their seconds: a train
    rank generates nothing, a rollout rank updates nothing); the run page says where the run ran
    and what each rank does, and charts each rank."""
    for step in Step.objects.filter(run=run):
        assert [r["rank"] for r in step.ranks] == [0, 1]
        assert tuple(r["role"] for r in step.ranks) == roles, step.step
        for r in step.ranks:
            assert r["device"] == "cpu" and r["node"]
            if r["role"] != "train":
                assert r["generation_s"] > 0
            if r["role"] != "rollout":
                assert r["update_s"] > 0 and r["weight_gather_s"] > 0
            if r["role"] == "train":
                assert r["generation_s"] == 0
            if r["role"] == "rollout":  # it loads the pushed weights; it trains nothing
                assert r["update_s"] == 0 and r["engine_load_s"] > 0
    client = Client()
    client.force_login(user)
    page = client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    table = page[page.index('id="run-placement"'):page.index("</table>", page.index(
        'id="run-placement"'))]
    assert "2 ranks on 1 node" in table
    if roles[0] != roles[1]:
        assert "1 rollout rank generating, 1 train rank training" in table
    for rank, role in enumerate(roles):
        assert re.search(rf'<td>{rank}</td><td class="rank-role">{re.escape(role)}</td>'
                         r"<td>[^<]+</td><td>cpu</td>", table), (rank, role)
    for name in ("rank_times", "rank_split"):
        assert f'id="chart-{name}"' in page
        chart = client.get(reverse("dashboard:run_chart", args=[run.pk, name])).json()
        legends = " ".join(str(t.get("name", "")) + " " + " ".join(map(str, t.get("x", [])))
                           for t in chart["data"])
        for rank, role in enumerate(roles):
            named = f"rank {rank}" + ("" if role == "train+rollout" else f" {role}")
            assert named in legends, (name, named)


def test_a_two_rank_run_on_a_worker_ends_on_cancel(
        start_worker: Any, user: Any, tiny_model_dir: Path) -> None:
    """A colocated run (device and dtype left at "auto", issue 27) trains on a worker until its
    user cancels it after step 3: the cancel reaches both ranks (the driver's stop flag, read
    before every mini-batch), the run's process takes its private Ray down with them, and the
    worker goes on. (A SIGKILLed worker's distributed run and its exact resume are the split
    run's test below: the worker's kill, the reaper and the resume are the same code for both
    layouts, and tests/trainer/test_distributed.py resumes a colocated run exactly.)"""
    env = worker_env(tiny_model_dir)
    worker = start_worker("cpu", env=env)
    ps = services.create_builtin_prompt_set(user, "arith-2ranks", 64, 1, 2, 0)
    run = services.launch_run(user, "two ranks, cancelled",
                              CONFIG | {"total_steps": 40, "save_every": 10}, ps)
    wait_step(run, 3, timeout=900)
    procs, dirs = _ray_tree(worker.pid)
    assert "ray::" in " ".join(_cmd(p) for p in procs)
    services.request_cancel(run, user)
    run = wait_status(run, timeout=300)
    assert run.status == Run.Status.CANCELLED and run.error == "", (run.status, run.traceback)
    assert run.attempts == 1 and 1 <= run.current_step < 40
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, [(p.pid, p.name()) for p in alive]
    assert not _naming(dirs)
    assert worker.alive()
    assert_no_duplicates(run)
    assert_ranks_recorded_and_shown(run, user)


def test_a_split_run_killed_on_a_worker_resumes_as_train_emits(
        start_worker: Any, user: Any, tiny_model_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A train rank and a rollout rank, asynchronous (max_policy_lag 1, truncated IS), on a
    worker SIGKILLed after step 1: no rank, engine or Ray process survives it; the next worker
    resumes the run from its checkpoint to step 3. The samples that checkpoint held in flight
    are discarded and counted on the first resumed step, no row is recorded twice, every
    sample was drawn within the lag bound, and the page shows which rank trains and which
    generates. The resumed steps are, row for row, what ``train()`` in this process emits
    resuming the same config on split ranks from the same checkpoint."""
    from trainer.asyncloop import ASYNC_STATE
    from trainer.checkpoint import read_state

    env = worker_env(tiny_model_dir)
    worker = start_worker("cpu", env=env)
    ps = services.create_builtin_prompt_set(user, "arith-split", 64, 1, 2, 0)
    run = services.launch_run(user, "split ranks, killed", SPLIT, ps)
    wait_step(run, 1, timeout=900)
    # Killed once step 1's checkpoint is registered (a step's rows land before its checkpoint:
    # a kill between the two would resume from scratch, which is another test's case).
    wait_for(lambda: Checkpoint.objects.filter(run=run).exists(), 300, interval=0.2,
             what="the run's first checkpoint")
    procs, dirs = _ray_tree(worker.pid)
    names = " ".join(_cmd(p) for p in procs)
    assert "raylet" in names and "RankActor" in names, names[:2000]
    assert dirs, "the private Ray's session directory"
    worker.kill()
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, [(p.pid, p.name()) for p in alive]
    assert not _naming(dirs), "a process of the killed run's Ray session survives"
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.current_step < 3
    resume_step = max(Checkpoint.objects.filter(run=run).values_list("step", flat=True))
    ckpt = Path(Checkpoint.objects.get(run=run, step=resume_step).path)
    held = read_state(ckpt)[ASYNC_STATE]
    # The replay's own copy: the resumed run writes beside it.
    copy = tmp_path / "from-worker" / "checkpoints" / ckpt.name
    shutil.copytree(ckpt, copy)
    start_worker("cpu", env=env)
    run = wait_status(run, timeout=900)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 2 and run.current_step == 3
    assert_no_duplicates(run)
    assert_ranks_recorded_and_shown(run, user, roles=("train", "rollout"))

    # What was in flight at the checkpoint: drawn on its weights' predecessor, not yet
    # trained; discarded and counted on the first resumed step only.
    assert held["version"] == resume_step and held["inflight_samples"] > 0
    assert held["inflight_prompts"] > 0
    counted = list(Step.objects.filter(run=run).order_by("step").values_list(
        "step", "metrics__samples_inflight_discarded", "metrics__prompts_inflight_discarded"))
    assert [c[1:] for c in counted] == [
        (held["inflight_samples"], held["inflight_prompts"]) if step == resume_step + 1
        else (0, 0) for step, *_ in counted]
    # The lag bound: a sample trained at step t was drawn on version t - 1 or t - 2; none
    # after the resume on weights older than the checkpoint's.
    versions = list(Sample.objects.filter(run=run).values_list("step", "policy_version"))
    assert versions and all(v is not None and 0 <= (t - 1) - v <= 1 for t, v in versions), \
        sorted(set(versions))
    assert all(v >= resume_step for t, v in versions if t > resume_step)
    assert all(m["policy_lag_max"] <= 1 for m in Step.objects.filter(run=run).values_list(
        "metrics", flat=True))

    # train() in this process (its own private Ray, split ranks, one thread as the worker's),
    # resumed from the worker's checkpoint: the rows of the steps after it, row for row.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, "1")
    emitted = replay_as_the_worker(run, tmp_path, tiny_model_dir, monkeypatch, resume_from=copy)
    assert [s.step for s in emitted.steps] == list(range(resume_step + 1, 4))
    assert all([r.role for r in s.ranks] == ["train", "rollout"] for s in emitted.steps)
    assert_recorded_as_emitted(run, emitted, after=resume_step)


def test_the_wall_time_limit_ends_every_rank(start_worker: Any, user: Any,
                                             tiny_model_dir: Path) -> None:
    """``max_wall_seconds`` counts training only (the Ray start and the engines' build come
    before the clock); past it the run fails with the reason and both ranks are gone. The run
    is split and asynchronous (a train rank updating while the rollout rank generates the next
    samples): the limit ends both sides, the engine's tick in flight included."""
    worker = start_worker("cpu", env=worker_env(tiny_model_dir))
    ps = services.create_builtin_prompt_set(user, "arith-2ranks", 64, 1, 2, 0)
    run = services.launch_run(user, "split ranks, wall limit",
                              # Far more steps than 5 s can train on any machine (on an idle
                              # one, 40 steps of this config finished inside 15 s); the limit
                              # is short: the run waits that long for nothing else.
                              SPLIT | {"total_steps": 2000, "save_every": 10,
                                       "max_wall_seconds": 5}, ps)

    def ranks_up() -> tuple[list[psutil.Process], set[str]] | None:
        procs, dirs = _ray_tree(worker.pid)
        return (procs, dirs) if sum("RankActor" in _cmd(p) for p in procs) >= 2 else None

    procs, dirs = wait_for(ranks_up, 600, interval=1.0, what="the run's two rank actors")
    run = wait_status(run, timeout=900)
    assert run.status == Run.Status.FAILED, (run.status, run.traceback)
    assert run.error.startswith("wall-time limit reached: max_wall_seconds = 5 s; stopped "
                                f"after step {run.current_step}")
    assert run.current_step < 2000
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, [(p.pid, p.name()) for p in alive]
    assert not _naming(dirs)
    assert worker.alive()
