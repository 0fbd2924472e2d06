#!/usr/bin/env python
"""Recorder ingest: sample rows per second into PostgreSQL for one step of 512 prompts x 16
samples with 200-character responses, measured in one run beside two references on the same rows:

- ``recorder``: ``workers.recorder.PostgresRecorder.on_step`` (the whole step: step, round,
  prompt-step and sample rows, one transaction, COPY, the real indexes and constraints);
- ``bulk_create``: Django's ``Sample.objects.bulk_create`` of the same sample rows;
- ``bare_copy``: psycopg ``COPY`` of the same sample rows into a table with no index, no key and
  no constraint (the practical ceiling).

Needs DATABASE_URL (``make bench`` starts a throwaway server). Measures, never asserts.

    python scripts/services.py exec --instance bench -- python benchmarks/bench_ingest.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "platform")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from experiments.models import Prompt, PromptSet, Run, Sample  # noqa: E402
from experiments.services import delete_run_records, import_prompt_set  # noqa: E402

from trainer.types import (  # noqa: E402
    Prompt as TPrompt,
)
from trainer.types import (  # noqa: E402
    PromptStepRecord,
    RoundStat,
    SampleRecord,
    StepRecord,
)
from workers.recorder import SAMPLE_COLUMNS, PostgresRecorder  # noqa: E402


def make_step(step: int, prompt_ids: list[int], samples: int, chars: int) -> StepRecord:
    text = ("0123456789+=" * (chars // 12 + 1))[:chars]
    recs, prompts = [], []
    for pid in prompt_ids:
        for i in range(samples):
            reward = float((pid + i + step) % 3 == 0)
            recs.append(SampleRecord(prompt_id=str(pid), round=i // 8 + 1, index=i,
                                     response=text, tokens=chars // 4, reward=reward,
                                     kept=i < 4, advantage=(reward - 0.33) if i < 4 else None))
        prompts.append(PromptStepRecord(prompt_id=str(pid), samples=samples, positives=5,
                                        negatives=samples - 5, rounds=2, exit_round=2,
                                        kept_positives=2, kept_negatives=2, baseline=0.33,
                                        tokens=samples * chars // 4))
    rounds = [RoundStat(round=1, active_prompts=len(prompt_ids), samples=len(prompt_ids) * 8,
                        positives=100, finished=300, tokens=1000),
              RoundStat(round=2, active_prompts=212, samples=len(prompt_ids) * 8, positives=50,
                        finished=212, tokens=1000)]
    metrics = {"real_reward": 0.4, "kept_reward": 0.5, "samples": float(len(recs)),
               "tokens": float(len(recs) * chars // 4), "time_step": 1.0}
    return StepRecord(step=step, metrics=metrics, rounds=rounds, prompts=prompts, samples=recs)


def sample_rows(run_id: int, record: StepRecord) -> list[tuple]:
    return [(run_id, record.step, int(s.prompt_id), s.index, s.round, s.response, s.tokens,
             s.reward, s.kept, s.advantage, "") for s in record.samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--chars", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    PromptSet.objects.filter(name="bench-ingest").delete()
    Run.objects.filter(name__startswith="bench-ingest").delete()
    ps = import_prompt_set(owner=user, name="bench-ingest", prompts=[
        TPrompt(id=str(i), text=f"{i}+1=", answer="1") for i in range(args.prompts)])
    prompt_ids = list(Prompt.objects.filter(prompt_set=ps).order_by("index")
                      .values_list("pk", flat=True))
    run = Run.objects.create(owner=user, name="bench-ingest", algorithm="ada-balance",
                             config={}, prompt_set=ps, model="builtin:tiny", total_steps=10_000)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_bare_sample")
        cursor.execute("CREATE TABLE bench_bare_sample (run_id bigint, step integer, "
                       "prompt_id bigint, index smallint, round smallint, response text, "
                       "tokens integer, reward double precision, kept boolean, "
                       "advantage double precision, verifier_error text)")
    recorder = PostgresRecorder(run.pk)
    rows_per_step = args.prompts * args.samples
    results: dict[str, list[float]] = {"recorder": [], "bulk_create": [], "bare_copy": []}
    step = 0
    for rep in range(args.repeats + 1):  # the first round warms caches and is discarded
        step += 1
        record = make_step(step, prompt_ids, args.samples, args.chars)
        rows = sample_rows(run.pk, record)

        t = time.perf_counter()
        recorder.on_step(record)
        recorder_s = time.perf_counter() - t

        step += 1
        objs = [Sample(run_id=r[0], step=step, prompt_id=r[2], index=r[3], round=r[4],
                       response=r[5], tokens=r[6], reward=r[7], kept=r[8], advantage=r[9],
                       verifier_error=r[10]) for r in rows]
        t = time.perf_counter()
        with transaction.atomic():
            Sample.objects.bulk_create(objs, batch_size=2000)
        bulk_s = time.perf_counter() - t

        t = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor, cursor.copy(
                f"COPY bench_bare_sample ({', '.join(SAMPLE_COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        bare_s = time.perf_counter() - t
        if rep:
            results["recorder"].append(rows_per_step / recorder_s)
            results["bulk_create"].append(rows_per_step / bulk_s)
            results["bare_copy"].append(rows_per_step / bare_s)

    med = {k: statistics.median(v) for k, v in results.items()}
    summary = {
        "rows_per_step": rows_per_step, "repeats": args.repeats,
        "median_rows_per_s": {k: round(v) for k, v in med.items()},
        "recorder_vs_bare_copy": round(med["recorder"] / med["bare_copy"], 3),
        "recorder_vs_bulk_create": round(med["recorder"] / med["bulk_create"], 2),
        "server": connection.cursor().connection.info.parameter_status("server_version"),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    # Leave nothing behind in a shared database.
    delete_run_records(run.pk)
    run.delete()
    ps.delete()
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_bare_sample")


if __name__ == "__main__":
    main()
