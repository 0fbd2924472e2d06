"""The status card: its ETA (the median gap between the run's last steps, evaluation pauses
left out, times the steps left, plus the evaluations left at their measured time, so that an
interruption, a wait for GPUs or a database outage in a run's past does not inflate it for the
rest of the run, and evaluations do not make it jump; none while the run does not train), and
a queued run's place on its queue."""

from __future__ import annotations

import datetime as dt

import pytest
from dashboard import selectors
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from experiments.models import Estimate, EvalResult, Run, Step

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
    assert selectors.run_eta(run).total == dt.timedelta(seconds=200)  # 20 steps x 10 s
    page = owner_client.get(reverse("dashboard:run_status", args=[run.pk])).content.decode()
    assert "ETA 0:03:20 (h:mm:ss)" in page
    # The mean since the start would say 20 x 10 h / 6: over a day and a half.


def test_one_step_extrapolates_from_the_start_and_no_eta_while_not_training(
        owner: User) -> None:
    run = record_run(make_run(owner, make_prompt_set("eta", size=8), total_steps=1))
    run = running(run, total_steps=11, current_step=1,
                  started_at=timezone.now() - dt.timedelta(seconds=30))
    eta = selectors.run_eta(run)
    assert eta is not None and 290 <= eta.total.total_seconds() <= 310  # 10 steps x about 30 s
    assert selectors.run_eta(running(run, waiting_for="waiting for 4 GPUs")) is None
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, waiting_for="")
    run.refresh_from_db()
    assert run.interrupted and selectors.run_eta(run) is None
    assert selectors.run_eta(running(run, current_step=0)) is None


