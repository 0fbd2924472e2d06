#!/usr/bin/env python
"""Export and import of a run's Parquet bundle (``experiments.bundles``, ``experiments.imports``)
at growing sizes: wall time, bundle size, and the peak growth of this process's resident memory
while it runs (sampled every 10 ms by a thread with psutil), to show that memory stays flat as
the run grows (rows are streamed in chunks of ``bundles.CHUNK_ROWS``); and the API's samples page
(1,000 rows) at the start and at the end of the run, through a cursor and through OFFSET.

Rows are synthetic: steps of 512 prompts x 16 samples with 200-character responses (random hex:
about as compressible as real text), written with COPY as the recorder writes them. Run one size
per process, so that each peak starts from a fresh interpreter. Needs DATABASE_URL; measures,
never asserts.

    for s in 10 40 120; do python scripts/services.py exec --instance bench -- \
        python benchmarks/bench_export.py --steps $s; done
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "platform")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup()

import psutil  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from experiments import bundles  # noqa: E402
from experiments.imports import import_run  # noqa: E402
from experiments.models import Prompt, PromptSet, Run  # noqa: E402
from experiments.services import delete_run_records, import_prompt_set  # noqa: E402

from trainer.types import Prompt as TPrompt  # noqa: E402

PROMPTS, SAMPLES, CHARS = 512, 16, 200


class PeakRss:
    """Peak resident memory above the level at entry, sampled by a thread."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRss:
        self.base = self.proc.memory_info().rss
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.proc.memory_info().rss - self.base)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join()

    @property
    def mib(self) -> float:
        return self.peak / 2**20


def fill(run: Run, steps: int, prompt_ids: list[int]) -> None:
    metrics = json.dumps({"real_reward": 0.5, "zero_adv_frac": 0.1, "entropy": 0.7,
                          "samples": PROMPTS * SAMPLES, "time_step": 1.0})
    with connection.cursor() as cur:
        for step in range(1, steps + 1):
            cur.execute("INSERT INTO experiments_step (run_id, step, metrics, real_reward, "
                        "kept_reward, samples, tokens, wall_seconds, created_at) VALUES "
                        "(%s, %s, %s, 0.5, 0.5, %s, %s, %s, now())",
                        [run.pk, step, metrics, PROMPTS * SAMPLES, PROMPTS * SAMPLES * 50,
                         float(step)])
            with cur.copy("COPY experiments_promptstep (run_id, step, prompt_id, samples, "
                          "positives, negatives, rounds, exit_round, missing, kept_positives, "
                          "kept_negatives, baseline, tokens) FROM STDIN") as cp:
                for pid in prompt_ids:
                    cp.write_row((run.pk, step, pid, SAMPLES, 8, 8, 2, 2, "", 2, 2, 0.5, 800))
            with cur.copy("COPY experiments_sample (run_id, step, prompt_id, index, round, "
                          "response, tokens, reward, kept, advantage, verifier_error) "
                          "FROM STDIN") as cp:
                for pid in prompt_ids:
                    for i in range(SAMPLES):
                        reward = float((pid + i + step) % 2)
                        text = os.urandom(CHARS // 2).hex()
                        cp.write_row((run.pk, step, pid, i, i // 8 + 1, text, 50, reward,
                                      i < 4, reward - 0.5 if i < 4 else None, ""))
    Run.objects.filter(pk=run.pk).update(current_step=steps, status="succeeded",
                                         samples_spent=steps * PROMPTS * SAMPLES)


def page_times(run: Run, steps: int, prompt_ids: list[int]) -> str:
    """Median ms of the API's samples page (1,000 rows): the first, the last through a cursor,
    and the last through OFFSET (what a cursor avoids), 5 times each."""
    from api.selectors import encode_cursor, sample_page
    from experiments.models import Sample

    total = steps * PROMPTS * SAMPLES
    last = encode_cursor(steps, prompt_ids[-63], 0)  # about 1,000 rows before the end

    def median_ms(fn: Any) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        return sorted(times)[2]

    first = median_ms(lambda: sample_page(run, cursor=None, limit=1000))
    by_cursor = median_ms(lambda: sample_page(run, cursor=last, limit=1000))
    by_offset = median_ms(lambda: list(
        Sample.objects.filter(run=run).order_by("step", "prompt_id", "index")
        .values_list("step", "prompt_id", "index", "response")[total - 1000:total]))
    return f"{first:.0f} / {by_cursor:.0f} / {by_offset:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, nargs="+", default=[10])
    parser.add_argument("--no-header", action="store_true")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-export")
    ps = PromptSet.objects.filter(name="bench-export").first() or import_prompt_set(
        owner=None, name="bench-export",
        prompts=[TPrompt(id=str(i), text=f"{i}+1=", answer="1") for i in range(PROMPTS)])
    prompt_ids = list(Prompt.objects.filter(prompt_set=ps).order_by("index")
                      .values_list("pk", flat=True))
    if not args.no_header:
        print(f"chunk {bundles.CHUNK_ROWS} rows; {PROMPTS} prompts x {SAMPLES} samples per "
              f"step, {CHARS}-character responses")
        print("| steps | sample rows | export s | bundle MiB | export peak RSS +MiB "
              "| import s | import peak RSS +MiB | samples page of 1,000 (ms): first / last by "
              "cursor / last by OFFSET |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for steps in args.steps:
        run = Run.objects.create(owner=user, name=f"bench-export-{steps}", algorithm="grpo",
                                 config={"total_steps": steps}, prompt_set=ps, model="x",
                                 total_steps=steps)
        fill(run, steps, prompt_ids)
        run.refresh_from_db()
        pages = page_times(run, steps, prompt_ids)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bundle.zip"
            with PeakRss() as mem_out, open(path, "wb") as fh:
                t0 = time.perf_counter()
                bundles.write_bundle(run, fh)
                t_export = time.perf_counter() - t0
            size = path.stat().st_size / 2**20
            with PeakRss() as mem_in:
                t0 = time.perf_counter()
                imported = import_run(path, user).run
                t_import = time.perf_counter() - t0
        print(f"| {steps} | {steps * PROMPTS * SAMPLES:,} | {t_export:.1f} | {size:.1f} | "
              f"{mem_out.mib:.0f} | {t_import:.1f} | {mem_in.mib:.0f} | {pages} |", flush=True)
        for r in (run, imported):
            delete_run_records(r.pk)
            Run.objects.filter(pk=r.pk).delete()


if __name__ == "__main__":
    main()
