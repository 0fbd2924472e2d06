"""Dashboard latency on a run of paper scale, served by gunicorn as in production.

Two steps, each its own command (seeding takes minutes and is done once):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rada_bench \\
        python benchmarks/bench_dashboard.py seed
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rada_bench \\
        python benchmarks/bench_dashboard.py measure [--requests 40] [--workers 2]

``seed`` creates (or recreates) four runs of 600 steps x 512 prompts: round statistics and
per-prompt-step rows for all four, and sample rows (8 to 32 per prompt and step, about 5M) for the
first one only, with response texts kept for its last 50 steps (retention "kept last 50"). Rows go
in with psycopg ``COPY``, as the recorder writes them. ``seed --no-samples`` leaves the sample rows
out (the report reads none; seeding then takes a fraction of the time). Each run gets a held-out
evaluation at its last step (pass@j and all_correct@j for j <= 32) for the report.

``seed-async`` adds (or recreates) one asynchronous run of 200 steps x 512 prompts: GRPO with
``max_policy_lag`` 2 and ``off_policy_correction`` vcpo on backend hf (so every chart of the run
page's "Asynchronous and off-policy training" section applies), its per-prompt-step rows and
round statistics, its 409,600 sample rows each with the policy version that drew it (lag 0, 1 or
2), response texts for its last 50 steps, the async step metrics (lag, stale drops, ESS, baseline
shift, lr applied) and an evaluation every 20 steps. ``measure --async`` times that run's page,
its status poll, every chart and its prompt history, instead of the four runs' endpoints.

``measure`` runs ``collectstatic`` and gunicorn (DEBUG off, whitenoise, the manifest storage), signs
in, and times each page and chart endpoint sequentially. It prints a Markdown table of median,
p95 and max latency and the response size. It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "platform")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

STEPS, PROMPTS, TEXT_STEPS = 600, 512, 50
USER, PASSWORD = "bench", "bench-password-1"


def _django() -> None:
    import django

    django.setup()


def _migrated_with_user() -> Any:
    """The database migrated and the benchmark's user there, with its password."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    user, _ = User.objects.get_or_create(username=USER)
    user.set_password(PASSWORD)
    user.save()
    return user


