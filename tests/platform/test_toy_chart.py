"""An algorithm's own run-page chart, declared as data in its record (``Algorithm.charts``,
``trainer.charts.ChartSpec``), proven by a toy defined in this file alone: registered here, a
run of it (trained through ``trainer.train``, recorded as a worker records it) gets the chart on
its page where the chart asked to be, drawn by the dashboard's generic builder with its title,
axis titles, legend names, recorded values and reference line; no other run gets it, and it
goes with the record."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from dashboard import charts
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Step

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run
from tests.trainer.test_algorithm_registry import TOY
from trainer.advantages import signal_groups
from trainer.algorithms import Algorithm, ChartSpec, Panel, register_algorithm, unregister_algorithm
from trainer.types import count, fraction

pytestmark = pytest.mark.django_db


def toy_metrics(config: object, res: object, allocation: object) -> dict[str, float]:
    equal = float(np.sum(~signal_groups(res)))
    return {"toy_dropped": equal, "toy_kept_share": 1 - equal / res.num_prompts}


CHART = ChartSpec(
    "toy_dropped", "Toy: groups dropped for equal rewards",
    (Panel("groups dropped (groups)", (("toy_dropped", "groups with equal rewards"),),
           reference=lambda c: (f"the whole batch: B = {c.batch_size}", c.batch_size)),
     Panel("share of the batch kept (0-1)", (("toy_kept_share", "groups kept"),))),
    after="signal", tall=True,
    caption="Look for steps where most groups are dropped: the batch then trains on few.")

CHARTED = dataclasses.replace(
    TOY, name="toy-charted", label="Toy with a chart of its own",
    step_metrics={"toy_dropped": count("groups dropped for equal rewards", "groups"),
                  "toy_kept_share": fraction("share of the batch kept")},
    extra_metrics=toy_metrics, charts=(CHART,))


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    register_algorithm(CHARTED)
    yield CHARTED
    unregister_algorithm(CHARTED.name)


def _chart(c: Client, run_id: int, name: str) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run_id, name]))
    assert resp.status_code == 200, name
    return resp.json()


def test_an_algorithms_declared_chart_is_on_its_runs_page(toy: Algorithm, owner: User,
                                                          owner_client: Client) -> None:
    ps = make_prompt_set(size=12)
    run = record_run(make_run(owner, ps, name="toy", algorithm=toy.name, total_steps=3,
                              batch_size=6))
    grpo = make_run(owner, ps, name="grpo", algorithm="grpo", total_steps=3, batch_size=6)
    # On the toy's page, right after the chart it names; drawn by the generic chart of an
    # algorithm's metrics no more (its chart draws them).
    assert charts.charts_for(run)[3:5] == ["signal", "toy_dropped"]
    assert "algorithm_metrics" not in charts.charts_for(run)
    assert "toy_dropped" not in charts.charts_for(grpo)
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert page.index('id="chart-signal"') < page.index('id="chart-toy_dropped"') \
        < page.index('id="chart-revisits"')
    assert 'class="chart tall" id="chart-toy_dropped"' in page
    # Its caption, the sentence under it.
    assert f'id="caption-toy_dropped">{CHART.caption}</figcaption>' in page

    fig = _chart(owner_client, run.pk, "toy_dropped")
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert fig["layout"]["title"]["text"] == CHART.title
    assert [fig["layout"][k]["title"]["text"] for k in ("yaxis", "yaxis2")] == [
        "groups dropped (groups)", "share of the batch kept (0-1)"]
    assert fig["layout"]["xaxis"]["title"]["text"] == charts.STEP_TITLE
    assert fig["layout"]["xaxis"]["anchor"] == "y2"  # the step axis under the lowest panel
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["groups with equal rewards"]["y"] == [s.metrics["toy_dropped"] for s in steps]
    assert by_name["groups kept"]["y"] == [s.metrics["toy_kept_share"] for s in steps]
    assert by_name["groups kept"]["yaxis"] == "y2"
    assert by_name["the whole batch: B = 6"]["y"] == [6, 6, 6]
    assert any(s.metrics["toy_dropped"] > 0 for s in steps)
    # The share is pinned to its declared domain.
    assert fig["layout"]["yaxis2"]["range"] == pytest.approx([-0.02, 1.02])


def test_the_chart_goes_with_its_record(owner: User, owner_client: Client) -> None:
    register_algorithm(CHARTED)
    try:
        run = record_run(make_run(owner, make_prompt_set(size=8), name="toy",
                                  algorithm=CHARTED.name, total_steps=1, batch_size=4))
        assert "toy_dropped" in charts.RUN_CHARTS
    finally:
        unregister_algorithm(CHARTED.name)
    assert "toy_dropped" not in charts.RUN_CHARTS
    resp = owner_client.get(reverse("dashboard:run_chart", args=[run.pk, "toy_dropped"]))
    assert resp.status_code == 404


def test_a_record_declares_only_charts_of_its_metrics() -> None:
    with pytest.raises(ValueError, match="'toy_missing', which is no step metric"):
        dataclasses.replace(CHARTED, charts=(ChartSpec("toy_other", "Other", (
            Panel("x (groups)", (("toy_missing", "missing"),)),)),))
    with pytest.raises(ValueError, match="kind must be one of lines, stacked"):
        ChartSpec("toy_bars", "Bars", CHART.panels, kind="bars")
    register_algorithm(CHARTED)
    try:
        other = dataclasses.replace(CHARTED, name="toy-other", charts=(
            dataclasses.replace(CHART, title="Another chart of the same name"),))
        with pytest.raises(ValueError, match="chart 'toy_dropped' is declared otherwise by "
                                             "toy-charted"):
            register_algorithm(other)
    finally:
        unregister_algorithm(CHARTED.name)