def test_the_eta_counts_the_evaluations_left_and_does_not_jump_across_one(owner: User) -> None:
    """A recorded timeline: 100 steps of 10 s, a held-out evaluation of 60 s after every 20th
    (steps 20, 40, ..., 100). Counting steps only, the ETA fell short by the evaluations to
    come (9:10 at step 45 where 12:10 was left; a user saw it jump between 3:57 and 6:05); now,
    from any moment, now + ETA is the run's true end, between steps and in the middle of an
    evaluation alike."""
    prompt_set = make_prompt_set("eta-evals", size=8)
    start = timezone.now() - dt.timedelta(hours=1)

    def recorded(k: int) -> dt.datetime:  # step k's record: k steps and the evaluations before
        return start + dt.timedelta(seconds=10 * k + 60 * ((k - 1) // 20))

    def evaluated(k: int) -> dt.datetime:
        return recorded(k) + dt.timedelta(seconds=60)

    end = evaluated(100)

    def eta_at(step: int, now: dt.datetime, evaluated_at_step: bool = True) -> selectors.RunEta:
        """The card's ETA at ``now`` for the run as recorded up to ``step`` (and the
        evaluation after it, unless still under way)."""
        run = make_run(owner, prompt_set, total_steps=100, eval_every=20)
        Step.objects.bulk_create([Step(run=run, step=k) for k in range(1, step + 1)])
        evals = [k for k in range(0, step + 1, 20) if k < step or evaluated_at_step]
        EvalResult.objects.bulk_create([EvalResult(run=run, step=k, metrics={}) for k in evals])
        for k in range(1, step + 1):
            Step.objects.filter(run=run, step=k).update(created_at=recorded(k))
        for k in evals:
            EvalResult.objects.filter(run=run, step=k).update(
                created_at=evaluated(k) if k else start)
        Run.objects.filter(pk=run.pk).update(eval_set=prompt_set)
        eta = selectors.run_eta(running(run, current_step=step, started_at=start), now=now)
        assert eta is not None
        return eta

    after_45 = eta_at(45, recorded(45))
    assert after_45.per_step == 10.0 and after_45.eval_seconds == 60.0
    assert after_45.evals_left == 3  # after steps 60, 80 and 100
    assert recorded(45) + after_45.total == end
    assert str(after_45) == ("0:12:10 (h:mm:ss; 3 held-out evaluations of about 0:01:00 "
                             "included)")
    # In the middle of the evaluation after step 60, and just after it.
    during = eta_at(60, recorded(60) + dt.timedelta(seconds=25), evaluated_at_step=False)
    assert during.evals_left == 3  # the one under way, and 80's and 100's
    assert recorded(60) + dt.timedelta(seconds=25) + during.total == end
    assert evaluated(60) + eta_at(60, evaluated(60)).total == end
    assert recorded(99) + eta_at(99, recorded(99)).total == end


def test_evaluations_not_timed_yet_are_named_not_guessed(owner: User) -> None:
    prompt_set = make_prompt_set("eta-untimed", size=8)
    run = record_run(make_run(owner, prompt_set, total_steps=3, eval_every=20))
    Run.objects.filter(pk=run.pk).update(eval_set=prompt_set)
    start = timezone.now() - dt.timedelta(minutes=5)
    for k in range(1, 4):
        Step.objects.filter(run=run, step=k).update(created_at=start + dt.timedelta(seconds=10 * k))
    eta = selectors.run_eta(running(run, total_steps=43, current_step=3, started_at=start))
    assert eta is not None and eta.total == dt.timedelta(seconds=400) and eta.evals_left == 2
    assert str(eta) == "0:06:40 (h:mm:ss; plus 2 held-out evaluations, not timed yet)"


def test_a_queued_run_says_its_place_on_its_queue(owner: User, owner_client: Client) -> None:
    prompt_set = make_prompt_set("queue", size=8)
    t0 = timezone.now() - dt.timedelta(minutes=10)

    def run_at(name: str, queue: str, status: str, minutes: float | None) -> Run:
        run = make_run(owner, prompt_set, name=name)
        Run.objects.filter(pk=run.pk).update(
            queue=queue, status=status,
            enqueued_at=None if minutes is None else t0 + dt.timedelta(minutes=minutes))
        run.refresh_from_db()
        return run

    busy = run_at("busy", "cpu", Run.Status.RUNNING, 0)
    first = run_at("first", "cpu", Run.Status.QUEUED, 1)
    # Launched before the first, but handed back to the queue after it: behind it.
    handed_back = run_at("handed-back", "cpu", Run.Status.QUEUED, 3)
    Run.objects.filter(pk=handed_back.pk).update(current_step=4)
    handed_back.refresh_from_db()
    never_enqueued = run_at("broker-was-down", "cpu", Run.Status.QUEUED, None)
    other_queue = run_at("gpu-run", "gpu", Run.Status.QUEUED, 0.5)
    run_at("done", "cpu", Run.Status.SUCCEEDED, 0.2)
    run_at("gone", "cpu", Run.Status.CANCELLED, 0.3)

    place = selectors.queue_place(first)
    assert (place.place, place.ahead, place.busy_runs) == (1, [], [busy.pk])
    assert place.text == f"1st in the cpu queue; its workers are busy with run #{busy.pk} " \
                         "(running)"
    place = selectors.queue_place(handed_back)
    assert (place.place, place.ahead) == (2, [first.pk])
    assert place.text == (f"2nd in the cpu queue, behind run #{first.pk} (queued); its "
                          f"workers are busy with run #{busy.pk} (running)")
    assert selectors.queue_place(never_enqueued).ahead == [first.pk, handed_back.pk]
    # Another queue's runs are not in the way; nothing runs there.
    place = selectors.queue_place(other_queue)
    assert (place.place, place.ahead, place.busy_runs) == (1, [], [])
    assert place.text == ("1st in the gpu queue; no run holds its workers, so one takes it "
                          "shortly (if one is up)")
    # An estimate on the queue holds a worker too.
    estimate = Estimate.objects.create(owner=owner, prompt_set=prompt_set, model="m", config={},
                                       key="k", queue="gpu", samples_per_prompt=4,
                                       num_prompts=8, status=Estimate.Status.RUNNING)
    assert selectors.queue_place(other_queue).text == (
        f"1st in the gpu queue; its workers are busy with estimate #{estimate.pk} (running)")
    assert selectors.queue_place(busy) is None

    page = owner_client.get(reverse("dashboard:run_status", args=[handed_back.pk]))
    assert (f"interrupted, waiting to resume from its last checkpoint: 2nd in the cpu queue, "
            f"behind run #{first.pk} (queued)") in page.content.decode()
    page = owner_client.get(reverse("dashboard:run_status", args=[never_enqueued.pk]))
    text = page.content.decode()
    assert (f"3rd in the cpu queue, behind runs #{first.pk}, #{handed_back.pk} (queued); its "
            f"workers are busy with run #{busy.pk} (running); not on the broker yet") \
        in text
