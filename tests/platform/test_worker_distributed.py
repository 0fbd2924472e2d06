"""A ``world_size = 2`` run through the platform: launched through the service layer, executed
by a real Celery worker that has no ``RAY_ADDRESS`` (so the run's process starts a private local
Ray of two CPUs, with its reaper), two gloo FSDP2 ranks each with a real vLLM CPU engine.

Slow: every worker run starts its own Ray, two rank actors and two engines (half a minute to
a minute and a half each on 2 shared cores); so the module runs as few as its checks allow:
four sets of ranks (a run cancelled after its third step, which is also the uninterrupted run
the killed one is compared with; a run killed and resumed, two; the wall-time run). That the
rows a 2-rank run records are what ``train()`` emits on the same ranks is the trainer's tests'
(tests/trainer/test_distributed.py) and the one-rank worker's (tests/platform/test_worker.py);
here the killed and resumed run must record, row for row, what the uninterrupted one did.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import PromptStep, RoundStat, Run, Sample, Step

from tests.fixtures.services import wait_for
from tests.fixtures.vllm import TEST_KV_CACHE_GIB, requires_vllm
from tests.platform.test_worker import (
    assert_no_duplicates,
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


def worker_env(model_dir: Path) -> dict[str, str]:
    from trainer.model import MODEL_DIR_ENV

    # No RAY_ADDRESS: the run's process starts a private Ray of its own.
    return {MODEL_DIR_ENV: str(model_dir), "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "RUN_MAX_ATTEMPTS": "5"}


def assert_same_records(run: Run, reference: Run, steps: int) -> None:
    """``run``'s first ``steps`` steps record what ``reference`` recorded for them, row for row
    (timings aside; floats within pytest.approx's 1e-6: two runs of one config on the same
    ranks' arithmetic)."""
    for step in range(1, steps + 1):
        a, b = (Step.objects.get(run=r, step=step) for r in (run, reference))
        metrics = {k: v for k, v in b.metrics.items() if not k.startswith("time_")}
        assert {k: v for k, v in a.metrics.items() if not k.startswith("time_")} == \
            pytest.approx(metrics, nan_ok=True), step
        for model, key, exact, close in (
                (RoundStat, ("round",), ("round", "active_prompts", "samples", "positives",
                                        "finished", "tokens"), ()),
                (PromptStep, ("prompt_id",), ("prompt_id", "samples", "positives", "negatives",
                                              "rounds", "exit_round", "missing",
                                              "kept_positives", "kept_negatives"),
                 ("baseline",)),
                (Sample, ("prompt_id", "index"), ("prompt_id", "index", "round", "response",
                                                  "reward", "kept"), ("advantage",))):
            rows = [list(model.objects.filter(run=r, step=step).order_by(*key)
                         .values_list(*exact, *close)) for r in (run, reference)]
            assert len(rows[0]) == len(rows[1]) > 0, (model.__name__, step)
            for x, y in zip(*rows, strict=True):
                assert x[:len(exact)] == y[:len(exact)], (model.__name__, step)
                assert list(x[len(exact):]) == pytest.approx(list(y[len(exact):])), step


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


def assert_ranks_recorded_and_shown(run: Run, user: Any) -> None:
    """Every step carries both ranks (where they ran and their seconds); the run page says
    where the run ran and charts each rank."""
    for step in Step.objects.filter(run=run):
        assert [r["rank"] for r in step.ranks] == [0, 1]
        for r in step.ranks:
            assert r["device"] == "cpu" and r["node"]
            assert r["generation_s"] > 0 and r["update_s"] > 0 and r["weight_gather_s"] > 0
    client = Client()
    client.force_login(user)
    page = client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    table = page[page.index('id="run-placement"'):page.index("</table>", page.index(
        'id="run-placement"'))]
    assert "2 ranks on 1 node" in table
    assert re.search(r"<td>0</td><td>[^<]+</td><td>cpu</td>", table)
    assert re.search(r"<td>1</td><td>[^<]+</td><td>cpu</td>", table)
    for name in ("rank_times", "rank_split"):
        assert f'id="chart-{name}"' in page
        chart = client.get(reverse("dashboard:run_chart", args=[run.pk, name])).json()
        legends = " ".join(str(t.get("name", "")) + " " + " ".join(map(str, t.get("x", [])))
                           for t in chart["data"])
        assert "rank 0" in legends and "rank 1" in legends, name


def test_two_rank_runs_on_a_worker_end_on_cancel_and_resume_a_sigkill_exactly(
        start_worker: Any, user: Any, tiny_model_dir: Path) -> None:
    """Two runs of one config (device and dtype left at "auto", issue 27) on the same prompts.
    Run A trains uninterrupted on a worker until its user cancels it after step 3: the cancel
    reaches both ranks (the driver's stop flag, read before every mini-batch), the run's
    process takes its private Ray down with them, and the worker goes on. Run B has its worker
    SIGKILLed after step 1 (no rank, engine or Ray process survives it) and is resumed by the
    next worker to its last step, 3: its rows are run A's, row for row. Every worker run starts
    its own Ray, two rank actors and two engines, so the uninterrupted run and the cancelled
    one are one run."""
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

    # B: SIGKILL of the worker mid-run. No rank, engine or Ray process survives it.
    killed = services.launch_run(user, "two ranks, killed", CONFIG, ps)
    wait_step(killed, 1, timeout=900)
    procs, dirs = _ray_tree(worker.pid)
    names = " ".join(_cmd(p) for p in procs)
    assert "raylet" in names and "RankActor" in names, names[:2000]
    assert dirs, "the private Ray's session directory"
    worker.kill()
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, [(p.pid, p.name()) for p in alive]
    assert not _naming(dirs), "a process of the killed run's Ray session survives"
    start_worker("cpu", env=env)
    killed = wait_status(killed, timeout=900)
    assert killed.status == Run.Status.SUCCEEDED, killed.traceback
    assert killed.attempts == 2 and killed.current_step == 3
    assert_no_duplicates(killed)
    assert_ranks_recorded_and_shown(killed, user)

    # The killed run, resumed from its checkpoint on new ranks, recorded what the
    # uninterrupted run recorded for the same steps (what a step records does not depend on
    # total_steps or save_every).
    assert_same_records(killed, run, 3)


def test_the_wall_time_limit_ends_every_rank(start_worker: Any, user: Any,
                                             tiny_model_dir: Path) -> None:
    """``max_wall_seconds`` counts training only (the Ray start and the engines' build come
    before the clock); past it the run fails with the reason and both ranks are gone."""
    worker = start_worker("cpu", env=worker_env(tiny_model_dir))
    ps = services.create_builtin_prompt_set(user, "arith-2ranks", 64, 1, 2, 0)
    run = services.launch_run(user, "two ranks, wall limit",
                              # Far more steps than 5 s can train on any machine (on an idle
                              # one, 40 steps of this config finished inside 15 s); the limit
                              # is short: the run waits that long for nothing else.
                              CONFIG | {"total_steps": 2000, "save_every": 10,
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
