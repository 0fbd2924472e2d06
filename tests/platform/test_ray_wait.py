"""A distributed run on a shared Ray cluster that cannot place its ranks yet waits visibly and
can be cancelled while it waits: a real Ray head (``ray start --head``, one CPU), a real Celery
worker whose ``RAY_ADDRESS`` names it, a ``world_size = 2`` run launched through the service.
The run never trains here (it is cancelled while waiting), so no engine is built."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from api.services import create_token
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import Run, Step

from tests.fixtures.services import ROOT, wait_for
from trainer.config import TrainConfig
from workers.placement_wait import waiting_text

from .test_worker import wait_status

RAY = str(Path(sys.executable).with_name("ray"))


def test_the_runs_stop_check_reaches_the_ranks_start_only_inside_the_wait() -> None:
    """The worker's stop check (cancel, lost lease, clean shutdown) abandons the ranks' start
    as well as their placement, while the backend is built; outside, nothing is installed."""
    from trainer.distributed.placement import stop_wanted
    from workers.placement_wait import visible_wait

    cancelled = [False]
    assert not stop_wanted()
    with visible_wait(lambda: cancelled[0], lambda text: None):
        assert not stop_wanted()
        cancelled[0] = True
        assert stop_wanted()
    assert not stop_wanted()


def test_the_starts_phases_reach_the_runs_report_while_the_backend_is_built() -> None:
    """Each phase the start says (``trainer.phases``) goes to the worker's report, the one that
    writes ``Run.waiting_for`` (the real start's phases, in order: tests/trainer/
    test_distributed.py::test_the_ranks_start_says_its_phases_in_order); a repeat is not
    written again, and the text is cleared on the way out. Outside, nobody listens."""
    from trainer.phases import say_phase
    from workers.placement_wait import visible_wait

    reported: list[str] = []
    with visible_wait(lambda: False, reported.append):
        say_phase("starting Ray (a private one for this run)")
        say_phase("placing 2 ranks on the Ray cluster")
        say_phase("placing 2 ranks on the Ray cluster")
    say_phase("after the start")
    assert reported == ["starting Ray (a private one for this run)",
                        "placing 2 ranks on the Ray cluster", ""]
    # What the worker says while a one-process run builds its backend; a run across ranks
    # leaves it to the launcher's own phases.
    from workers.execution import start_phase

    assert start_phase(TrainConfig(backend="hf")) == "loading the model"
    assert start_phase(TrainConfig(backend="vllm")) == (
        "loading the model and building the vLLM engine")
    assert start_phase(TrainConfig(backend="simulated")) == ""
    assert start_phase(TrainConfig(backend="vllm", world_size=2)) == ""


def test_the_ranks_start_in_words() -> None:
    from trainer.distributed.rank_phases import READY, current_phases, start_text

    assert start_text(current_phases(2, [])) == (
        "starting 2 ranks (0 of 2 ready): starting up")
    log = [(0, "importing torch"), (1, "importing torch"), (1, "joining the process group"),
           (0, "joining the process group"), (0, "loading the model")]
    # The least advanced rank first.
    assert start_text(current_phases(2, log)) == (
        "starting 2 ranks (0 of 2 ready): rank 1 joining the process group, rank 0 loading "
        "the model")
    log += [(1, "loading the model"), (1, "building the vLLM engine"), (1, READY)]
    assert start_text(current_phases(2, log)) == (
        "starting 2 ranks (1 of 2 ready): rank 0 loading the model")
    assert start_text([READY, READY]) == "starting 2 ranks (2 of 2 ready)"
    # Many ranks are counted by phase.
    many = ["loading the model"] * 5 + ["building the vLLM engine"] * 2 + [READY]
    assert start_text(many) == ("starting 8 ranks (1 of 8 ready): 5 loading the model, "
                                "2 building the vLLM engine")


def test_waiting_text_counts_the_bundles_the_ranks_take() -> None:
    from trainer.distributed.launcher import uses_gpu

    # One rule for where the ranks run (and so which bundles the wait counts): the launcher's.
    assert not uses_gpu(TrainConfig(backend="vllm", world_size=2, device="cpu"), 8.0)
    assert uses_gpu(TrainConfig(backend="vllm", world_size=8, device="cuda"), 0.0)
    assert uses_gpu(TrainConfig(backend="vllm", world_size=8), 16.0)
    assert not uses_gpu(TrainConfig(backend="vllm", world_size=8), 0.0)
    need = {"CPU": 8, "GPU": 8}
    assert waiting_text(need, {"CPU": 40.0, "GPU": 4.0}, {"CPU": 64.0, "GPU": 6.0}) == (
        "waiting for 8 GPUs on the Ray cluster (4 free, 6 in all)")
    # A GPU bundle needs its CPU too: 2 CPUs free hold 2 ranks whatever the GPUs.
    assert waiting_text(need, {"CPU": 2.0, "GPU": 8.0}, {"CPU": 64.0, "GPU": 8.0}).startswith(
        "waiting for 8 GPUs on the Ray cluster (2 free")
    assert waiting_text(need, {"CPU": 8.0, "GPU": 8.5}, {"CPU": 8.0, "GPU": 9.0}) == ""
    assert waiting_text({"CPU": 2}, {"CPU": 1.0}, {"CPU": 1.0}) == (
        "waiting for 2 CPUs on the Ray cluster (1 free, 1 in all)")
    # A rollout/train split on role nodes: each role waits for its own nodes' GPUs.
    split = {"CPU": 8, "GPU": 8, "rada_rollout": 2, "rada_train": 6}
    roles = {"CPU": 64.0, "GPU": 8.0, "rada_rollout": 4.0, "rada_train": 4.0}
    assert waiting_text(split, roles, roles) == (
        "waiting for 6 GPUs for train ranks (nodes with rada_train) on the Ray cluster (4 free, "
        "4 in all)")
    assert waiting_text(split, roles | {"rada_rollout": 1.0}, roles).startswith(
        "waiting for 2 GPUs for rollout ranks (nodes with rada_rollout) on the Ray cluster "
        "(1 free, 4 in all)")
    assert waiting_text(split, roles | {"rada_train": 6.0}, roles) == ""
    assert waiting_text(split, roles | {"rada_train": 6.0, "GPU": 7.0}, roles).startswith(
        "waiting for 8 GPUs on the Ray cluster (7 free")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head() -> Iterator[str]:
    """A one-CPU Ray head on loopback, in a session of its own (killed as a whole at the end:
    Ray's agents outlive a plain SIGTERM of ``ray start``)."""
    port = _free_port()
    temp = ROOT / "var" / f"rw{os.getpid()}"   # short: Unix socket paths hold 107 bytes
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [RAY, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}", "--block"],
        cwd=ROOT, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0
        wait_for(listening, 90, what="the Ray head's GCS port")
        yield f"127.0.0.1:{port}"
    finally:
        session = os.getsid(head.pid)
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.pid) == session:
                    proc.send_signal(signal.SIGKILL)
            except (OSError, psutil.Error):
                pass
        head.wait(timeout=30)
        subprocess.run(["rm", "-rf", str(temp)], check=False)


