"""Fault drills with figures (issue 10): real Celery workers, a real PostgreSQL and Redis, the
simulated backend paced by the lifecycle tests' hook. It measures and reports; it asserts nothing
(the suite's short drills in tests/platform/test_fault_drills.py assert).

    python scripts/services.py exec --instance drills -- \\
        python benchmarks/fault_drills.py [--kills 10] [--readers 50] [--seconds 30]

Servers: the ones ``scripts/services.py`` starts under ``var/drills/`` (this script restarts
them: never point it at servers that matter). Drills, each on a fresh run of the same config:

1. kills: one run, its worker SIGKILLed ``--kills`` times at random moments (a new worker starts
   after each kill); its step, round, prompt-step and sample rows against those of an
   uninterrupted run with the same seed (metrics without timings, every row, duplicates, gaps);
2. redis: the broker killed (no persistence: queued messages are lost) and started again on the
   same port mid-run, with a second run waiting on the queue;
3. postgres: the database restarted mid-run (``pg_ctl restart``) while gunicorn serves the
   dashboard; the run completes and the web app answers again without a restart;
4. poison: a run whose backend SIGKILLs its own process ends failed after RUN_MAX_ATTEMPTS and
   the worker takes the next run;
5. load: ``--readers`` concurrent dashboard readers on loopback for ``--seconds`` while a run
   records: p50/p95 latency, errors, and the recorder's ingest rate (sample rows per second)
   against the same run recorded with no readers;
6. outage: the postmaster and its backends SIGKILLed (kill -9, no shutdown) mid-run and the
   database left down for ``--outage-seconds`` (default: past the recorder's retry window,
   RUN_RECONNECT_SECONDS), then started again; the run's rows against an uninterrupted run's,
   its attempts (an outage costs none) and /healthz during the outage (503) and after;
7. restarts: the worker shut down cleanly (SIGTERM, as ``make run``'s Ctrl-C and docker stop
   do) ``--restarts`` times during one run, a new worker started after each; rows against an
   uninterrupted run's, attempts, and the page's "interrupted, waiting to resume".

As hard as a default deployment (issue 19): ``--backend hf`` trains the built-in tiny model
(real transformers, no pacing hook), and ``--default-lease`` keeps the default lease
(RUN_LEASE_TIMEOUT_SECONDS 60) instead of the drills' 4 s:

    python scripts/services.py exec --instance drills -- python benchmarks/fault_drills.py \\
        --only outage,restarts --backend hf --default-lease --steps 12
    python scripts/services.py exec --instance drills -- python benchmarks/fault_drills.py \\
        --only kills,redis,postgres,poison,load --backend hf --default-lease --kills 5 --seconds 60

(the built-in model from ``TRAINER_BUILTIN_MODEL_DIR``; figures in docs/reliability.md).
``--proxied`` puts the production path's nginx (Debian's, with deploy/nginx/rada.conf.template)
in front of gunicorn, so the postgres, load, outage and restarts drills read through it.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "platform"), str(ROOT / "scripts")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

HOOK = "tests.platform.worker_hooks:paced"
USER, PASSWORD = "drills", "drills-password-1"
WORKER_ENV = {"RUN_LEASE_TIMEOUT_SECONDS": "4", "RUN_HEARTBEAT_SECONDS": "0.5",
              "RADA_BACKEND_HOOK": HOOK, "PYTHONUNBUFFERED": "1"}
SIM = {"backend": "simulated", "algorithm": "ada-balance", "batch_size": 16, "group_size": 4,
       "samples_per_round": 4, "max_rounds": 3, "eval_every": 0, "seed": 11, "save_every": 2}
LOG_DIR = ROOT / "var" / "drills" / "logs"
# --backend hf: the built-in tiny model on the CPU (its learning rate: docs/architecture.md).
HF = {"backend": "hf", "model": "builtin:tiny", "device": "cpu", "lr": 2e-4, "batch_size": 8,
      "max_new_tokens": 6}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


WORKERS: list[Any] = []  # every worker started, stopped at the end whatever happens

# --- processes ----------------------------------------------------------------------------------

def start_worker(env: dict[str, str]) -> Any:
    """A real worker on the cpu queue with the drills' lease settings (the tests' process
    wrapper: log, alive, kill, stop)."""
    from tests.fixtures.services import spawn_worker

    name = f"drill-{uuid.uuid4().hex[:6]}"
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    worker = spawn_worker(name, "cpu", LOG_DIR / f"{name}.log",
                          {**os.environ, **WORKER_ENV, **env})
    WORKERS.append(worker)
    return worker


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - a server being restarted
            value = None
            from django.db import connection

            connection.close()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


# --- runs ---------------------------------------------------------------------------------------

def setup() -> tuple[Any, Any]:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User
    from experiments import services
    from experiments.models import PromptSet

    user = User.objects.filter(username=USER).first() or User.objects.create_user(
        USER, password=PASSWORD, is_staff=True)
    ps = PromptSet.objects.filter(name="drills").first()
    if ps is None:
        from trainer.types import Prompt

        prompts = [Prompt(id=str(i), text=f"{i}+1=", answer=str(i + 1)[::-1],
                          metadata={"pass_rate": (i % 10) / 10}) for i in range(64)]
        ps = services.import_prompt_set(owner=user, name="drills", prompts=prompts)
    return user, ps


def launch(user: Any, ps: Any, name: str, **config: Any) -> Any:
    from experiments import services

    return services.launch_run(user, f"{name} {uuid.uuid4().hex[:4]}",
                               SIM | BACKEND | config, ps)


BACKEND: dict[str, Any] = {}  # HF under --backend hf


def status(run: Any) -> str:
    run.refresh_from_db()
    return run.status


def wait_done(run: Any, timeout: float = 900) -> Any:
    wait_until(lambda: status(run) in ("succeeded", "failed", "cancelled"), timeout,
               f"run {run.pk} to finish")
    return run


def rows(run: Any) -> dict[str, list[tuple]]:
    """Every record of a run, keyed without the run id, timings left out."""
    from experiments.models import PromptStep, RoundStat, Sample, Step

    steps = [(s.step, {k: v for k, v in s.metrics.items() if not k.startswith("time_")},
              s.real_reward, s.samples) for s in Step.objects.filter(run=run).order_by("step")]
    rounds = list(RoundStat.objects.filter(run=run).order_by("step", "round").values_list(
        "step", "round", "active_prompts", "samples", "positives", "finished"))
    prompts = list(PromptStep.objects.filter(run=run).order_by("step", "prompt_id").values_list(
        "step", "prompt_id", "samples", "positives", "negatives", "rounds", "exit_round",
        "kept_positives", "kept_negatives", "baseline"))
    samples = list(Sample.objects.filter(run=run).order_by("step", "prompt_id", "index")
                   .values_list("step", "prompt_id", "index", "round", "response", "reward",
                                "kept", "advantage"))
    return {"steps": steps, "rounds": rounds, "prompt-steps": prompts, "samples": samples}


def duplicates_and_gaps(run: Any, total: int) -> tuple[int, list[int]]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) - count(DISTINCT (step, prompt_id, index)) "
                    "FROM experiments_sample WHERE run_id = %s", [run.pk])
        dup = cur.fetchone()[0]
        cur.execute("SELECT step FROM experiments_step WHERE run_id = %s", [run.pk])
        have = {r[0] for r in cur.fetchall()}
    return dup, [s for s in range(1, total + 1) if s not in have]


# --- drills -------------------------------------------------------------------------------------

def drill_kills(user: Any, ps: Any, kills: int, rng: random.Random, steps: int = 60
                ) -> dict[str, Any]:
    env = {"RADA_TEST_GENERATE_SLEEP": "0.05", "RUN_MAX_ATTEMPTS": str(kills + 5)}
    log("kills: the uninterrupted reference run")
    ref = launch(user, ps, "reference", total_steps=steps)
    w = start_worker(env)
    t0 = time.monotonic()
    wait_done(ref)
    ref_seconds = time.monotonic() - t0
    w.stop()
    run = launch(user, ps, "killed", total_steps=steps)
    t0 = time.monotonic()
    done = 0
    while done < kills and status(run) not in ("succeeded", "failed"):
        w = start_worker(env)
        # Up to a lease timeout (60 s by default) for the killed worker's lease to expire, and a
        # worker start (a model load under --backend hf).
        wait_until(lambda w=w: status(run) == "running"
                   and f"run {run.pk}: lease taken" in w.log(), 300, "a worker to take the run")
        # A random moment once this worker has recorded a step (its resume replays from the
        # checkpoint: killing it before it records anything would only repeat that).
        run.refresh_from_db()
        taken_at = run.current_step
        wait_until(lambda t=taken_at: run.refresh_from_db() or run.current_step > t
                   or run.status != "running", 120, "a step on this worker")
        time.sleep(rng.uniform(0.0, 2.0))
        if status(run) != "running":
            w.stop()
            break
        w.kill()
        done += 1
        run.refresh_from_db()
        log(f"kills: SIGKILL {done}/{kills} at step {run.current_step}")
    w = start_worker(env)
    wait_done(run)
    seconds = time.monotonic() - t0
    w.stop()
    a, b = rows(ref), rows(run)
    dup, gaps = duplicates_and_gaps(run, steps)
    return {"kills": done, "status": run.status, "attempts": run.attempts,
            "equal": {k: a[k] == b[k] for k in a}, "rows": {k: len(v) for k, v in b.items()},
            "duplicates": dup, "gaps": gaps, "seconds": seconds, "reference_seconds": ref_seconds}


def drill_redis(user: Any, ps: Any) -> dict[str, Any]:
    from services import _redis_bin

    url = os.environ["CELERY_BROKER_URL"]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    w = start_worker({"RADA_TEST_GENERATE_SLEEP": "0.05"})
    first = launch(user, ps, "redis-training", total_steps=30)
    second = launch(user, ps, "redis-waiting", total_steps=4)
    wait_until(lambda: first.refresh_from_db() or first.current_step >= 3, 300, "step 3")
    pid = _listening_pid(port)
    os.kill(pid, signal.SIGKILL)
    log(f"redis: broker (pid {pid}) killed at step {first.current_step}")
    time.sleep(2)
    redis = subprocess.Popen(
        [_redis_bin(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(ROOT / "var" / "drills")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    wait_done(first)
    wait_done(second)
    out = {"first": first.status, "second": second.status,
           "seconds_to_both_done_after_restart": time.monotonic() - t0,
           "duplicates": duplicates_and_gaps(first, 30)[0] + duplicates_and_gaps(second, 4)[0]}
    w.stop()
    _STARTED.append(redis)
    return out


_STARTED: list[subprocess.Popen[bytes]] = []


def _listening_pid(port: int) -> int:
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True)
    match = re.search(r"pid=(\d+)", out.stdout)
    if not match:
        raise RuntimeError(f"nothing listens on port {port}")
    return int(match.group(1))


def drill_postgres(user: Any, ps: Any, base: str) -> dict[str, Any]:
    from django.db import connection
    from services import Postgres, _pg_bin

    datadir = ROOT / "var" / "drills" / "pgdata"
    w = start_worker({"RADA_TEST_GENERATE_SLEEP": "0.05"})
    run = launch(user, ps, "pg-restart", total_steps=30)
    wait_until(lambda: run.refresh_from_db() or run.current_step >= 3, 300, "step 3")
    web = Reader(base)
    before = web.status("/healthz")
    connection.close()
    t0 = time.monotonic()
    Postgres(datadir, fast=True)._call([_pg_bin("pg_ctl"), "-D", str(datadir), "-l",
                                        str(datadir / "server.log"), "-m", "fast", "-w", "-t",
                                        "60", "restart"])
    restart = time.monotonic() - t0
    log(f"postgres: restarted in {restart:.1f} s")
    statuses = []
    for _ in range(20):
        statuses.append(web.status("/healthz"))
        if statuses[-1] == 200:
            break
        time.sleep(0.5)
    wait_done(run)
    w.stop()
    dup, gaps = duplicates_and_gaps(run, 30)
    return {"status": run.status, "healthz_before": before, "healthz_after": statuses,
            "restart_seconds": restart, "duplicates": dup, "gaps": gaps}


def drill_poison(user: Any, ps_poison: Any, ps: Any) -> dict[str, Any]:
    # The hook that kills the run process at its 2nd generate call, whatever the backend (it
    # wraps the hf backend too; with no pacing it changes nothing else).
    w = start_worker({"RADA_BACKEND_HOOK": HOOK})
    run = launch(user, ps_poison, "poison", total_steps=5)
    t0 = time.monotonic()
    wait_done(run)
    seconds = time.monotonic() - t0
    nxt = launch(user, ps, "after-poison", total_steps=2)
    wait_done(nxt)
    out = {"status": run.status, "attempts": run.attempts, "error": run.error,
           "seconds": seconds, "worker_alive": w.alive(), "next_run": nxt.status}
    w.stop()
    return out


class Reader:
    def __init__(self, base: str, jar: http.cookiejar.CookieJar | None = None) -> None:
        self.base = base
        self.jar = jar if jar is not None else http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> int:
        try:
            with self.opener.open(self.base + path, timeout=30) as resp:
                resp.read()
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def status(self, path: str) -> int:
        try:
            return self.get(path)
        except OSError:
            return 0

    def login(self) -> None:
        with self.opener.open(self.base + "/login/", timeout=30) as resp:
            body = resp.read()
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', body).group(1).decode()
        data = urllib.parse.urlencode({"username": USER, "password": PASSWORD,
                                       "csrfmiddlewaretoken": token}).encode()
        req = urllib.request.Request(self.base + "/login/", data=data,
                                     headers={"Referer": self.base + "/login/"})
        with self.opener.open(req, timeout=30) as resp:
            if "/login/" in resp.url:
                raise RuntimeError("sign-in failed")


def ingest_rate(run: Any, since: Any = None, until: Any = None) -> float:
    """Sample rows recorded per second between the first and the last step recorded within
    [since, until] (the whole run by default)."""
    from experiments.models import Step

    steps = Step.objects.filter(run=run)
    if since is not None:
        steps = steps.filter(created_at__gte=since, created_at__lte=until)
    stamps = list(steps.order_by("step").values_list("created_at", "samples"))
    if len(stamps) < 2:
        return 0.0
    span = (stamps[-1][0] - stamps[0][0]).total_seconds()
    return sum(s for _, s in stamps[1:]) / span if span > 0 else 0.0


def drill_load(user: Any, ps: Any, base: str, readers: int, seconds: float,
               think: float) -> dict[str, Any]:
    # No pacing: the recorder's ingest is what the readers compete with. Under --backend hf a
    # step trains the model on the CPU (seconds, not milliseconds), so fewer, smaller steps.
    config = {"total_steps": 400, "batch_size": 32, "samples_per_round": 8, "max_rounds": 4,
              "save_every": 0}
    idle_steps, warm_steps = 120, 5
    if BACKEND:
        config["batch_size"] = BACKEND["batch_size"]
        idle_steps, warm_steps = 20, 2
    w = start_worker({})
    idle = launch(user, ps, "ingest-idle", **config | {"total_steps": idle_steps})
    wait_done(idle)
    busy = launch(user, ps, "ingest-busy", **config)
    wait_until(lambda: busy.refresh_from_db() or busy.current_step >= warm_steps, 300,
               f"step {warm_steps}")
    paths = ["/", f"/runs/{busy.pk}/", f"/runs/{busy.pk}/status/",
             f"/runs/{busy.pk}/charts/rewards.json", f"/runs/{busy.pk}/charts/budget.json",
             f"/runs/{idle.pk}/charts/heatmap.json", f"/compare/?runs={idle.pk}&runs={busy.pk}"]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    # One sign-in shared by the readers (its session cookie): 50 password hashes (PBKDF2, about
    # a second of CPU each here) would be the whole measurement otherwise.
    signed_in = Reader(base)
    signed_in.login()

    def reader(i: int) -> None:
        jar = http.cookiejar.CookieJar()
        for cookie in signed_in.jar:
            jar.set_cookie(cookie)
        r = Reader(base, jar)
        rng = random.Random(i)
        time.sleep(rng.uniform(0, think))  # readers arrive spread over one think time
        while time.monotonic() < stop_at:
            path = rng.choice(paths)
            t0 = time.perf_counter()
            try:
                code = r.get(path)
            except Exception as exc:  # noqa: BLE001 - counted
                code, detail = 0, str(exc)
            else:
                detail = str(code)
            with lock:
                latencies.append((time.perf_counter() - t0) * 1000)
                if code != 200:
                    errors.append(f"{path}: {detail}")
            time.sleep(think)  # a browser's poll interval, not a request loop

    from django.utils import timezone

    since = timezone.now()
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy_rate_window = ingest_rate(busy, since, timezone.now())
    from experiments import services

    services.request_cancel(busy, user)
    wait_done(busy)
    w.stop()
    latencies.sort()
    return {"readers": readers, "seconds": seconds, "think_s": think,
            "requests": len(latencies),
            "p50_ms": statistics.median(latencies) if latencies else None,
            "p95_ms": latencies[int(0.95 * (len(latencies) - 1))] if latencies else None,
            "errors": len(errors), "error_examples": errors[:5],
            "ingest_idle_rows_per_s": ingest_rate(idle),
            "ingest_busy_rows_per_s": busy_rate_window,
            "ingest_ratio": busy_rate_window / max(ingest_rate(idle), 1e-9)}


def gunicorn(port: int, workers: int, proxied: bool = False) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEBUG": "0", "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}"}
    if proxied:  # as docker-compose.yml sets it for the web container behind its nginx
        env["NUM_PROXIES"] = "1"
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT,
                   env=env, check=True)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--threads", "4", "--log-level", "warning",
         "--error-logfile", str(LOG_DIR / "gunicorn.log")],
        cwd=ROOT, env=env, start_new_session=True)


def _pgdata() -> Path:
    return ROOT / "var" / "drills" / "pgdata"


def drill_outage(user: Any, ps: Any, base: str, steps: int, outage: float) -> dict[str, Any]:
    """kill -9 of the postmaster and its backends, the database down ``outage`` seconds."""
    from django.db import connection
    from services import Postgres, _pg_bin

    datadir = _pgdata()
    log("outage: the uninterrupted reference run")
    w = start_worker({})
    ref = launch(user, ps, "outage-reference", total_steps=steps)
    t0 = time.monotonic()
    wait_done(ref)
    ref_seconds = time.monotonic() - t0
    run = launch(user, ps, "outage", total_steps=steps)
    t0 = time.monotonic()
    wait_until(lambda: run.refresh_from_db() or run.current_step >= 3, 600, "step 3")
    at_step = run.current_step
    web = Reader(base)
    postmaster = int((datadir / "postmaster.pid").read_text().split()[0])
    backends = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                              text=True).stdout.split()
    connection.close()
    os.kill(postmaster, signal.SIGKILL)
    for pid in backends:  # a dead machine takes them too; left alive they hold shared memory
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    log(f"outage: postmaster {postmaster} and {len(backends)} children SIGKILLed at step "
        f"{at_step}; down for {outage:.0f} s")
    down_at = time.monotonic()
    during = []
    while time.monotonic() - down_at < outage:
        during.append(web.status("/healthz"))
        time.sleep(min(10.0, outage / 4))
    pg = Postgres(datadir, fast=True)
    (datadir / "postmaster.pid").unlink(missing_ok=True)
    pg._call([_pg_bin("pg_ctl"), "-D", str(datadir), "-l", str(datadir / "server.log"), "-w",
              "-t", "60", "restart"])
    back_at = time.monotonic()
    log(f"outage: database back after {back_at - down_at:.0f} s")
    after = []
    for _ in range(40):
        after.append(web.status("/healthz"))
        if after[-1] == 200:
            break
        time.sleep(0.5)
    wait_done(run, timeout=1800)
    seconds = time.monotonic() - t0
    w.stop()
    a, b = rows(ref), rows(run)
    dup, gaps = duplicates_and_gaps(run, steps)
    return {"status": run.status, "attempts": run.attempts, "error": run.error,
            "killed_at_step": at_step, "outage_seconds": back_at - down_at,
            "handed_back": "database outage; handed back" in w.log(),
            "healthz_during": sorted(set(during)), "healthz_after": after,
            "equal": {k: a[k] == b[k] for k in a}, "rows": {k: len(v) for k, v in b.items()},
            "duplicates": dup, "gaps": gaps, "seconds": seconds,
            "seconds_after_back": time.monotonic() - back_at, "reference_seconds": ref_seconds}


def drill_restarts(user: Any, ps: Any, base: str, steps: int, restarts: int
                   ) -> dict[str, Any]:
    """``restarts`` clean shutdowns (SIGTERM) of the worker during one run."""
    log("restarts: the uninterrupted reference run")
    w = start_worker({})
    ref = launch(user, ps, "restarts-reference", total_steps=steps)
    t0 = time.monotonic()
    wait_done(ref)
    ref_seconds = time.monotonic() - t0
    w.stop()
    run = launch(user, ps, "restarts", total_steps=steps)
    reader = Reader(base)
    reader.login()
    t0 = time.monotonic()
    pages, released = [], []
    for i in range(restarts):
        w = start_worker({})
        run.refresh_from_db()
        at = run.current_step
        wait_until(lambda a=at: run.refresh_from_db() or run.current_step > a
                   or run.status not in ("queued", "running"), 600, "a step on this worker")
        if run.status != "running":
            break
        t1 = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        w.proc.wait(timeout=120)
        released.append(time.monotonic() - t1)
        run.refresh_from_db()
        with reader.opener.open(f"{base}/runs/{run.pk}/status/", timeout=30) as resp:
            pages.append("interrupted, waiting to resume" in resp.read().decode())
        log(f"restarts: SIGTERM {i + 1}/{restarts} at step {run.current_step}, status "
            f"{run.status}, attempts {run.attempts}")
    w = start_worker({})
    wait_done(run, timeout=1800)
    seconds = time.monotonic() - t0
    w.stop()
    a, b = rows(ref), rows(run)
    dup, gaps = duplicates_and_gaps(run, steps)
    return {"restarts": len(released), "status": run.status, "attempts": run.attempts,
            "error": run.error, "page_said_interrupted": pages,
            "shutdown_seconds_max": max(released, default=None),
            "equal": {k: a[k] == b[k] for k in a}, "rows": {k: len(v) for k, v in b.items()},
            "duplicates": dup, "gaps": gaps, "seconds": seconds, "reference_seconds": ref_seconds}


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)  # the finally blocks stop gunicorn and workers
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--think", type=float, default=2.0,
                        help="seconds each reader waits between requests (the dashboard polls a "
                             "running run's status every 2 s)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--only", default="kills,redis,postgres,poison,load")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("simulated", "hf"), default="simulated",
                        help="hf: the built-in tiny model, unpaced (a default deployment's)")
    parser.add_argument("--default-lease", action="store_true",
                        help="keep the default lease (RUN_LEASE_TIMEOUT_SECONDS 60)")
    parser.add_argument("--steps", type=int, default=20, help="steps of the outage and "
                        "restarts drills' runs")
    parser.add_argument("--outage-seconds", type=float, default=None,
                        help="how long the outage drill keeps the database down (default: "
                             "RUN_RECONNECT_SECONDS + 30, past the recorder's retry window)")
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--proxied", action="store_true",
                        help="put Debian's nginx with the repository's config "
                             "(deploy/nginx/rada.conf.template) in front of gunicorn, as "
                             "docker-compose.yml does; the web drills then go through it")
    args = parser.parse_args()
    if args.backend == "hf":
        BACKEND.update(HF)
        WORKER_ENV.pop("RADA_BACKEND_HOOK")
    if args.default_lease:
        WORKER_ENV.pop("RUN_LEASE_TIMEOUT_SECONDS")
        WORKER_ENV.pop("RUN_HEARTBEAT_SECONDS")
    only = set(args.only.split(","))
    user, ps = setup()
    from experiments import services
    from experiments.models import PromptSet

    from tests.fixtures.services import make_prompts

    ps_poison = PromptSet.objects.filter(name="drills-poison").first() or \
        services.import_prompt_set(owner=user, name="drills-poison", prompts=make_prompts(
            32, pass_rate=0.5, metadata={"kill_self_at_call": 2}))
    from django.conf import settings

    outage = args.outage_seconds if args.outage_seconds is not None else \
        settings.RUN_RECONNECT_SECONDS + 30
    print(f"backend {args.backend}, lease {WORKER_ENV.get('RUN_LEASE_TIMEOUT_SECONDS', 'default')}"
          f" s", flush=True)
    rng = random.Random(args.seed)
    base = f"http://127.0.0.1:{args.port}"
    web = gunicorn(args.port, args.web_workers, proxied=args.proxied)
    proxy = None
    results: dict[str, Any] = {}
    try:
        wait_until(lambda: Reader(base).status("/healthz") == 200, 60, "gunicorn")
        if args.proxied:
            from tests.fixtures.proxy import start_nginx

            proxy = start_nginx(args.port, LOG_DIR, settings.STATIC_ROOT)
            base = f"http://127.0.0.1:{proxy.port}"
            wait_until(lambda: Reader(base).status("/healthz") == 200, 60, "nginx")
            print(f"proxied: nginx on {base} in front of gunicorn", flush=True)
        print(f"load average at start: {os.getloadavg()}", flush=True)
        for name, call in (("kills", lambda: drill_kills(user, ps, args.kills, rng)),
                           ("redis", lambda: drill_redis(user, ps)),
                           ("postgres", lambda: drill_postgres(user, ps, base)),
                           ("poison", lambda: drill_poison(user, ps_poison, ps)),
                           ("load", lambda: drill_load(user, ps, base, args.readers,
                                                       args.seconds, args.think)),
                           ("outage", lambda: drill_outage(user, ps, base, args.steps, outage)),
                           ("restarts", lambda: drill_restarts(user, ps, base, args.steps,
                                                               args.restarts))):
            if name not in only:
                continue
            log(f"drill {name}")
            try:
                results[name] = call()
            except Exception as exc:  # noqa: BLE001 - report and go on with the next drill
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"{name}: {results[name]}")
            print(f"load average: {os.getloadavg()}", flush=True)
    finally:
        if proxy is not None:
            proxy.stop()
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=30)
        for proc in _STARTED:
            proc.kill()
        for worker in WORKERS:
            worker.kill()
    print("\n## results")
    for name, result in results.items():
        print(f"- {name}: {result}")


if __name__ == "__main__":
    main()
