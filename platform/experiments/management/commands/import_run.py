"""``python manage.py import_run DIR``: a trainer CLI run (or an export bundle) as a finished
run of the platform. Idempotent: the same DIR again updates the run it made."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from experiments.imports import import_run
from experiments.services import LaunchError


class Command(BaseCommand):
    help = ("Import a trainer CLI run (DIR/events.jsonl from `python -m trainer run --out DIR`, "
            "with its config and checkpoints' metadata) or an export bundle (a folder or its "
            "zip) as a finished run. Importing the same DIR again updates that run.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dir", metavar="DIR")
        parser.add_argument("--owner", help="username of the run's owner (default: the first "
                            "superuser)")
        parser.add_argument("--name", help="the run's name (default: DIR's name, or the "
                            "bundle's run name)")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        if options["owner"]:
            owner = users.filter(username=options["owner"]).first()
            if owner is None:
                raise CommandError(f"owner: no user {options['owner']!r}")
        else:
            owner = users.filter(is_superuser=True).order_by("pk").first()
            if owner is None:
                raise CommandError("owner: no superuser exists; pass --owner USERNAME")
        try:
            result = import_run(options["dir"], owner, name=options["name"])
        except LaunchError as exc:
            raise CommandError(f"{exc.field}: {exc.reason}") from exc
        run = result.run
        verb = "imported" if result.created else "updated"
        self.stdout.write(f"{verb} run {run.pk} ({run.name}): {run.status}, {run.current_step} "
                          f"of {run.total_steps} steps, {run.samples_spent} samples, prompt set "
                          f"{run.prompt_set.name}")
