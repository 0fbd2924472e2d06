"""``python manage.py export_run RUN_ID OUT.zip``: a run's Parquet bundle written on the server,
for exports past a proxy's request timeout, or without the web server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from experiments import bundles
from experiments.models import Run


class Command(BaseCommand):
    help = ("Write a run's Parquet bundle (the zip of the API's /runs/{id}/export and the run "
            "page's Export button) to a file.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=int, metavar="RUN_ID")
        parser.add_argument("out", type=Path, metavar="OUT.zip")

    def handle(self, *args: Any, **options: Any) -> None:
        run = Run.objects.select_related("owner", "prompt_set").filter(
            pk=options["run_id"]).first() if 0 < options["run_id"] < 2**63 else None
        if run is None:
            raise CommandError(f"run_id: no run {options['run_id']}")
        out: Path = options["out"]
        if out.is_dir():
            out = out / bundles.bundle_filename(run)
        try:
            with open(out, "wb") as fh:
                info = bundles.write_bundle(run, fh)
        except OSError as exc:
            raise CommandError(f"out: cannot write {out}: {exc.strerror}") from exc
        rows = ", ".join(f"{n} {name}" for name, n in info["rows"].items())
        self.stdout.write(f"run {run.pk} ({run.name}): {out} ({out.stat().st_size / 2**20:.1f} "
                          f"MiB; {rows})")