@pytest.mark.slow
def test_a_run_the_cluster_cannot_place_waits_visibly_and_cancels(
        start_worker: Any, user: Any, prompt_set_factory: Any, ray_head: str) -> None:
    start_worker("cpu", env={"RAY_ADDRESS": ray_head, "RAY_USAGE_STATS_ENABLED": "0"})
    ps = prompt_set_factory(8)
    # The device left at "auto": on a cluster without GPUs the ranks need CPUs.
    run = services.launch_run(user, "two ranks", {"backend": "vllm", "world_size": 2,
                                                  "batch_size": 4,
                                                  "total_steps": 2, "eval_every": 0,
                                                  "max_wall_seconds": 1}, ps, queue="cpu")
    expected = "waiting for 2 CPUs on the Ray cluster (1 free, 1 in all)"

    def waiting() -> bool:
        run.refresh_from_db()
        assert run.status in (Run.Status.QUEUED, Run.Status.RUNNING), (run.status, run.error)
        return run.waiting_for == expected

    wait_for(waiting, 120, what="the run's waiting state")
    client = Client()
    client.force_login(user)
    page = client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert expected in page and 'id="run-waiting"' in page
    _, token = create_token(user, "test")
    api = Client().get(f"/api/v1/runs/{run.pk}",
                       headers={"Authorization": f"Bearer {token}"}).json()
    assert api["waiting_for"] == expected and api["status"] == "running"
    # Waiting is not training: past max_wall_seconds = 1 it still waits, it does not fail.
    time.sleep(3)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.waiting_for == expected
    services.request_cancel(run, user)
    run = wait_status(run, timeout=60)
    assert run.status == Run.Status.CANCELLED and run.error == ""
    assert run.waiting_for == "" and run.attempts == 1
    assert not Step.objects.filter(run=run).exists()
