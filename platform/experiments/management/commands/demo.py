"""``python manage.py demo``: what ``make run`` runs. Prepares the database, the built-in prompt
sets and the built-in model, starts the web server (gunicorn + WhiteNoise) and one Celery worker,
launches a GRPO / Reinforce-Ada-balance pair with the same seed, prints where to look, and stops
its processes on Ctrl-C.

The web server and the worker run in their own sessions, so Ctrl-C reaches this command only and
it decides how they stop: gunicorn gracefully, the worker cleanly (a run it was executing is
handed back at its next poll, no attempt counted, and resumes from its last checkpoint the next
time a worker starts).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from experiments import services
from experiments.models import PromptSet, Run

ROOT = Path(settings.BASE_DIR)
# Threaded workers: a long request (a large run's Parquet export) keeps its worker's heartbeat
# going, where a sync worker past --timeout is killed mid-download. Same in docker-compose.yml.
GUNICORN_THREADS = ("--worker-class", "gthread", "--threads", "4", "--timeout", "120")
TRAIN_SET = "arithmetic (built-in)"
# The CLI's held-out set of builtin:arithmetic, so that the dashboard's and the CLI's greedy
# accuracies are one figure (an earlier held-out set of 2-3 digit operands scored a model 0.29
# where the CLI's scored it 0.45); the name says which it is.
EVAL_SET = "arithmetic held-out (built-in, 1-3 digits)"
DEMO_PREFIX = "demo"
# How long Ctrl-C waits for the web server and the worker (a worker hands its run back within a
# poll of the trainer: a round, a mini-batch) before it kills what is left.
STOP_SECONDS = 60


def port_free(host: str, port: int) -> bool:
    """Whether gunicorn can listen on ``port``. Bound as gunicorn binds, with SO_REUSEADDR: the
    connections of a server stopped a moment ago (Ctrl-C) linger in TIME_WAIT and block a plain
    bind for a minute, which moved a restart to the next port, while gunicorn itself can bind;
    a port some process listens on is refused either way."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt()


