"""The run page's "Prompts revisited" chart (issue 21): a DAPO run's revisits per step as
recorded, and a run recorded before the metric says so instead of drawing nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Prompt, Step

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


def _fig(c: Client, run) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run.pk, "revisits"]))
    assert resp.status_code == 200
    return resp.json()


def test_revisits_chart_draws_the_recorded_counts(owner: User, owner_client: Client) -> None:
    # 8 prompts, B = 4, no signal at pass rate 0: DAPO draws the other 4 as a further batch,
    # so step 2 revisits every prompt it draws.
    ps = make_prompt_set("revisits", size=8)
    Prompt.objects.filter(prompt_set=ps).update(metadata={"pass_rate": 0.0})
    run = record_run(make_run(owner, ps, algorithm="dapo", total_steps=2, batch_size=4))
    recorded = [s.metrics["prompts_revisited"] for s in Step.objects.filter(run=run)
                .order_by("step")]
    fig = _fig(owner_client, run)
    assert fig["layout"]["title"]["text"].startswith("Prompts revisited")
    trace = next(t for t in fig["data"] if t["name"] == "prompts an earlier step drew")
    assert [y for y in trace["y"] if y is not None] == recorded == [0.0, 8.0]
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert 'id="chart-revisits"' in page


def test_a_run_older_than_the_metric_says_so(owner: User, owner_client: Client) -> None:
    run = record_run(make_run(owner, make_prompt_set("old", size=8), algorithm="grpo",
                              total_steps=2))
    for step in Step.objects.filter(run=run):
        step.metrics = {k: v for k, v in step.metrics.items() if k != "prompts_revisited"}
        step.save()
    fig = _fig(owner_client, run)
    assert "older than this metric" in fig["layout"]["annotations"][0]["text"]
