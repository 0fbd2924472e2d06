"""Two requests racing on one object (issue 32, item 5). ``DELETE /runs/N`` at the same moment
as ``POST /runs/N/relaunch`` gave HTTP 500 (an IntegrityError on ``cloned_from``) in 5 of 12 API
races and 2 of 3 dashboard races; a cancel that lost a race answered Django's raw "Run matching
query does not exist.".

Every state-changing endpoint is raced here against the one that conflicts with it, on real
threads against the real PostgreSQL, several rounds each: never a 5xx, the loser a 404 or 409
with a sentence. What makes it hold: a launch, relaunch or retry locks the rows it points at
(``launch.lock_referenced``) in the transaction that stores it, as deletes do; a change that
finds its object gone is ``services.Gone`` (404), one the object's state refuses is
``services.Conflict`` (409)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from api.models import ApiToken
from api.services import create_token
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import PromptSet, Run

from tests.fixtures.services import make_prompts

from .test_api import SIM, Api, _empty_queues  # noqa: F401 (autouse: the queues start empty)

pytestmark = pytest.mark.django_db(transaction=True)
ROUNDS = 4
SENTENCES = ("no run with id", "no prompt set", "already retried", "used by", "is the name of",
             "looks like the name of", "the run is", "No such run.")


def race(*requests: Callable[[], Any]) -> list[tuple[int, str]]:
    """Send the requests at once, each from its own thread (and database connection); their
    (status, body) in order. An exception a view raised counts as a 500."""
    out: list[tuple[int, str]] = [(0, "")] * len(requests)
    barrier = threading.Barrier(len(requests))

    def send(i: int) -> None:
        barrier.wait()
        try:
            response = requests[i]()
            out[i] = (response.status_code, response.content.decode(errors="replace"))
        except Exception as exc:  # noqa: BLE001 - what the server would have answered 500 for
            out[i] = (500, repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def assert_clear(answers: list[tuple[int, str]], allowed: set[int]) -> None:
    """No 5xx; every 4xx a 404 or 409 saying what happened, never Django's raw message."""
    for status, body in answers:
        assert status in allowed, (status, body[:500])
        assert "matching query does not exist" not in body, body[:500]
        if status in (400, 404, 409):
            assert any(s.lower() in body.lower() for s in SENTENCES), body[:500]


@pytest.fixture
def setup(user: Any) -> tuple[Any, Any]:
    ps = services.import_prompt_set(owner=user, name="arith", prompts=make_prompts(12))
    return ps, create_token(user, "t")[1]


def launch(user: Any, ps: Any, name: str = "r") -> Run:
    return services.launch_run(user, name, SIM, ps)


def api_of(token: str) -> Api:
    return Api(token)


def test_delete_against_relaunch_and_cancel(user: Any, setup: Any) -> None:
    ps, token = setup
    for i in range(ROUNDS):
        run = launch(user, ps, f"r{i}")
        answers = race(lambda r=run: api_of(token).delete(f"/runs/{r.pk}"),
                       lambda r=run: api_of(token).post(f"/runs/{r.pk}/relaunch"),
                       lambda r=run: api_of(token).post(f"/runs/{r.pk}/cancel"))
        assert_clear(answers, {200, 201, 204, 404})
        assert answers[0][0] == 204  # the delete always goes through
        assert not Run.objects.filter(pk=run.pk).exists()
    # Two deletes: one deletes, the other is a 404 saying so.
    run = launch(user, ps)
    answers = race(lambda: api_of(token).delete(f"/runs/{run.pk}"),
                   lambda: api_of(token).delete(f"/runs/{run.pk}"))
    assert_clear(answers, {204, 404})
    assert sorted(s for s, _ in answers) == [204, 404]


