"""The run page's early-rounds charts: shown for runs whose prompts can draw their next round
early, with what the trainer recorded per step; the discarded-tokens chart for speculative runs
too; neither for round-based runs."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Step

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


def _chart(c: Client, run, name: str) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run.pk, name]))
    assert resp.status_code == 200, name
    return resp.json()


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t["name"] == name)


def test_a_speculative_run_charts_its_early_rounds_and_discarded_tokens() -> None:
    from dashboard.charts import charts_for

    owner = User.objects.create_user("owner", password="x-123456")
    prompts = make_prompt_set(size=24)
    run = record_run(make_run(owner, prompts, name="spec", total_steps=3, batch_size=12, seed=3,
                              scheduler="per-prompt", early_rounds="speculative",
                              max_new_tokens=512))
    round_run = record_run(make_run(owner, prompts, name="round", total_steps=2, batch_size=4))
    certain = make_run(owner, prompts, name="certain", scheduler="per-prompt")
    grpo = make_run(owner, prompts, name="grpo", algorithm="grpo", scheduler="per-prompt")
    names = charts_for(run)
    assert {"early_rounds", "early_rounds_saved", "discarded"} <= set(names)
    assert names.index("early_rounds") == names.index("discarded") + 1
    assert not {"early_rounds", "discarded"} & set(charts_for(round_run))
    # certain early rounds are the per-prompt default and discard nothing; GRPO has one round.
    assert "early_rounds" in charts_for(certain) and "discarded" not in charts_for(certain)
    assert "early_rounds" not in charts_for(grpo)

    c = Client()
    c.force_login(owner)
    page = c.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert reverse("dashboard:run_chart", args=[run.pk, "early_rounds"]) in page
    steps = list(Step.objects.filter(run=run).order_by("step"))
    fig = _chart(c, run, "early_rounds")
    assert fig["layout"]["title"]["text"].startswith("Early rounds")
    assert "(rounds)" in fig["layout"]["yaxis"]["title"]["text"]
    started = _trace(fig, "started early")["y"]
    assert started == pytest.approx([s.metrics["early_rounds_started"] for s in steps])
    assert _trace(fig, "discarded: the prompt exited")["y"] == pytest.approx(
        [s.metrics["early_rounds_discarded"] for s in steps])
    assert sum(started) > 0
    saved = _chart(c, run, "early_rounds_saved")
    assert "(s" in saved["layout"]["yaxis"]["title"]["text"]
    assert _trace(saved, "head start of the most helped prompt")["y"] == pytest.approx(
        [s.metrics["early_rounds_saved_s"] for s in steps])
    assert sum(_trace(_chart(c, run, "discarded"),
                      "tokens generated, then discarded")["y"]) > 0
