"""One user cannot take the platform (issue 32, item 3). One user launched 60 runs in 2.2 s and
then a 100-run sweep in one request, all accepted, and the queue was first-in first-out; API
tokens had no throttle (158 wrong tokens a second, never a 429).

Now a user holds at most ``RUN_MAX_ACTIVE_PER_USER`` queued or running runs (429 naming the
setting), workers take queued runs in fair order between users (``take_next_run``), and wrong
tokens and launches are throttled (429 with ``Retry-After``)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from api.services import create_token
from django.db import connection
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import Run

from rada.cli import EXIT_LIMIT, exit_code
from rada.client import ApiError
from tests.fixtures.services import make_prompts, wait_for

from .test_api import SIM, Api, _empty_queues  # noqa: F401 (autouse: the queues start empty)
from .test_dashboard_views import _launch_data

ONE_STEP = SIM | {"total_steps": 1, "max_rounds": 1, "save_every": 0}


@pytest.fixture
def arith(user: Any) -> Any:
    return services.import_prompt_set(owner=user, name=f"arith-{uuid.uuid4().hex[:6]}",
                                      prompts=make_prompts(12))


def address() -> str:
    """A client address of the test's own: the throttles' counts are per address."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


@pytest.mark.django_db
def test_a_user_holds_at_most_the_active_run_limit(user: Any, other_user: Any, arith: Any,
                                                   settings: Any) -> None:
    settings.RUN_MAX_ACTIVE_PER_USER = 3
    api = Api(create_token(user, "t")[1])
    launch = {"name": "r", "prompt_set": arith.pk, "config": ONE_STEP}
    ids = [api.post("/runs", launch).json()["id"] for _ in range(3)]
    refused = api.post("/runs", launch)
    assert refused.status_code == 429, refused.content
    error = refused.json()["errors"][0]
    assert error["field"] == "runs"
    assert "you have 3 runs queued or running" in error["reason"]
    assert "at most 3 (RUN_MAX_ACTIVE_PER_USER)" in error["reason"]
    assert "Retry-After" not in refused  # it depends on runs ending, not on time
    sweep = api.post("/sweeps", launch | {"grid": {"seed": [0, 1]}})
    assert sweep.status_code == 429 and "these 2 runs would make 5" in sweep.json()["detail"]
    assert api.post(f"/runs/{ids[0]}/relaunch").status_code == 429
    # Another user is not held back by the first one's runs.
    other = Api(create_token(other_user, "t")[1])
    assert other.post("/runs", launch).status_code == 201
    # A finished (here: cancelled) run frees its place.
    assert api.post(f"/runs/{ids[0]}/cancel").status_code == 200
    assert api.post("/runs", launch).status_code == 201
    assert Run.objects.filter(owner=user).count() == 4
    # The dashboard's launch form says the same, at the top of the form.
    client = Client()
    client.force_login(user)
    page = client.post(reverse("dashboard:run_launch"), _launch_data(arith, **ONE_STEP))
    assert "RUN_MAX_ACTIVE_PER_USER" in page.content.decode()
    assert Run.objects.filter(owner=user).count() == 4
    # rada prints the API's sentence and exits with its code for a limit.
    assert exit_code(ApiError(429, error["reason"], [error])) == EXIT_LIMIT


@pytest.mark.django_db(transaction=True)
def test_launches_racing_at_the_limit_take_exactly_the_places_left(
        user: Any, arith: Any, settings: Any) -> None:
    settings.RUN_MAX_ACTIVE_PER_USER = 3
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def launch(i: int) -> None:
        barrier.wait()
        try:
            services.launch_run(user, f"race {i}", ONE_STEP, arith)
            outcomes.append("launched")
        except services.LimitReached:
            outcomes.append("limit")
        finally:
            connection.close()

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["launched"] * 3 + ["limit"] * 3
    assert Run.objects.filter(owner=user, status=Run.Status.QUEUED).count() == 3


