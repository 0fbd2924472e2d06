"""`python manage.py demo` (what `make run` runs): a real gunicorn and a real worker against the
test database, the demo pair executed, everything stopped on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from experiments.models import PromptSet, Run

from tests.fixtures.services import ROOT, wait_for, worker_database_url


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except urllib.error.URLError as exc:
        # The demo prints its address as it starts gunicorn; on a busy machine the server binds
        # a few seconds later: nothing listening yet is "not healthy yet", not a failure.
        if isinstance(exc.reason, ConnectionRefusedError):
            return 0, b""
        raise


def test_demo_serves_executes_and_stops_on_ctrl_c(transactional_db: None, broker_url: str,
                                                  tmp_path: Path, free_tcp_port: int) -> None:
    pytest.importorskip("trainer.tasks", reason="trainer.tasks (built-in task) not on main yet")
    # As a suite started in the background runs it: SIGINT ignored by the parent. The demo
    # must stop on Ctrl-C all the same.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = {**os.environ, "DATABASE_URL": worker_database_url(), "CELERY_BROKER_URL": broker_url,
           "CHECKPOINT_ROOT": str(tmp_path / "ckpt"), "RADA_LOG_DIR": str(tmp_path / "logs"),
           "RADA_ADMIN_PASSWORD_FILE": str(tmp_path / "admin-password")}
    out = open(tmp_path / "demo.out", "w+b")
    proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--backend", "simulated",
                             "--steps", "3", "--port", str(free_tcp_port)], cwd=ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT)
    signal.signal(signal.SIGINT, previous)
    try:
        def printed(text: str) -> Any:
            assert proc.poll() is None, (tmp_path / "demo.out").read_text()
            return text in (tmp_path / "demo.out").read_text()

        wait_for(lambda: printed("Ctrl-C stops everything"), 240, what="the demo to start")
        text = (tmp_path / "demo.out").read_text()
        password = (tmp_path / "admin-password").read_text().strip()
        assert f"admin / {password}" in text
        url = f"http://127.0.0.1:{free_tcp_port}/"
        assert url in text

        def healthy() -> Any:
            status, body = get(url + "healthz")
            return status == 200 and json.loads(body)["workers"]["cpu"] >= 1

        wait_for(healthy, 120, what="/healthz to count the worker")
        assert get(url + "login/")[0] == 200
        assert get(url + "static/admin/css/base.css")[0] == 200  # WhiteNoise, collected
        assert PromptSet.objects.filter(source="builtin").count() == 2
        runs = Run.objects.filter(name__startswith="demo")
        assert sorted(runs.values_list("algorithm", flat=True)) == ["ada-balance", "grpo"]
        assert len(set(runs.values_list("seed", flat=True))) == 1
        wait_for(lambda: all(r.status in ("succeeded", "failed") for r in Run.objects.filter(
            name__startswith="demo")), 240, what="the demo runs to finish")
        for run in Run.objects.filter(name__startswith="demo"):
            assert run.status == "succeeded", run.traceback
            assert run.current_step == 3
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2
    finally:
        # Its web server and worker run in sessions of their own: a demo that does not stop
        # must not leave them behind (a stray worker would take later tests' runs).
        spawned = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            for child in spawned:
                if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                    child.kill()
    assert code == 0, (tmp_path / "demo.out").read_text()
    assert "== stopped" in (tmp_path / "demo.out").read_text()
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)


def test_a_port_left_in_time_wait_is_reused_and_a_listened_one_is_not() -> None:
    """Ctrl-C leaves the stopped server's connections in TIME_WAIT: the restart must get the
    same port (it used to move to the next one, breaking a saved `rada login` address), while a
    port another process listens on is still skipped."""
    import socket
    import time

    from experiments.management.commands.demo import port_free

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert not port_free("127.0.0.1", port)  # listened on
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the connection is in TIME_WAIT
    time.sleep(0.2)
    client.close()
    server.close()
    plain = socket.socket()
    try:
        plain.bind(("127.0.0.1", port))
        in_time_wait = False
    except OSError:
        in_time_wait = True
    finally:
        plain.close()
    assert in_time_wait, "no TIME_WAIT here: the case this test is about did not arise"
    assert port_free("127.0.0.1", port)


def test_the_demo_pair_is_launched_once_per_database(db: None) -> None:
    """`make run` on a database that has its demo pair shows it instead of queuing another on
    every start; --new-demo-runs asks for another."""
    import io

    from django.contrib.auth.models import User
    from experiments.management.commands.demo import Command

    admin = User.objects.create_superuser("admin-demo", "", "x-123456")
    command = Command(stdout=io.StringIO())
    train_set, eval_set = command.ensure_prompt_sets(admin)
    opts = {"backend": "simulated", "batch_size": 4, "steps": 2}
    first = command.launch_demo_pair(admin, train_set, eval_set, opts)
    assert sorted(r.algorithm for r in first) == ["ada-balance", "grpo"]
    Run.objects.filter(pk__in=[r.pk for r in first]).update(status=Run.Status.SUCCEEDED)
    assert command.launch_demo_pair(admin, train_set, eval_set, opts) == []
    assert "launched on an earlier start" in command.stdout.getvalue()
    assert Run.objects.filter(name__startswith="demo ").count() == 2
    again = command.launch_demo_pair(admin, train_set, eval_set, {**opts, "new_demo_runs": True})
    assert len(again) == 2 and Run.objects.filter(name__startswith="demo ").count() == 4


def test_the_demo_stores_the_clis_built_in_sets(db: None) -> None:
    """One definition of the built-in training and held-out sets: the demo stores exactly what
    the CLI's builtin:arithmetic trains and evaluates on, and finds them again by contents."""
    import io

    from django.contrib.auth.models import User
    from experiments.management.commands.demo import EVAL_SET, Command

    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts

    admin = User.objects.create_superuser("admin-sets", "", "x-123456")
    command = Command(stdout=io.StringIO())
    train_set, eval_set = command.ensure_prompt_sets(admin)
    train, heldout = resolve_prompts(TrainConfig())
    for ps, prompts in ((train_set, train), (eval_set, heldout)):
        stored = list(ps.prompts.order_by("index").values_list("text", "answer"))
        assert stored == [(p.text, p.answer) for p in prompts]
    assert eval_set.name == EVAL_SET and "1-3 digits" in eval_set.name
    assert not {p.text for p in heldout} & {p.text for p in train}
    assert command.ensure_prompt_sets(admin) == (train_set, eval_set)
    assert PromptSet.objects.count() == 2