def seed(args: argparse.Namespace) -> None:
    _django()
    from django.db import connection
    from experiments.models import (
        EvalResult,
        Prompt,
        PromptSet,
        PromptStep,
        RoundStat,
        Run,
        Sample,
        Step,
    )

    from trainer.config import TrainConfig
    from trainer.types import PASS_RATE_METRICS, PASS_RATE_THRESHOLDS

    user = _migrated_with_user()
    Run.objects.filter(name__startswith="bench-").delete()
    PromptSet.objects.filter(name="bench-512").delete()
    ps = PromptSet.objects.create(name="bench-512", source=PromptSet.Source.BUILTIN, size=PROMPTS)
    Prompt.objects.bulk_create(Prompt(prompt_set=ps, index=i, text=f"{i}+{i * 7 % 1000}=",
                                      answer=str(i + i * 7 % 1000)[::-1]) for i in range(PROMPTS))
    prompt_ids = list(Prompt.objects.filter(prompt_set=ps).order_by("index")
                      .values_list("id", flat=True))
    specs = [("bench-balance-s0", "ada-balance", 0, True), ("bench-balance-s1", "ada-balance", 1,
                                                            False),
             ("bench-grpo-s0", "grpo", 0, False), ("bench-pos-s0", "ada-pos", 0, False)]
    connection.ensure_connection()
    raw = connection.connection  # psycopg 3 connection under Django's wrapper
    for name, algorithm, seed_, with_samples in specs:
        t0 = time.perf_counter()
        config = TrainConfig(algorithm=algorithm, seed=seed_, batch_size=PROMPTS,
                             total_steps=STEPS)
        cfg = config.to_dict()
        # The synthetic records follow the algorithm's own exit rule (one round without one).
        record = config.algorithm_record
        k_pos, k_neg = config.exit_counts
        run = Run.objects.create(owner=user, name=name, algorithm=algorithm, config=cfg,
                                 prompt_set=ps, model=cfg["model"], seed=seed_,
                                 total_steps=STEPS, status=Run.Status.SUCCEEDED,
                                 current_step=STEPS)
        rng = random.Random(seed_ * 7919 + len(name))
        # Per-prompt pass rates drift upwards over training, as a learning policy's would.
        base = [rng.betavariate(0.6, 0.9) for _ in range(PROMPTS)]
        samples_spent = 0
        n_samples = 0
        with raw.cursor() as cur:
            for step in range(1, STEPS + 1):
                drift = 0.25 * step / STEPS
                steps_rows, round_rows, ps_rows, sample_rows = [], [], [], []
                active_per_round = [0, 0, 0, 0]
                finished_per_round = [0, 0, 0, 0]
                pos_per_round = [0, 0, 0, 0]
                step_samples = 0
                unresolved_pos = unresolved_neg = 0
                first_pass_rates: list[float] = []
                for j, pid in enumerate(prompt_ids):
                    p = min(0.98, base[j] + drift)
                    pool: list[tuple[int, float]] = []
                    exit_round = None
                    rounds = 4 if record.eliminates else 1
                    per_round = 8 if record.eliminates else 4
                    for rnd in range(1, rounds + 1):
                        active_per_round[rnd - 1] += 1
                        for _ in range(per_round):
                            r = 1.0 if rng.random() < p else 0.0
                            pool.append((rnd, r))
                            pos_per_round[rnd - 1] += int(r > 0.5)
                        pos = sum(1 for _, r in pool if r > 0.5)
                        neg = len(pool) - pos
                        done = not record.eliminates or bool(
                            record.exit_rule(pos, neg, k_pos, k_neg))
                        if done:
                            exit_round = rnd
                            finished_per_round[rnd - 1] += 1
                            break
                    pos = sum(1 for _, r in pool if r > 0.5)
                    missing = ""
                    if exit_round is None:
                        missing = "positives" if pos < 2 else "negatives"
                        if missing == "positives":
                            unresolved_pos += 1
                        else:
                            unresolved_neg += 1
                    first_pass_rates.append(sum(r > 0.5 for _, r in pool[:4]) / 4)
                    baseline = sum(r for _, r in pool) / len(pool)
                    step_samples += len(pool)
                    ps_rows.append((run.pk, step, pid, len(pool), pos, len(pool) - pos,
                                    pool[-1][0], exit_round, missing, min(2, pos),
                                    4 - min(2, pos), baseline, len(pool) * 4))
                    if with_samples and not args.no_samples:
                        keep_text = step > STEPS - TEXT_STEPS
                        for i, (rnd, r) in enumerate(pool):
                            kept = i < 4
                            sample_rows.append((
                                run.pk, step, pid, i, rnd,
                                (f"{i}{j}{step}" if r else f"{j}{i}") if keep_text else None,
                                4, r, kept, (r - baseline) if kept else None, ""))
                real = sum(r[4] for r in ps_rows) / max(1, sum(r[3] for r in ps_rows))
                metrics = {
                    "real_reward": real, "kept_reward": real, "reward_all": real,
                    "samples": step_samples, "tokens": step_samples * 4,
                    "zero_adv_frac": rng.random() * 0.2, "first_round_all_correct": 0.1,
                    "first_round_all_wrong": 0.2,
                    "unresolved": unresolved_pos + unresolved_neg,
                    "unresolved_missing_pos": unresolved_pos,
                    "unresolved_missing_neg": unresolved_neg, "entropy": 1.0 - step / 1200,
                    "clip_frac_low": 0.01, "clip_frac_high": 0.02, "response_length": 4.0,
                    "time_generation": 1.0, "time_scoring": 0.1, "time_update": 0.5,
                    "time_step": 1.6, "policy_loss": 0.0, "grad_norm": 1.0,
                    **{key: sum(r <= t for r in first_pass_rates) / PROMPTS
                       for key, t in zip(PASS_RATE_METRICS, PASS_RATE_THRESHOLDS, strict=True)},
                }
                samples_spent += step_samples
                n_samples += len(sample_rows)
                steps_rows.append((run.pk, step, json.dumps(metrics), real, real, step_samples,
                                   step_samples * 4, step * 1.6))
                for rnd in range(4):
                    if active_per_round[rnd]:
                        round_rows.append((run.pk, step, rnd + 1, active_per_round[rnd],
                                           active_per_round[rnd] * (8 if record.eliminates
                                                                    else 4),
                                           pos_per_round[rnd], finished_per_round[rnd], 0))
                _copy(cur, Step._meta.db_table, ["run_id", "step", "metrics", "real_reward",
                                                 "kept_reward", "samples", "tokens",
                                                 "wall_seconds"], steps_rows, now=True)
                _copy(cur, RoundStat._meta.db_table, ["run_id", "step", "round",
                                                      "active_prompts", "samples", "positives",
                                                      "finished", "tokens"], round_rows)
                _copy(cur, PromptStep._meta.db_table, [
                    "run_id", "step", "prompt_id", "samples", "positives", "negatives", "rounds",
                    "exit_round", "missing", "kept_positives", "kept_negatives", "baseline",
                    "tokens"], ps_rows)
                if sample_rows:
                    _copy(cur, Sample._meta.db_table, [
                        "run_id", "step", "prompt_id", "index", "round", "response", "tokens",
                        "reward", "kept", "advantage", "verifier_error"], sample_rows)
                if step == STEPS:
                    _copy(cur, EvalResult._meta.db_table, ["run_id", "step", "metrics"],
                          [(run.pk, step, json.dumps(_eval_metrics(rng)))], now=True)
                if step % 50 == 0:
                    raw.commit()
                    print(f"  {name}: step {step}/{STEPS}, {n_samples} sample rows", flush=True)
        raw.commit()
        Run.objects.filter(pk=run.pk).update(samples_spent=samples_spent,
                                             latest_real_reward=real)
        print(f"{name}: {n_samples} sample rows in {time.perf_counter() - t0:.0f} s", flush=True)
    with raw.cursor() as cur:
        # A re-seed deletes the previous bench runs first: compact the per-step tables so scans
        # do not wade through their dead rows (autovacuum would, eventually), then plan fresh.
        for table in (Step, RoundStat, PromptStep, Prompt):
            cur.execute(f"VACUUM (FULL) {table._meta.db_table}")
        cur.execute("ANALYZE")


