"""The status card's ETA: the median gap between the run's last steps times the steps left, so
that an interruption, a wait for GPUs or a database outage in a run's past does not inflate it
for the rest of the run; none while the run does not train."""

from __future__ import annotations

import datetime as dt

import pytest
from dashboard import selectors
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from experiments.models import Run, Step

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


def running(run: Run, **fields: object) -> Run:
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, **fields)
    run.refresh_from_db()
    return run


def test_the_eta_is_the_recent_step_time_times_the_steps_left(owner: User,
                                                             owner_client: Client) -> None:
    run = record_run(make_run(owner, make_prompt_set("eta", size=8), total_steps=6))
    start = timezone.now() - dt.timedelta(hours=10)
    # Steps 10 s apart, with a 9-hour interruption between steps 3 and 4.
    for step in range(1, 7):
        at = start + dt.timedelta(seconds=10 * step, hours=9 if step > 3 else 0)
        Step.objects.filter(run=run, step=step).update(created_at=at)
    run = running(run, total_steps=26, current_step=6, started_at=start)
    assert selectors.run_eta(run) == dt.timedelta(seconds=200)  # 20 steps x 10 s
    page = owner_client.get(reverse("dashboard:run_status", args=[run.pk])).content.decode()
    assert "ETA 0:03:20 (h:mm:ss)" in page
    # The mean since the start would say 20 x 10 h / 6: over a day and a half.


def test_one_step_extrapolates_from_the_start_and_no_eta_while_not_training(
        owner: User) -> None:
    run = record_run(make_run(owner, make_prompt_set("eta", size=8), total_steps=1))
    run = running(run, total_steps=11, current_step=1,
                  started_at=timezone.now() - dt.timedelta(seconds=30))
    eta = selectors.run_eta(run)
    assert eta is not None and 290 <= eta.total_seconds() <= 310  # 10 steps x about 30 s
    assert selectors.run_eta(running(run, waiting_for="waiting for 4 GPUs")) is None
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, waiting_for="")
    run.refresh_from_db()
    assert run.interrupted and selectors.run_eta(run) is None
    assert selectors.run_eta(running(run, current_step=0)) is None