class Command(BaseCommand):
    help = "Set up and run the platform with a demo pair of runs (make run)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--backend", choices=("hf", "simulated"), default="hf",
                            help="hf: the built-in tiny model (warm-started first if missing); "
                                 "simulated: no model, for a quick look")
        parser.add_argument("--steps", type=int, default=100, help="steps of each demo run")
        parser.add_argument("--batch-size", type=int, default=32)
        parser.add_argument("--no-demo-runs", action="store_true",
                            help="do not launch the demo pair")
        parser.add_argument("--new-demo-runs", action="store_true",
                            help="launch a new demo pair even if this database has one (by "
                                 "default the pair is launched once per database)")

    def handle(self, *args: Any, **opts: Any) -> None:
        self.stdout.write("== migrating the database")
        call_command("migrate", interactive=False, verbosity=0)
        admin, password = self.ensure_admin()
        train_set, eval_set = self.ensure_prompt_sets(admin)
        if opts["backend"] == "hf":
            self.stdout.write("== built-in tiny model (warm-started on first use, a few minutes)")
            subprocess.run([sys.executable, "-c", "from trainer.warmstart import "
                            "ensure_builtin_model; print(ensure_builtin_model(progress=True))"],
                           cwd=ROOT, check=True)
        self.stdout.write("== collecting static files")
        call_command("collectstatic", interactive=False, verbosity=0)
        # SIGTERM (from `scripts/services.py exec` or a supervisor) stops like Ctrl-C. Ctrl-C's
        # handler is installed explicitly too: Python leaves SIGINT ignored when the parent
        # ignored it (any job started with `&` from a script), and the demo would then never
        # stop on it.
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        port = opts["port"]
        while not port_free(opts["host"], port):
            port += 1
        if port != opts["port"]:
            self.stdout.write(self.style.WARNING(
                f"== port {opts['port']} is in use by another process: serving on {port} "
                f"(a saved `rada login --url` address needs the new port; --port chooses)"))
        logs = Path(os.environ.get("RADA_LOG_DIR", ROOT / "var" / "logs"))
        logs.mkdir(parents=True, exist_ok=True)
        procs = self.start_processes(opts["host"], port, logs)
        try:
            if not opts["no_demo_runs"]:
                self.launch_demo_pair(admin, train_set, eval_set, opts)
            url = f"http://{opts['host']}:{port}/"
            self.stdout.write(self.style.SUCCESS(
                f"\nReinforce-Ada platform: {url}\n"
                f"  sign in as: admin / {password}\n"
                f"  admin:      {url}admin/   health: {url}healthz\n"
                f"  logs:       {logs}/web.log, {logs}/worker.log\n"
                "Ctrl-C stops everything.\n"))
            self.wait(procs)
        except KeyboardInterrupt:
            self.stdout.write("\n== stopping")
        finally:
            self.stop(procs)

    # -- steps ------------------------------------------------------------------------------------
    def ensure_admin(self) -> tuple[Any, str]:
        """Create ``admin`` with a random password when no superuser exists. The password is kept
        in var/admin-password (mode 600) so later starts can print it again."""
        users = get_user_model().objects
        secret = Path(os.environ.get("RADA_ADMIN_PASSWORD_FILE", ROOT / "var" / "admin-password"))
        admin = users.filter(is_superuser=True).order_by("pk").first()
        if admin is None:
            password = secrets.token_urlsafe(12)
            admin = users.create_superuser("admin", "", password)
            secret.parent.mkdir(parents=True, exist_ok=True)
            # Mode 600 from the start: created (or truncated) with it before the password is
            # written, so no other user can read it in between.
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # a file that existed keeps its mode through O_CREAT
            with os.fdopen(fd, "w") as f:
                f.write(password + "\n")
            self.stdout.write(f"== created superuser admin (password in {secret})")
            return admin, password
        password = secret.read_text().strip() if secret.exists() else "(set earlier; unchanged)"
        return admin, password

    def ensure_prompt_sets(self, admin: Any) -> tuple[PromptSet, PromptSet]:
        """The built-in task's training and held-out sets, exactly those of the CLI's
        ``builtin:arithmetic`` (``trainer.data.resolve_prompts`` of the default config): found
        by their contents where stored (an imported CLI run's, a set generated on the prompt
        sets page), else imported."""
        from trainer.config import TrainConfig
        from trainer.data import resolve_prompts

        config = TrainConfig()
        train, heldout = resolve_prompts(config)
        digits = f"{config.task_min_digits}-{config.task_max_digits} digits"
        sets = []
        for prompts, name, what in (
                (train, TRAIN_SET, f"built-in arithmetic: {len(train):,} prompts, {digits} "
                                   "(the CLI's builtin:arithmetic)"),
                (heldout, EVAL_SET, f"built-in arithmetic, held out: {len(heldout):,} prompts, "
                                    f"{digits}, none of them in {TRAIN_SET} (the CLI's "
                                    "held-out set of builtin:arithmetic)")):
            ps, created = services.find_or_import_prompt_set(
                prompts, name=name, source=PromptSet.Source.BUILTIN, description=what,
                owner=admin, platform=True)
            if created:
                self.stdout.write(f"== imported the prompt set {ps.name}")
            sets.append(ps)
        return sets[0], sets[1]

    def start_processes(self, host: str, port: int, logs: Path) -> dict[str, subprocess.Popen]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--pythonpath",
             f"{ROOT},{ROOT / 'platform'}", "--bind", f"{host}:{port}", "--workers", "2",
             *GUNICORN_THREADS, "--access-logfile", "-"],
            cwd=ROOT, env=env, stdout=open(logs / "web.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-P", "solo",
             "-Q", "cpu", "-n", "demo-cpu@%h", "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=open(logs / "worker.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        return {"web": web, "worker": worker}

    def launch_demo_pair(self, admin: Any, train_set: PromptSet, eval_set: PromptSet,
                         opts: dict[str, Any]) -> list[Run]:
        """The demo pair, launched once per database: a later start shows the pair it has (an
        unfinished one resumes) unless ``--new-demo-runs`` asks for another."""
        earlier = Run.objects.filter(name__startswith=f"{DEMO_PREFIX} ").order_by("pk")
        if earlier.exists() and not opts.get("new_demo_runs"):
            active = earlier.filter(status__in=Run.ACTIVE_STATUSES)
            what = ("queued or running (they resume)" if active.exists()
                    else "launched on an earlier start")
            self.stdout.write(f"== demo runs {what}: "
                              + ", ".join(earlier.values_list("name", flat=True))
                              + "; --new-demo-runs launches another pair")
            return []
        # Sized for 2 CPU cores: the built-in model, B=32, lr 2e-4 (docs/architecture.md, "The
        # built-in model"). The worker runs one at a time: GRPO first (fast), then
        # Reinforce-Ada-balance.
        base = {"backend": opts["backend"], "batch_size": opts["batch_size"],
                "total_steps": opts["steps"], "lr": 2e-4, "seed": 0, "save_every": 10,
                "eval_every": 20, "eval_k": 4}
        stamp = time.strftime("%H:%M")
        launched = []
        for algorithm in ("grpo", "ada-balance"):
            run = services.launch_run(admin, f"{DEMO_PREFIX} {algorithm} seed 0 ({stamp})",
                                      base | {"algorithm": algorithm}, train_set,
                                      eval_set=eval_set, queue="cpu")
            self.stdout.write(f"== launched run {run.pk}: {run.name}")
            launched.append(run)
        return launched

    def wait(self, procs: dict[str, subprocess.Popen]) -> None:
        while True:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with {proc.returncode}; see its log")
                    return
            time.sleep(1)

    def stop(self, procs: dict[str, subprocess.Popen]) -> None:
        # A second Ctrl-C must not cut the shutdown short and leave processes behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # The worker shuts down cleanly (SIGTERM): its run's process stops at its next poll and
        # hands the run back, attempt not counted, to resume from its last checkpoint at the next
        # `make run` (a cold SIGQUIT counted every Ctrl-C as a lost worker: three failed a run).
        # gunicorn finishes its requests (SIGTERM).
        for name, sig in (("worker", signal.SIGTERM), ("web", signal.SIGTERM)):
            proc = procs[name]
            if proc.poll() is None:
                proc.send_signal(sig)
        t0 = time.monotonic()
        for name, proc in procs.items():
            try:
                proc.wait(max(1.0, STOP_SECONDS - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.stdout.write(f"== {name} stopped ({time.monotonic() - t0:.1f} s)")
        self.stdout.write("== stopped")
