"""Adding an algorithm is one module, on the platform too: the toy algorithm of
tests/trainer/test_algorithm_registry.py, registered inside this test and nowhere else, is
offered by the launch form, and a run of it, trained with ``trainer.train`` and recorded through
the worker's recorder, is drawn by the run page's charts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dashboard import charts
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Run, Step

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run
from tests.trainer.test_algorithm_registry import TOY
from trainer.algorithms import Algorithm, register_algorithm, unregister_algorithm

pytestmark = pytest.mark.django_db


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    register_algorithm(TOY)
    yield TOY
    unregister_algorithm(TOY.name)


def test_the_launch_form_offers_a_registered_algorithm(toy: Algorithm,
                                                       owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert f'<option value="{toy.name}">{toy.label}</option>' in page


def test_the_run_page_draws_a_toy_algorithms_records(toy: Algorithm, owner: User,
                                                     owner_client: Client) -> None:
    run = record_run(make_run(owner, make_prompt_set(size=12), name="toy", algorithm=toy.name,
                              total_steps=4, batch_size=6))
    assert run.status == Run.Status.QUEUED and run.current_step == 4
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert len(steps) == 4 and all("equal_groups" in s.metrics for s in steps)
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk]))
    assert page.status_code == 200 and toy.label in page.content.decode()
    figures = {}
    for name in charts.charts_for(run):
        resp = owner_client.get(reverse("dashboard:run_chart", args=[run.pk, name]))
        assert resp.status_code == 200, name
        figures[name] = resp.json()
    rewards = next(t for t in figures["rewards"]["data"] if t["name"].startswith("real reward"))
    assert rewards["x"] == [1, 2, 3, 4]
    assert rewards["y"] == pytest.approx([s.metrics["real_reward"] for s in steps])
    samples = [s.samples for s in steps]
    assert samples == [6 * toy.max_samples_per_prompt(run_config(run))] * 4
    budget_traces = {t["name"]: t for t in figures["budget"]["data"]}
    assert any(t["y"] == pytest.approx(samples) for t in budget_traces.values())
    # Its own step metric, declared in its record only, gets a chart of its own.
    own = figures["algorithm_metrics"]
    assert toy.label in own["layout"]["title"]["text"]
    equal = next(t for t in own["data"] if t["name"] == "equal groups")
    assert equal["y"] == [s.metrics["equal_groups"] for s in steps]
    # Without an exit rule, the funnel says so rather than "resolved in round 1".
    assert figures["funnel"]["layout"]["title"]["text"].startswith("One round, no elimination")


def test_a_records_name_fits_the_runs_algorithm_column() -> None:
    """The record refuses a name longer than ``Run.algorithm`` holds (trainer/ never imports
    Django: the two numbers are kept equal here)."""
    from trainer.algorithms.base import MAX_NAME_CHARS

    assert Run._meta.get_field("algorithm").max_length == MAX_NAME_CHARS


def run_config(run: Run):
    from trainer.config import TrainConfig

    return TrainConfig.from_dict(run.config)
