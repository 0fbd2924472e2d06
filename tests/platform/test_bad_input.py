"""Each input that once gave an HTTP 500 now gets a clear answer (test_no_server_errors.py sends
random ones to every page; these are the known cases, checked by what the user sees)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from experiments.models import Run

from .dashboard_fixtures import make_prompt_set, make_run
from .test_dashboard_views import _launch_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(user: User) -> Client:  # user: tests/fixtures/services.py
    c = Client()
    c.force_login(user)
    return c


@pytest.mark.parametrize("clone", ["abc", "²", "-1", "0", "99999999999999999999999"])
def test_clone_of_no_run_is_404(client: Client, clone: str) -> None:
    assert client.get(reverse("dashboard:run_launch"), {"clone": clone}).status_code == 404


@pytest.mark.parametrize("value", ["abc", "²", "٣", "2147483648", "-3", "1\x00"])
def test_malformed_numbers_in_query_strings_are_ignored(client: Client, user: User,
                                                         value: str) -> None:
    ps = make_prompt_set()
    run = make_run(user, ps, name="listed")
    listing = client.get(reverse("dashboard:run_list"), {"prompt_set": value, "q": value})
    assert listing.status_code == 200
    assert client.get(reverse("dashboard:run_launch"), {"prompt_set": value}).status_code == 200
    chart = client.get(reverse("dashboard:run_chart", args=[run.pk, "rewards"]),
                       {"points": value})
    assert chart.status_code == 200 and chart.json()["data"]
    compare = client.get(reverse("dashboard:compare_chart"), {"runs": f"{value},{run.pk}"})
    assert compare.status_code == 200
    history = client.get(reverse("dashboard:prompt_history", args=[run.pk, ps.prompts.first().pk]),
                         {"before": value})
    assert history.status_code in (200, 400)


def test_relaunch_of_a_config_that_no_longer_validates(client: Client, user: User) -> None:
    run = make_run(user, make_prompt_set(), name="old")
    Run.objects.filter(pk=run.pk).update(config={**run.config, "samples_per_round": 1})
    resp = client.post(reverse("dashboard:run_relaunch", args=[run.pk]))
    # Back to the launch form as a clone of the run, where the field can be fixed.
    assert resp.status_code == 302
    assert resp["Location"] == reverse("dashboard:run_launch") + f"?clone={run.pk}"
    (message,) = get_messages(resp.wsgi_request)
    assert "Cannot relaunch old: samples_per_round: must be >= group_size" in str(message)
    assert Run.objects.count() == 1
    page = client.get(resp["Location"])
    assert page.status_code == 200 and "Cannot relaunch old" in page.content.decode()


def test_relaunch_and_clone_of_a_200_character_name(client: Client, user: User) -> None:
    run = make_run(user, make_prompt_set(), name="n" * 200)
    resp = client.post(reverse("dashboard:run_relaunch", args=[run.pk]))
    assert resp.status_code == 302
    new = Run.objects.exclude(pk=run.pk).get()
    assert len(new.name) == 200 and new.name.endswith("n (relaunch)")
    form = client.get(reverse("dashboard:run_launch"), {"clone": run.pk}).context["form"]
    assert len(form.initial["name"]) == 200 and form.initial["name"].endswith(" (clone)")


@pytest.mark.parametrize(("field", "value"), [("seed", 2**31), ("total_steps", 2**31),
                                              ("seed", 2**63), ("batch_size", 2**64)])
def test_numbers_past_the_database_columns_are_form_errors(client: Client, field: str,
                                                           value: int) -> None:
    ps = make_prompt_set()
    data = _launch_data(ps, **{"batch_size": 4, field: value})
    resp = client.post(reverse("dashboard:run_launch"), data)
    assert resp.status_code == 200
    assert resp.context["form"].errors.get(field), resp.context["form"].errors
    assert Run.objects.count() == 0


def test_run_name_longer_than_its_column_is_a_launch_error(user: User) -> None:
    from experiments.services import LaunchError, launch_run

    ps = make_prompt_set()
    with pytest.raises(LaunchError) as err:
        launch_run(user, "x" * 201, {"backend": "simulated", "batch_size": 4}, ps)
    assert err.value.field == "name" and "at most 200 characters" in err.value.reason