def test_retries_of_one_failed_run_and_a_delete(user: Any, setup: Any) -> None:
    ps, token = setup
    for _ in range(ROUNDS):
        sweep = services.launch_sweep(user, "s", SIM, {"seed": [0, 1]}, ps)
        failed = sweep.launched_runs[0]
        Run.objects.filter(pk=failed.pk).update(status=Run.Status.FAILED)
        answers = race(lambda f=failed: api_of(token).post(f"/runs/{f.pk}/retry"),
                       lambda f=failed: api_of(token).post(f"/runs/{f.pk}/retry"))
        assert_clear(answers, {201, 409})
        assert sorted(s for s, _ in answers) == [201, 409]
        assert Run.objects.filter(sweep=sweep).count() == 3
        other = sweep.launched_runs[1]
        Run.objects.filter(pk=other.pk).update(status=Run.Status.FAILED)
        answers = race(lambda o=other: api_of(token).post(f"/runs/{o.pk}/retry"),
                       lambda o=other: api_of(token).delete(f"/runs/{o.pk}"),
                       lambda s=sweep: api_of(token).post(f"/sweeps/{s.pk}/cancel"))
        assert_clear(answers, {200, 201, 204, 404})


def test_a_prompt_set_deleted_while_a_run_launches_on_it(user: Any, setup: Any) -> None:
    _, token = setup
    for i in range(ROUNDS):
        ps = services.import_prompt_set(owner=user, name=f"doomed {i}",
                                        prompts=make_prompts(12))
        body = {"name": "on it", "prompt_set": ps.pk, "config": SIM}
        answers = race(lambda p=ps: api_of(token).delete(f"/prompt-sets/{p.pk}"),
                       lambda b=body: api_of(token).post("/runs", b))
        # The launch's loser: a 404 when the set went while it stored its run, a 400 on
        # prompt_set ("no prompt set N") when it went before the launch looked it up.
        assert_clear(answers, {201, 204, 400, 404, 409})
        deleted, launched = answers[0][0] == 204, answers[1][0] == 201
        assert deleted != launched  # exactly one of them won
        assert PromptSet.objects.filter(pk=ps.pk).exists() == launched


def test_uploads_of_one_name_and_of_look_alikes(user: Any, setup: Any) -> None:
    _, token = setup
    for i in range(ROUNDS):
        names = (f"gsm8k {i}", f"gsm8k\u00a0{i}")  # the same name to the eye

        def upload(name: str) -> Any:
            return api_of(token).client.post("/api/v1/prompt-sets", {
                "name": name, "file": SimpleUploadedFile(
                    "p.jsonl", b'{"prompt": "1+1=", "answer": "2"}\n')},
                headers=api_of(token).headers)

        answers = race(lambda n=names[0]: upload(n), lambda n=names[1]: upload(n))
        assert_clear(answers, {201, 409})
        assert sorted(s for s, _ in answers) == [201, 409]


def test_tokens_created_and_revoked_at_once(user: Any) -> None:
    def signed_in() -> Client:
        client = Client()
        client.force_login(user)
        return client

    answers = race(*(lambda i=i: signed_in().post(reverse("account"), {"name": f"t{i}"})
                     for i in range(3)))
    assert_clear(answers, {200})
    token = ApiToken.objects.filter(user=user).first()
    answers = race(*(lambda: signed_in().post(reverse("account_token_revoke", args=[token.pk]))
                     for _ in range(2)))
    assert_clear(answers, {302})
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_dashboard_delete_against_relaunch_retry_and_cancel(user: Any, setup: Any) -> None:
    ps, _ = setup

    def signed_in() -> Client:
        client = Client()
        client.force_login(user)
        return client

    for i in range(ROUNDS):
        sweep = services.launch_sweep(user, f"s{i}", SIM, {"seed": [0, 1]}, ps)
        run = sweep.launched_runs[0]
        Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED)
        answers = race(
            lambda r=run: signed_in().post(reverse("dashboard:run_delete", args=[r.pk])),
            lambda r=run: signed_in().post(reverse("dashboard:run_relaunch", args=[r.pk])),
            lambda r=run: signed_in().post(reverse("dashboard:run_retry", args=[r.pk])),
            lambda r=run: signed_in().post(reverse("dashboard:run_cancel", args=[r.pk])),
            lambda s=sweep: signed_in().post(reverse("dashboard:sweep_cancel", args=[s.pk])))
        assert_clear(answers, {302, 404})
        assert answers[0][0] == 302