@pytest.mark.django_db
def test_wrong_tokens_are_throttled_per_address_with_retry_after(user: Any,
                                                                 settings: Any) -> None:
    settings.API_AUTH_FAILURE_RATE = "5/min"
    token = create_token(user, "t")[1]
    client, here = Client(), address()

    def get(bearer: str, addr: str = here) -> Any:
        return client.get("/api/v1/me", headers={"Authorization": f"Bearer {bearer}"},
                          REMOTE_ADDR=addr)

    assert [get(f"rada_wrong{i}").status_code for i in range(5)] == [401] * 5
    throttled = get("rada_wrong5")
    assert throttled.status_code == 429
    assert 1 <= int(throttled["Retry-After"]) <= 60
    assert "too many wrong API tokens from this address (at most 5/min, " \
        "API_AUTH_FAILURE_RATE): try again in" in throttled.json()["detail"]
    # While throttled, a right token from that address is refused too (the answer must not
    # tell a guess that hit from one that missed); another address is not held back.
    assert get(token).status_code == 429
    assert get(token, address()).status_code == 200
    # A forged X-Forwarded-For is no new address (NINJA_NUM_PROXIES is 0 here).
    forged = client.get("/api/v1/me", headers={"Authorization": "Bearer x",
                                               "X-Forwarded-For": address()}, REMOTE_ADDR=here)
    assert forged.status_code == 429


@pytest.mark.django_db
def test_launches_are_throttled_per_user_with_retry_after(user: Any, arith: Any,
                                                          settings: Any) -> None:
    settings.LAUNCH_RATE = "3/min"
    api = Api(create_token(user, "t")[1])
    launch = {"name": "r", "prompt_set": arith.pk, "config": ONE_STEP}
    assert [api.post("/runs", launch).status_code for _ in range(3)] == [201] * 3
    refused = api.post("/sweeps", launch | {"grid": {"seed": [0, 1]}})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert "LAUNCH_RATE" in refused.json()["detail"]
    run = Run.objects.filter(owner=user).first()
    client = Client()
    client.force_login(user)
    page = client.post(reverse("dashboard:run_relaunch", args=[run.pk]), follow=True)
    assert "Too many launches: try again in" in page.content.decode()
    assert Run.objects.filter(owner=user).count() == 3


def _queue_runs(owner: Any, prompt_set: Any, n: int) -> list[Run]:
    return [services.launch_run(owner, f"{owner.username} {i}", ONE_STEP, prompt_set)
            for i in range(n)]


@pytest.mark.django_db
def test_workers_take_queued_runs_in_fair_order_between_users(
        user: Any, other_user: Any, arith: Any) -> None:
    from dashboard.selectors import fair_queue

    alice = _queue_runs(user, arith, 4)      # launched first, all four
    bob = _queue_runs(other_user, arith, 2)  # launched after
    predicted = fair_queue("cpu")
    taken = []
    for i in range(6):
        # Any message (here always alice's first run's) takes the next run in fair order.
        run = services.take_next_run(alice[0].pk, f"worker-{i}")
        assert run is not None
        taken.append(run.pk)
        services.finish_run(run.pk, f"worker-{i}", Run.Status.SUCCEEDED)
    a, b = [r.pk for r in alice], [r.pk for r in bob]
    assert taken == [a[0], b[0], a[1], b[1], a[2], a[3]]
    assert predicted == taken  # the run page's queue place says the same order
    assert services.take_next_run(alice[0].pk, "late") is None  # nothing left: a no-op


@pytest.mark.django_db
def test_a_user_with_runs_executing_waits_behind_one_without(user: Any, other_user: Any,
                                                             arith: Any) -> None:
    first, *alice = _queue_runs(user, arith, 3)
    assert services.take_next_run(first.pk, "w1").pk == first.pk  # alice executes one
    bob = _queue_runs(other_user, arith, 1)
    # A second worker: bob has nothing executing, alice has one.
    assert services.take_next_run(alice[0].pk, "w2").pk == bob[0].pk
    assert services.take_next_run(alice[0].pk, "w3").pk == alice[0].pk


def test_two_users_interleave_on_a_real_worker(start_worker: Any, user: Any, other_user: Any,
                                               settings: Any) -> None:
    arith = services.import_prompt_set(owner=user, name="arith", prompts=make_prompts(12))
    # All queued before the worker is up, alice's first: first-in first-out would run
    # alice, alice, bob. (Each run costs a run process's start: three are enough.)
    alice = _queue_runs(user, arith, 2)
    bob = _queue_runs(other_user, arith, 1)
    start_worker("cpu")
    runs = alice + bob

    def all_done() -> bool:
        return all(r.status == Run.Status.SUCCEEDED for r in Run.objects.filter(
            pk__in=[x.pk for x in runs]))

    wait_for(all_done, 240, what="the three runs to succeed")
    started = list(Run.objects.filter(pk__in=[r.pk for r in runs]).order_by(
        "started_at").values_list("owner__username", flat=True))
    assert started == ["alice", "bob", "alice"]
