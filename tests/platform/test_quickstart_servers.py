"""The quick-start servers script starts a real PostgreSQL, a real Redis broker and a bounded
Redis cache inside var/, hands their URLs and a generated SECRET_KEY to the command, and stops
them afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, os, psycopg, redis
db = psycopg.connect(os.environ["DATABASE_URL"]).execute("SELECT current_database(), version()")
name, version = db.fetchone()
pong = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).ping()
config = {name: {key: redis.Redis.from_url(os.environ[name]).config_get(key)[key]
                 for key in ("maxmemory", "maxmemory-policy")}
          for name in ("CELERY_BROKER_URL", "CACHE_URL")}
print(json.dumps({"db": name, "version": version, "pong": pong, "config": config,
                  "SECRET_KEY": os.environ["SECRET_KEY"],
                  **{k: os.environ[k] for k in ("DATABASE_URL", "CELERY_BROKER_URL",
                                                "CACHE_URL")}}))
"""


def _port_open(url: str) -> bool:
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def instance() -> Iterator[str]:
    name = f"pytest-{uuid.uuid4().hex[:8]}"
    yield name
    shutil.rmtree(ROOT / "var" / name, ignore_errors=True)


def test_exec_starts_and_stops_real_servers(instance: str, tmp_path: Path) -> None:
    import json
    import stat

    key_file = tmp_path / "secret-key"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "SECRET_KEY")}
    env["SECRET_KEY_FILE"] = str(key_file)
    out = subprocess.run([sys.executable, "scripts/services.py", "exec", "--instance", instance,
                          "--fast", "--", sys.executable, "-c", PROBE], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["db"] == "rada" and info["version"].startswith("PostgreSQL") and info["pong"]
    assert (ROOT / "var" / instance / "pgdata" / "PG_VERSION").exists()
    # The cache is a Redis of its own, bounded, evicting least recently used keys; the broker
    # is unbounded and never evicts (a lost queue entry is a lost run).
    assert info["CACHE_URL"] != info["CELERY_BROKER_URL"]
    assert info["config"]["CACHE_URL"] == {"maxmemory": str(128 * 2**20),
                                           "maxmemory-policy": "allkeys-lru"}
    assert info["config"]["CELERY_BROKER_URL"] == {"maxmemory": "0",
                                                   "maxmemory-policy": "noeviction"}
    # A secret key of its own, generated once (mode 600) and kept for the next start.
    assert key_file.read_text().strip() == info["SECRET_KEY"] and len(info["SECRET_KEY"]) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert "SECRET_KEY=" not in out.stderr  # never printed
    # Stopped on exit: nothing listens any more, and the cluster has no live postmaster.
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"):
        assert not _port_open(info[name]), name
    assert not (ROOT / "var" / instance / "pgdata" / "postmaster.pid").exists()


def test_exec_passes_exit_status_and_uses_given_servers(instance: str) -> None:
    env = {**os.environ, "DATABASE_URL": "postgres://given/db",
           "CELERY_BROKER_URL": "redis://given:1/0"}
    out = subprocess.run([sys.executable, "scripts/services.py", "exec", "--instance", instance,
                          "--", sys.executable, "-c",
                          "import os, sys; print(os.environ['DATABASE_URL']); sys.exit(3)"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert out.stdout.strip() == "postgres://given/db"
    assert not (ROOT / "var" / instance / "pgdata").exists()  # nothing was started


def test_sigterm_stops_command_and_servers(instance: str, tmp_path: Path) -> None:
    import signal
    import time

    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    urls = tmp_path / "urls"
    wrapper = subprocess.Popen(
        [sys.executable, "scripts/services.py", "exec", "--instance", instance, "--fast", "--",
         sys.executable, "-c", "import os, time; open(os.environ['OUT'], 'w').write("
         "os.environ['DATABASE_URL'] + ' ' + os.environ['CELERY_BROKER_URL']); time.sleep(600)"],
        cwd=ROOT, env=env | {"OUT": str(urls)}, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (urls.exists() and urls.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    db_url, broker_url = urls.read_text().split()
    assert _port_open(db_url) and _port_open(broker_url)
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(120) == 128 + signal.SIGTERM
    assert not _port_open(db_url) and not _port_open(broker_url)


HOLD = """
import os, pathlib, sys, time
import psycopg
out = pathlib.Path(os.environ["OUT"])
out.write_text(os.environ["DATABASE_URL"])
while not (out.parent / "release").exists():
    time.sleep(0.2)
# Still serving after the attached command ended: the rows it wrote are here.
with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
    print(conn.execute("SELECT count(*) FROM attached_rows").fetchone()[0])
"""
WRITE = """
import os, psycopg
with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
    conn.execute("CREATE TABLE attached_rows (x int)")
    conn.execute("INSERT INTO attached_rows VALUES (1), (2)")
print(os.environ["DATABASE_URL"])
"""


def test_a_command_beside_a_running_instance_attaches_and_stops_nothing(
        instance: str, tmp_path: Path) -> None:
    """Issue 19: with `make run` up, `services.py exec --instance dev -- manage.py import_run`
    took the live PostgreSQL for a leftover and stopped it. A second exec of the same instance
    runs its command against the running servers and leaves them serving."""
    import time

    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")}
    url_file = tmp_path / "url"
    holder = subprocess.Popen(
        [sys.executable, "scripts/services.py", "exec", "--instance", instance, "--fast", "--",
         sys.executable, "-c", HOLD], cwd=ROOT, env=env | {"OUT": str(url_file)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (url_file.exists() and url_file.read_text()) and time.monotonic() < deadline:
            assert holder.poll() is None, holder.communicate()
            time.sleep(0.2)
        db_url = url_file.read_text()
        second = subprocess.run(
            [sys.executable, "scripts/services.py", "exec", "--instance", instance, "--fast",
             "--", sys.executable, "-c", WRITE], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == db_url  # the same server, not a new one
        assert "attached to instance" in second.stderr
        assert _port_open(db_url)  # still serving
        (tmp_path / "release").touch()
        out, err = holder.communicate(timeout=120)
        assert holder.returncode == 0, err
        assert out.strip() == "2"
    finally:
        if holder.poll() is None:
            holder.kill()
    assert not _port_open(db_url)  # the exec that started it stopped it


def test_a_postgres_no_exec_owns_is_refused_not_stopped(instance: str) -> None:
    """A PostgreSQL running on the instance's folder without a record of the exec that started
    it (started by hand, or by an older services.py) may be serving: exec refuses to touch it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from services import Postgres

    pg = Postgres(ROOT / "var" / instance / "pgdata", fast=True)
    url = pg.start()
    try:
        env = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")}
        out = subprocess.run(
            [sys.executable, "scripts/services.py", "exec", "--instance", instance, "--fast",
             "--", sys.executable, "-c", "print('ran')"], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and "ran" not in out.stdout
        assert "no `services.py exec`" in out.stderr and "left alone" in out.stderr
        assert _port_open(url)
    finally:
        pg.stop()