ASYNC_NAME, ASYNC_STEPS, ASYNC_LAG = "async-bench-grpo-k2", 200, 2


def seed_async(args: argparse.Namespace) -> None:
    """One asynchronous run (GRPO, n = 4, max_policy_lag 2, vcpo, backend hf) of ASYNC_STEPS x
    PROMPTS: every row a recorded asynchronous run holds, written with ``COPY``."""
    _django()
    from django.db import connection
    from experiments.models import (
        EvalResult,
        Prompt,
        PromptSet,
        PromptStep,
        RoundStat,
        Run,
        Sample,
        Step,
    )

    from trainer.config import TrainConfig
    from trainer.types import PASS_RATE_METRICS, PASS_RATE_THRESHOLDS, POLICY_LAG_COUNT_METRICS

    user = _migrated_with_user()
    Run.objects.filter(name=ASYNC_NAME).delete()
    ps, created = PromptSet.objects.get_or_create(
        name="bench-async-512", defaults={"source": PromptSet.Source.BUILTIN, "size": PROMPTS})
    if created:
        Prompt.objects.bulk_create(Prompt(prompt_set=ps, index=i, text=f"{i}+{i * 3 % 1000}=",
                                          answer=str(i + i * 3 % 1000)[::-1])
                                   for i in range(PROMPTS))
    prompt_ids = list(Prompt.objects.filter(prompt_set=ps).order_by("index")
                      .values_list("id", flat=True))
    config = TrainConfig(algorithm="grpo", batch_size=PROMPTS, total_steps=ASYNC_STEPS,
                         backend="hf", max_policy_lag=ASYNC_LAG, off_policy_correction="vcpo",
                         tis_cap=2.0, eval_every=20)
    cfg = config.to_dict()
    n = config.group_size
    t0 = time.perf_counter()
    run = Run.objects.create(owner=user, name=ASYNC_NAME, algorithm="grpo", config=cfg,
                             prompt_set=ps, model=cfg["model"], seed=0,
                             total_steps=ASYNC_STEPS, status=Run.Status.SUCCEEDED,
                             current_step=ASYNC_STEPS)
    rng = random.Random(29)
    base = [rng.betavariate(0.6, 0.9) for _ in range(PROMPTS)]
    connection.ensure_connection()
    raw = connection.connection
    n_samples = samples_spent = 0
    real = 0.0
    with raw.cursor() as cur:
        for step in range(1, ASYNC_STEPS + 1):
            drift = 0.25 * step / ASYNC_STEPS
            ps_rows, sample_rows, lags, first = [], [], [], []
            positives = 0
            keep_text = step > ASYNC_STEPS - TEXT_STEPS
            for j, pid in enumerate(prompt_ids):
                p = min(0.98, base[j] + drift)
                # A prompt's group is drawn by one version, at most ASYNC_LAG behind (none
                # behind version 0 on the first steps).
                lag = min(step - 1, rng.choice((0, 1, 1, 2, 2, 2)))
                rewards = [1.0 if rng.random() < p else 0.0 for _ in range(n)]
                pos = int(sum(rewards))
                positives += pos
                mean = pos / n
                first.append(mean)
                lags += [lag] * n
                ps_rows.append((run.pk, step, pid, n, pos, n - pos, 1, 1, "", pos, n - pos,
                                mean, n * 4))
                for i, r in enumerate(rewards):
                    sample_rows.append((
                        run.pk, step, pid, i, 1,
                        (f"{i}{j}{step}" if r else f"{j}{i}") if keep_text else None, 4, r, True,
                        r - mean, "", step - 1 - lag))
            real = positives / (PROMPTS * n)
            ess = max(0.2, 1.0 - 0.5 * step / ASYNC_STEPS + rng.uniform(-0.05, 0.05))
            lr = config.lr
            metrics = {
                "real_reward": real, "kept_reward": real, "reward_all": real,
                "samples": PROMPTS * n, "tokens": PROMPTS * n * 4,
                "zero_adv_frac": rng.random() * 0.2, "first_round_all_correct": 0.1,
                "first_round_all_wrong": 0.2, "unresolved": 0, "unresolved_missing_pos": 0,
                "unresolved_missing_neg": 0, "entropy": 1.0 - step / 400,
                "clip_frac_low": 0.01, "clip_frac_high": 0.02, "response_length": 4.0,
                "time_generation": 1.0, "time_scoring": 0.1, "time_update": 0.5,
                "time_step": 1.1, "policy_loss": 0.0, "grad_norm": 1.0, "lr": lr,
                "policy_lag_mean": sum(lags) / len(lags), "policy_lag_max": max(lags),
                # Kept samples per lag, as the trainer records them (the lag chart reads these).
                **{key: float(lags.count(lag))
                   for lag, key in enumerate(POLICY_LAG_COUNT_METRICS[:ASYNC_LAG + 1])},
                "samples_stale_dropped": rng.choice((0, 0, 0, 4, 8)), "samples_filtered": 0,
                "ess": ess, "is_truncated_frac": rng.uniform(0.0, 0.03),
                "baseline_shift": rng.uniform(0.0, 0.1) * (1.2 - ess),
                "lr_applied": lr * ess ** 0.5,
                **{key: sum(r <= t for r in first) / PROMPTS
                   for key, t in zip(PASS_RATE_METRICS, PASS_RATE_THRESHOLDS, strict=True)},
            }
            samples_spent += PROMPTS * n
            n_samples += len(sample_rows)
            _copy(cur, Step._meta.db_table, ["run_id", "step", "metrics", "real_reward",
                                             "kept_reward", "samples", "tokens",
                                             "wall_seconds"],
                  [(run.pk, step, json.dumps(metrics), real, real, PROMPTS * n,
                    PROMPTS * n * 4, step * 1.1)], now=True)
            _copy(cur, RoundStat._meta.db_table, ["run_id", "step", "round", "active_prompts",
                                                  "samples", "positives", "finished",
                                                  "tokens"],
                  [(run.pk, step, 1, PROMPTS, PROMPTS * n, positives, PROMPTS, 0)])
            _copy(cur, PromptStep._meta.db_table, [
                "run_id", "step", "prompt_id", "samples", "positives", "negatives", "rounds",
                "exit_round", "missing", "kept_positives", "kept_negatives", "baseline",
                "tokens"], ps_rows)
            _copy(cur, Sample._meta.db_table, [
                "run_id", "step", "prompt_id", "index", "round", "response", "tokens",
                "reward", "kept", "advantage", "verifier_error", "policy_version"], sample_rows)
            if step % 20 == 0:
                _copy(cur, EvalResult._meta.db_table, ["run_id", "step", "metrics"],
                      [(run.pk, step, json.dumps(_eval_metrics(rng)))], now=True)
            if step % 50 == 0:
                raw.commit()
                print(f"  {ASYNC_NAME}: step {step}/{ASYNC_STEPS}, {n_samples} sample rows",
                      flush=True)
    raw.commit()
    Run.objects.filter(pk=run.pk).update(samples_spent=samples_spent, latest_real_reward=real)
    with raw.cursor() as cur:
        cur.execute("ANALYZE")
    print(f"{ASYNC_NAME}: {n_samples} sample rows in {time.perf_counter() - t0:.0f} s",
          flush=True)


