"""Hostile uploads and imports, measured (issue 32, items 2 and 6): what was sent, what came back,
the memory peaks, how long, what was stored. Each case runs in a fresh interpreter (this script
with --case), which takes the upload through the platform's service as a gunicorn thread does:
"web" is that process's peak resident growth, "parser" the peak of each child process that
parsed the file, as it reports it. It measures and asserts nothing
(tests/platform/test_prompt_import.py and tests/platform/test_import_bounds.py assert).

    python scripts/services.py exec --instance bench -- python benchmarks/upload_bombs.py

Cases: the issue's 757-byte zstd Parquet file (300 rows of one 2 MiB prompt), once and four at
once; a 9 KB Parquet file holding one 256 MiB value (tests/fixtures/data/page_bomb.parquet),
with the default limits and with only the parser's memory cap left; a one-line 49 MB JSONL
file; a 1,000,000-row JSONL file (45 MB); the pages and API of a set holding a 49 MB prompt
stored before the limit existed; `import_run` of a 1 MB zip that unzips to 1 GiB. Figures:
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = ("bomb", "bomb-x4", "page-bomb", "page-bomb-memory-only", "huge-prompt",
         "million-rows", "huge-prompt-views", "zip-bomb")


def _mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def make_files(folder: Path, cases: list[str]) -> None:
    """The files the cases send, made here: a case's process measures its own peak memory, which
    making a 49 MB line there would raise before the measurement starts."""
    import zipfile

    if {"bomb", "bomb-x4"} & set(cases):
        import pyarrow as pa
        import pyarrow.parquet as pq

        # As the file was made: a plain string column, 300 rows of one 2 MiB prompt.
        pq.write_table(pa.table({"prompt": ["1" * 2 * 2**20] * 300, "answer": ["2"] * 300}),
                       folder / "bomb.parquet", compression="zstd", compression_level=22)
    if "huge-prompt" in cases:
        (folder / "huge.jsonl").write_text(json.dumps({"prompt": "x" * 49_000_000,
                                                       "answer": "1"}) + "\n")
    if "million-rows" in cases:
        with (folder / "million.jsonl").open("w") as fh:
            for i in range(1_000_000):
                fh.write(json.dumps({"prompt": f"{i}+{i % 997}=", "answer": str(i + i % 997)})
                         + "\n")
    if "zip-bomb" in cases:
        with zipfile.ZipFile(folder / "bundle.zip", "w", compression=zipfile.ZIP_DEFLATED,
                             compresslevel=9) as zf:
            with zf.open("samples.parquet", "w") as entry:
                for _ in range(1024):
                    entry.write(bytes(2**20))
            zf.writestr("manifest.json", "{}")


def uploads(path: Path, count: int, tag: str) -> list[str]:
    from django.contrib.auth.models import AnonymousUser
    from experiments import services

    answers: list[str] = []

    def one(i: int) -> None:
        with open(path, "rb") as f:
            try:
                ps = services.create_prompt_set_from_upload(AnonymousUser(), f"{tag}-{i}", f,
                                                            path.name)
                answers.append(f"{ps.status}, {ps.size:,} prompts")
            except services.LaunchError as exc:
                answers.append(f"refused: {exc.reason}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def run_case(case: str, tmp: Path) -> dict[str, Any]:
    import logging

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from experiments.models import Prompt, PromptSet

    call_command("migrate", verbosity=0)

    def clean(prefix: str) -> None:
        # Raw SQL: the ORM's cascade would load a million prompts to delete them.
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM experiments_prompt WHERE prompt_set_id IN (SELECT id "
                           "FROM experiments_promptset WHERE name LIKE %s)", [prefix + "%"])
            cursor.execute("DELETE FROM experiments_promptset WHERE name LIKE %s",
                           [prefix + "%"])

    # Each parser's own peak (VmHWM), as the importer logs it: getrusage's figure for children
    # counts this process's memory at the fork.
    parser_peaks: list[float] = []

    class Peaks(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            parser_peaks.append(record.args[2])  # type: ignore[index]

    logging.getLogger("experiments.services.prompt_import").addHandler(Peaks())
    tag = f"bench-{case}"
    clean(tag)
    out: dict[str, Any] = {"case": case}
    if case in ("bomb", "bomb-x4"):
        path = tmp / "bomb.parquet"
        out["sent"] = f"{path.stat().st_size:,} bytes" + (" x 4 at once" if case == "bomb-x4"
                                                          else "")
        job = lambda: uploads(path, 4 if case == "bomb-x4" else 1, tag)  # noqa: E731
    elif case.startswith("page-bomb"):
        path = ROOT / "tests" / "fixtures" / "data" / "page_bomb.parquet"
        out["sent"] = f"{path.stat().st_size:,} bytes (one 256 MiB value)"
        if case == "page-bomb-memory-only":
            settings.PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES = 2**40
            settings.PROMPT_UPLOAD_MAX_RECORD_BYTES = 2**40
            settings.PROMPT_MAX_CHARS = 2**40
            settings.PROMPT_IMPORT_MAX_MEMORY_BYTES = 512 * 2**20
            out["sent"] += ", every file limit lifted, parser memory cap 512 MiB"
        job = lambda: uploads(path, 1, tag)  # noqa: E731
    elif case == "huge-prompt":
        path = tmp / "huge.jsonl"
        out["sent"] = f"{path.stat().st_size / 1e6:.0f} MB, one line"
        job = lambda: uploads(path, 1, tag)  # noqa: E731
    elif case == "million-rows":
        path = tmp / "million.jsonl"
        out["sent"] = f"{path.stat().st_size / 1e6:.0f} MB, 1,000,000 lines"

        def job() -> list[str]:
            t0 = time.monotonic()
            answer = uploads(path, 1, tag)
            out["answered_after_s"] = round(time.monotonic() - t0, 1)
            ps = PromptSet.objects.get(name=f"{tag}-0")
            while ps.status == PromptSet.Status.IMPORTING:
                time.sleep(0.5)
                ps.refresh_from_db()
            out["ready_after_s"] = round(time.monotonic() - t0, 1)
            return [*answer, f"then {ps.status}, {ps.size:,} prompts"]
    elif case == "huge-prompt-views":
        from django.contrib.auth.models import User
        from django.db import connection
        from django.test import Client

        # A set stored before the limit existed, its 49 MB prompt made by the database (made
        # here, it would raise this process's peak before the measurement starts).
        user = User.objects.get_or_create(username="bench-viewer")[0]
        ps = PromptSet.objects.create(name=f"{tag}-0", source="upload", size=2)
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO experiments_prompt (prompt_set_id, index, text, answer, "
                           "metadata) VALUES (%s, 0, repeat('y', 49000000), '1', '{}'), "
                           "(%s, 1, '1+1=', '2', '{}')", [ps.pk, ps.pk])
        out["sent"] = "GET of a set holding a 49 MB prompt: its page, its API detail"
        client = Client()
        client.force_login(user)
        settings.ALLOWED_HOSTS = ["*"]
        # The static files from their folders, as the tests serve them (no collectstatic here).
        settings.STORAGES = {**settings.STORAGES, "staticfiles": {
            "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}

        def job() -> list[str]:
            page = client.get(f"/prompt-sets/{ps.pk}/")
            from api.services import create_token

            token = create_token(user, "bench")[1]
            api = client.get(f"/api/v1/prompt-sets/{ps.pk}", HTTP_AUTHORIZATION=f"Bearer {token}")
            return [f"page {page.status_code}, {len(page.content):,} bytes",
                    f"API {api.status_code}, {len(api.content):,} bytes"]
    elif case == "zip-bomb":
        from django.contrib.auth.models import User
        from experiments.imports import ImportError_, import_run

        path = tmp / "bundle.zip"
        out["sent"] = f"{path.stat().st_size / 1e6:.1f} MB zip of 1 GiB"
        scratch = tmp / "scratch"
        scratch.mkdir()
        tempfile.tempdir = str(scratch)
        owner = User.objects.get_or_create(username="bench-ops")[0]

        def job() -> list[str]:
            try:
                import_run(path, owner)
                answer = "imported"
            except ImportError_ as exc:
                answer = f"refused: {exc.reason}"
            written = sum(f.stat().st_size for f in scratch.rglob("*") if f.is_file())
            return [answer, f"{written:,} bytes written to the temporary folder"]
    else:
        raise SystemExit(f"unknown case {case}")
    before = _mib(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    out["answers"] = job()
    out["seconds"] = round(time.monotonic() - t0, 1)
    out["web_peak_growth_mib"] = round(_mib(resource.RUSAGE_SELF) - before, 1)
    out["parser_peaks_mib"] = parser_peaks
    out["stored_prompt_sets"] = PromptSet.objects.filter(name__startswith=tag).count()
    out["stored_prompts"] = Prompt.objects.filter(prompt_set__name__startswith=tag).count()
    clean(tag)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--files", help="the folder of the cases' files (with --case)")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("run it under scripts/services.py exec (DATABASE_URL)")
    if args.case:
        sys.path[:0] = [str(ROOT), str(ROOT / "platform")]
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
        # The request waits for the import as the platform does (2 s) for the million rows;
        # the other cases' answer is the import's outcome: they wait for it.
        if args.case != "million-rows":
            os.environ["PROMPT_UPLOAD_WAIT_SECONDS"] = "600"
        print(json.dumps(run_case(args.case, Path(args.files))))
        return
    cases = args.only.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        make_files(Path(tmp), cases)
        for case in cases:
            done = subprocess.run([sys.executable, __file__, "--case", case, "--files", tmp],
                                  cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                print(f"{case}: failed\n{done.stderr[-2000:]}", flush=True)
                continue
            print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
