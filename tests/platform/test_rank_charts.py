"""The run page across ranks (world_size > 1): where the run executes (nodes, ranks, the device
of each) and each rank's per-step split of its time, with the straggler standing out. The steps
are written through the platform's recorder, with the ranks a distributed learner reports."""

from __future__ import annotations

import pytest
from dashboard import charts, selectors
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Run, Step

from trainer.types import StepRecord

from .dashboard_fixtures import (
    NODES,
    make_prompt_set,
    make_run,
    ranks,
    record,
    two_node_run,
    write_step,
)

pytestmark = pytest.mark.django_db

def _chart(c: Client, run: Run, name: str) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run.pk, name]))
    assert resp.status_code == 200
    return resp.json()


def test_the_recorder_stores_each_ranks_step_and_the_latest_placement(owner: User) -> None:
    run = two_node_run(owner)
    record(run)
    stored = Step.objects.get(run=run, step=2).ranks
    assert [r["rank"] for r in stored] == [0, 1, 2, 3]
    assert stored[2]["generation_s"] == 16.0 and stored[2]["node"] == "10.0.0.2"
    assert selectors.run_placement(run.pk) == [
        {"rank": k, "role": "train+rollout", "node": NODES[k],
         "device": f"NVIDIA H100 80GB HBM3 (cuda:{k % 2})"}
        for k in range(4)]
    series = selectors.rank_series(run.pk, ("generation_s", "update_s"))
    assert series.steps == [1, 2, 3] and series.totals(2) == [14.0, 20.0, 20.0]


def test_run_page_says_where_the_run_executes_and_charts_each_rank(
        owner: User, owner_client: Client) -> None:
    run = two_node_run(owner)
    record(run)
    assert {"rank_times", "rank_split"} <= set(charts.charts_for(run))
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert "Across ranks: where the run executes" in page
    table = page[page.index('id="run-placement"'):page.index("</table>", page.index(
        'id="run-placement"'))]
    assert "4 ranks on 2 nodes" in table
    assert ('<td>2</td><td class="rank-role">train+rollout</td><td>10.0.0.2</td>'
            '<td>NVIDIA H100 80GB HBM3 (cuda:0)</td>') in table
    for name in ("rank_times", "rank_split"):
        assert f'id="chart-{name}"' in page

    times = _chart(owner_client, run, "rank_times")
    # The straggler is named in the title and drawn apart from its peers.
    title = times["layout"]["title"]["text"]
    assert "slowest: rank 2 (10.0.0.2)" in title and "slowest in 2 of 3 steps" in title
    by_name = {t["name"]: t for t in times["data"]}
    assert set(by_name) == {"rank 0", "rank 1", "rank 2 (slowest)", "rank 3"}
    slow = by_name["rank 2 (slowest)"]
    assert slow["line"]["color"] == charts.STRAGGLER_COLOR
    assert {by_name[f"rank {k}"]["line"]["color"] for k in (0, 1, 3)} == {charts.PEER_COLOR}
    assert slow["y"] == pytest.approx([14.17, 20.17, 20.17])
    assert times["layout"]["yaxis"]["title"]["text"] == "rank's step time (s)"

    split = _chart(owner_client, run, "rank_split")
    assert [t["name"] for t in split["data"]] == ["generation", "update", "weight gather",
                                                  "engine load"]
    assert split["layout"]["barmode"] == "stack"
    generation = split["data"][0]
    assert generation["x"][2].startswith("rank 2 (slowest)")
    assert generation["y"] == pytest.approx([10.0, 10.0, 14.0, 10.5])
    assert "mean over 3 steps" in split["layout"]["title"]["text"]


def test_a_one_process_run_has_no_rank_section(owner: User, owner_client: Client) -> None:
    run = make_run(owner, make_prompt_set(name="one"), total_steps=2)
    write_step(run, StepRecord(step=1, metrics={"time_step": 1.0}, rounds=[], prompts=[],
                               samples=[]))
    assert Step.objects.get(run=run).ranks == []
    assert not {"rank_times", "rank_split"} & set(charts.charts_for(run))
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert "Across ranks" not in page and selectors.run_placement(run.pk) == []


def test_before_the_first_step_the_section_says_what_it_will_show(
        owner: User, owner_client: Client) -> None:
    run = two_node_run(owner)
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert "4 ranks asked for; where they run shows here after the first step" in page
    assert _chart(owner_client, run, "rank_times")["layout"]["annotations"][0]["text"] == (
        "no steps recorded yet")


def test_a_split_runs_page_says_which_rank_generates_and_which_trains(
        owner: User, owner_client: Client) -> None:
    """A rollout/train split (rollout_ranks = 2 of 4): the placement table's role column, the
    caption's count of each role, the roles in the charts' rank names. Steps recorded before
    the split (no role in their ranks) read as ranks that do both."""
    from dataclasses import replace

    run = two_node_run(owner)
    Run.objects.filter(pk=run.pk).update(config={**run.config, "rollout_ranks": 2})
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert "4 ranks asked for (2 rollout ranks, the others training); where they run" in page
    roles = ("train", "train", "rollout", "rollout")
    for step in (1, 2):
        write_step(run, StepRecord(step=step, metrics={"time_step": 20.0}, rounds=[],
                                   prompts=[], samples=[],
                                   ranks=[replace(r, role=roles[r.rank]) for r in ranks(step)]))
    assert [r["role"] for r in Step.objects.get(run=run, step=2).ranks] == list(roles)
    assert [(r["rank"], r["role"]) for r in selectors.run_placement(run.pk)] == list(
        enumerate(roles))
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    table = page[page.index('id="run-placement"'):page.index("</table>", page.index(
        'id="run-placement"'))]
    assert "4 ranks on 2 nodes (the latest step's): 2 rollout ranks generating, 2 train ranks " \
           "training" in table
    assert ('<td>2</td><td class="rank-role">rollout</td><td>10.0.0.2</td>'
            '<td>NVIDIA H100 80GB HBM3 (cuda:0)</td>') in table
    assert ('<td>0</td><td class="rank-role">train</td><td>10.0.0.1</td>'
            '<td>NVIDIA H100 80GB HBM3 (cuda:0)</td>') in table
    assert "the rollout ranks generate every request" in page
    names = [t["name"] for t in _chart(owner_client, run, "rank_times")["data"]]
    assert names == ["rank 0 train", "rank 1 train", "rank 2 rollout (slowest)",
                     "rank 3 rollout"]
    labels = _chart(owner_client, run, "rank_split")["data"][0]["x"]
    assert [x.split("<br>")[0] for x in labels] == names

    # A step recorded before roles existed: its ranks did both.
    Step.objects.filter(run=run, step=2).update(ranks=[
        {k: v for k, v in r.items() if k != "role"} for r in Step.objects.get(run=run,
                                                                              step=2).ranks])
    assert {r["role"] for r in selectors.run_placement(run.pk)} == {"train+rollout"}
    assert selectors.placement_split(selectors.run_placement(run.pk)) is None
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert '<td>3</td><td class="rank-role">train+rollout</td>' in page
    assert "rollout ranks generating" not in page