def _eval_metrics(rng: random.Random, k: int = 32, prompts: int = 200) -> dict[str, float]:
    """What ``trainer.evaluate`` records, from random per-prompt counts of correct samples."""
    from trainer.evaluate import all_correct_at_k, pass_at_k

    correct = [rng.randint(0, k) for _ in range(prompts)]
    out = {"prompts": float(prompts), "k": float(k), "greedy_accuracy": rng.random(),
           f"avg@{k}": sum(correct) / (k * prompts), "verifier_errors": 0.0}
    for j in range(1, k + 1):
        out[f"pass@{j}"] = sum(pass_at_k(k, c, j) for c in correct) / prompts
        out[f"all_correct@{j}"] = sum(all_correct_at_k(k, c, j) for c in correct) / prompts
    return out


def _copy(cur: object, table: str, columns: list[str], rows: list[tuple], now: bool = False
          ) -> None:
    cols = columns + (["created_at"] if now else [])
    with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:  # type: ignore[attr-defined]
        for row in rows:
            cp.write_row(row + (("now",) if now else ()))


# --- measure -----------------------------------------------------------------------------------

class Client:
    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, bytes]:
        with self.opener.open(self.base + path, timeout=60) as resp:
            return resp.status, resp.read()

    def login(self) -> None:
        _, body = self.get("/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', body).group(1).decode()
        data = urllib.parse.urlencode({"username": USER, "password": PASSWORD,
                                       "csrfmiddlewaretoken": token}).encode()
        req = urllib.request.Request(self.base + "/login/", data=data,
                                     headers={"Referer": self.base + "/login/"})
        with self.opener.open(req, timeout=60) as resp:
            assert "/login/" not in resp.url, "sign-in failed"


def four_run_targets(runs: list[Any], q: str) -> list[tuple[str, str]]:
    """The four seeded runs' list, compare and report endpoints."""
    from dashboard.reports import FIGURES

    return [("runs list", "/"),
            ("compare page (4 runs)", f"/compare/?{q}"),
            ("compare chart (4 runs, x = samples)", f"/compare/chart.json?{q}&x=samples"),
            ("compare scatter (runs 1 vs 2)", f"/compare/scatter.json?{q}"),
            ("report page (4 runs)", f"/report/?{q}"),
            *((f"report figure: {f}", f"/report/{f}.json?{q}") for f in FIGURES),
            ("report CSV: hard-prompts", f"/report/hard-prompts.csv?{q}")]


def measure(args: argparse.Namespace) -> None:
    _django()
    from experiments.models import PromptStep, Run

    if args.async_run:
        runs = list(Run.objects.filter(name=ASYNC_NAME))
        if not runs:
            sys.exit("no asynchronous benchmark run: run `bench_dashboard.py seed-async` first")
    else:
        runs = list(Run.objects.filter(name__startswith="bench-").order_by("pk"))
        if len(runs) < 4:
            sys.exit("no benchmark runs: run `bench_dashboard.py seed` first")
    main = runs[0]
    # A prompt with response texts in the retained steps, in the middle of the set.
    prompt_id = (PromptStep.objects.filter(run=main, step=main.total_steps)
                 .order_by("prompt_id").values_list("prompt_id", flat=True)[PROMPTS // 2])
    env = {**os.environ, "DEBUG": "0", "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}",
           "DASHBOARD_CACHE": "0" if args.no_cache else "1"}
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
                   cwd=ROOT, env=env, check=True)
    port = args.port
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(args.workers), "--log-level", "warning"],
        cwd=ROOT, env=env, start_new_session=True)
    try:
        client = Client(f"http://127.0.0.1:{port}")
        for _ in range(100):
            try:
                client.get("/login/")
                break
            except OSError:
                time.sleep(0.2)
        client.login()
        q = "&".join(f"runs={r.pk}" for r in runs)
        targets = [("run page", f"/runs/{main.pk}/"),
                   ("run status (htmx poll)", f"/runs/{main.pk}/status/")]
        from dashboard.charts import RUN_CHARTS

        targets += [(f"chart: {c}", f"/runs/{main.pk}/charts/{c}.json") for c in RUN_CHARTS]
        # The heatmap's other views: another order, a search, a zoomed row range.
        heat = f"/runs/{main.pk}/charts/heatmap.json"
        targets += [("chart: heatmap, sorted by pass rate", f"{heat}?sort=pass-rate"),
                    ("chart: heatmap, search '12+'", f"{heat}?q=12%2B"),
                    ("chart: heatmap, rows 1-64 zoomed", f"{heat}?rows=1-64")]
        targets += [("prompt history", f"/runs/{main.pk}/prompts/{prompt_id}/"),
                    ("prompt pass-rate chart", f"/runs/{main.pk}/prompts/{prompt_id}/chart.json")]
        if not args.async_run:
            targets += four_run_targets(runs, q)
        targets = [t for t in targets if args.only in t[0]]
        rows = []
        print(f"gunicorn workers: {args.workers}; cache of finished runs: "
              f"{'off' if args.no_cache else 'on'}; {args.requests} timed requests each")
        for label, path in targets:
            times, size = [], 0
            for i in range(args.requests + 2):
                t0 = time.perf_counter()
                status, body = client.get(path)
                dt = (time.perf_counter() - t0) * 1000
                assert status == 200, (path, status)
                if i == 0:
                    first = dt
                if i >= 2:  # the first requests warm each worker's connection and imports
                    times.append(dt)
                size = max(size, len(body))
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            rows.append((label, path, statistics.median(times), p95, times[-1], size, first))
            print(f"{label:40s} median {statistics.median(times):7.1f} ms  p95 {p95:7.1f} ms  "
                  f"max {times[-1]:7.1f} ms  {size / 1024:8.1f} KiB", flush=True)
        print()
        print("| endpoint | first (ms) | median (ms) | p95 (ms) | max (ms) | size (KiB) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, _, med, p95, mx, size, first in rows:
            print(f"| {label} | {first:.0f} | {med:.0f} | {p95:.0f} | {mx:.0f} | "
                  f"{size / 1024:.1f} |")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("seed")
    s.add_argument("--no-samples", action="store_true", help="leave the sample rows out")
    sub.add_parser("seed-async")
    m = sub.add_parser("measure")
    m.add_argument("--async", dest="async_run", action="store_true",
                   help="time the asynchronous run of `seed-async` (its page, charts and prompt "
                        "history) instead of the four runs")
    m.add_argument("--requests", type=int, default=40, help="timed requests per endpoint")
    m.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    m.add_argument("--port", type=int, default=8799)
    m.add_argument("--only", default="", help="time only the endpoints whose label contains this")
    m.add_argument("--no-cache", action="store_true",
                   help="turn off the cache of finished runs' heatmap and pass rates "
                        "(every request takes the path a live run takes)")
    args = ap.parse_args()
    {"seed": seed, "seed-async": seed_async, "measure": measure}[args.cmd](args)


if __name__ == "__main__":
    main()
