"""Sweeps on a real PostgreSQL and a real Redis broker: grid parsing and expansion, all-or-nothing
launch, aggregate status and cancel-all (no worker here)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
import redis
from django.core.exceptions import PermissionDenied
from experiments import selectors, services
from experiments.models import Run, Sweep
from experiments.services import LaunchError

SIM = {"backend": "simulated", "batch_size": 4, "total_steps": 3}


def queued_run_ids(queue: str = "cpu") -> list[int]:
    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])
    return [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0]
            for m in client.lrange(queue, 0, -1)]


@pytest.fixture(autouse=True)
def _empty_queues() -> None:
    redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).delete("cpu", "gpu")


def test_parse_sweep_spec_types_values_by_field() -> None:
    grid = services.parse_sweep_spec(
        "algorithm=grpo, ada-pos,ada-balance; seed=0..2\nlr=1e-4,2e-4; std_normalize=on,default")
    assert grid == [("algorithm", ["grpo", "ada-pos", "ada-balance"]), ("seed", [0, 1, 2]),
                    ("lr", [1e-4, 2e-4]), ("std_normalize", [True, None])]
    assert services.sweep_points(grid[:2])[:4] == [
        {"algorithm": "grpo", "seed": 0}, {"algorithm": "grpo", "seed": 1},
        {"algorithm": "grpo", "seed": 2}, {"algorithm": "ada-pos", "seed": 0}]


@pytest.mark.parametrize("spec, reason", [
    ("", "needs a field"),
    ("seed", "expected field=value"),
    ("sed=1,2", "did you mean 'seed'"),
    ("prompts=a.jsonl", "not sweepable"),
    ("seed=1,x", "'x' is not an integer"),
    ("seed=3..1", "range '3..1' is empty (a..b needs a <= b)"),
    ("lr=fast", "not a number"),
    ("passive_filtering=maybe", "not one of"),
    ("seed=1,1", "appears twice"),
    ("seed=1; seed=2", "swept twice"),
    # The limit is named, with the count (issue 27: "empty or too long").
    ("seed=0..200", "seed: range '0..200' is 201 runs; a sweep launches at most 64"),
    ("seed=0..20; lr=1e-4,2e-4,3e-4,4e-4,5e-4",
     "105 runs (21 x 5); a sweep launches at most 64"),
    # Paired axes.
    ("(algorithm, group_size)=(grpo, 16), (ada-balance)",
     "(algorithm, group_size): (ada-balance) has 1 value; each tuple needs 2, one per field"),
    ("algorithm,group_size=grpo,16", "to pair fields, write (algorithm, group_size)=("),
    ("(algorithm, grup_size)=(grpo, 4)", "grup_size: no such config field (did you mean"),
    ("(seed, seed)=(0, 1)", "seed: swept twice"),
    ("(algorithm, seed)=(grpo, 0); seed=1", "seed: swept twice"),
    ("seed=1; (algorithm, seed)=(grpo, 0)", "seed: swept twice"),
    ("(seed, lr)=(0..2, 1e-4)", "seed: a range ('0..2') cannot be paired"),
    ("(algorithm, group_size)=(grpo, 4), (grpo, 4)", "value (grpo, 4) appears twice"),
    ("(algorithm, group_size)=grpo, 4", "expected (value, value), (value, value), ..."),
    ("(algorithm, group_size)=(grpo, 4) (grpo, 8)", "expected ',' between tuples"),
    ("(algorithm)=(grpo)", "pair two fields or more"),
    ("(algorithm, group_size=(grpo, 4)", "paired fields go in parentheses"),
    ("(algorithm, group_size)=(grpo, x)", "group_size: 'x' is not an integer"),
    ("(seed, lr)=(0, 1e-4), (1, 2e-4); batch_size=1..60",
     "120 runs (2 x 60); a sweep launches at most 64"),
])
def test_bad_sweep_spec_is_an_error_on_the_sweep_field(spec: str, reason: str) -> None:
    with pytest.raises(LaunchError) as info:
        services.parse_sweep_spec(spec)
    assert info.value.field == "sweep"
    assert reason in info.value.reason


def test_paired_axes_take_their_tuples_and_cross_the_other_axes() -> None:
    """The budget-matched comparison of issue 27 as one sweep: Seq-balance at n=4 against GRPO
    at n=16, each over three seeds; the cross-product would run GRPO at n=4 and Seq-balance at
    n=16 too (and refuse the second: M=8 < n=16)."""
    grid = services.parse_sweep_spec(
        "(algorithm, group_size) = (ada-balance, 4), (grpo, 16)\nseed=0..2")
    assert grid == [(("algorithm", "group_size"), [("ada-balance", 4), ("grpo", 16)]),
                    ("seed", [0, 1, 2])]
    points = services.sweep_points(grid)
    assert points == [{"algorithm": a, "group_size": n, "seed": s}
                      for a, n in (("ada-balance", 4), ("grpo", 16)) for s in (0, 1, 2)]
    # Crossed the other way round, and typed per field (a bool, an optional int, a float).
    grid = services.parse_sweep_spec(
        "seed=0,1; (std_normalize, K_pos, lr)=(on, default, 1e-4), (off, 2, 2e-4)")
    assert services.sweep_points(grid)[:2] == [
        {"seed": 0, "std_normalize": True, "K_pos": None, "lr": 1e-4},
        {"seed": 0, "std_normalize": False, "K_pos": 2, "lr": 2e-4}]
    assert services.grid_json(grid)[1] == {"fields": ["std_normalize", "K_pos", "lr"],
                                           "values": [[True, None, 1e-4], [False, 2, 2e-4]]}


def test_every_bad_axis_is_named_at_once() -> None:
    with pytest.raises(LaunchError) as info:
        services.parse_sweep_spec("(algorithm, grup_size)=(grpo, 4); sed=1; lr=fast, 1e-4; "
                                  "(seed, lr)=(1)")
    reasons = [reason for field, reason in info.value.pairs]
    assert {field for field, _ in info.value.pairs} == {"sweep"}
    assert len(reasons) == 4, reasons
    assert [r.split(":")[0] for r in reasons] == ["grup_size", "sed", "lr", "(seed, lr)"]


@pytest.mark.parametrize("grid", [
    {"seed": [0, 1]}, [["seed", [0, 1]]], [{"field": "seed", "values": ["0", "1"]}]])
def test_grid_spellings_agree(grid: Any) -> None:
    assert services.sweep_grid(grid) == [("seed", [0, 1])]


@pytest.mark.parametrize("grid", [
    {"(algorithm, group_size)": [["grpo", 16], ["ada-pos", "4"]]},
    {("algorithm", "group_size"): [("grpo", 16), ("ada-pos", 4)]},
    [[["algorithm", "group_size"], [["grpo", "16"], ["ada-pos", 4]]]],
    [{"fields": ["algorithm", "group_size"], "values": [["grpo", 16], ["ada-pos", 4]]}]])
def test_paired_grid_spellings_agree(grid: Any) -> None:
    assert services.sweep_grid(grid) == [(("algorithm", "group_size"),
                                          [("grpo", 16), ("ada-pos", 4)])]


@pytest.mark.parametrize("grid", [5, "seed=1", [{"field": "seed"}], [["seed"]], {"seed": 3},
                                  [{"fields": "seed", "values": [[1]]}],
                                  [{"fields": ["seed", "lr"], "values": [[1, 2, 3]]}],
                                  [{"fields": ["seed", "lr"], "values": "1, 2"}]])
def test_malformed_grid_is_a_field_error(grid: Any) -> None:
    with pytest.raises(LaunchError) as info:
        services.sweep_grid(grid)
    assert info.value.field == "sweep"


def test_launch_sweep_creates_every_run_and_enqueues_them_on_commit(
        transactional_db: None, user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    sweep = services.launch_sweep(
        user, "study", SIM, {"algorithm": ["grpo", "ada-pos", "ada-balance"], "seed": [0, 1, 2]},
        ps, queue="cpu", retention="kept")
    runs = list(selectors.sweep_runs(sweep.pk))
    assert len(runs) == 9
    expected = [(a, s) for a in ("grpo", "ada-pos", "ada-balance") for s in (0, 1, 2)]
    assert [(r.algorithm, r.seed) for r in runs] == expected
    assert [(r.config["algorithm"], r.config["seed"]) for r in runs] == expected
    assert runs[0].name == "study [algorithm=grpo, seed=0]"
    assert all(r.config["batch_size"] == 4 and r.config["total_steps"] == 3 for r in runs)
    assert {(r.retention, r.queue, r.owner_id, r.prompt_set_id) for r in runs} == {
        ("kept", "cpu", user.pk, ps.pk)}
    assert sorted(queued_run_ids()) == [r.pk for r in runs]
    sweep.refresh_from_db()
    assert sweep.grid == [{"field": "algorithm", "values": ["grpo", "ada-pos", "ada-balance"]},
                          {"field": "seed", "values": [0, 1, 2]}]
    assert sweep.fields == ["algorithm", "seed"] and sweep.base_config == SIM


def test_a_paired_sweep_launches_its_runs_named_by_their_values(
        db: None, user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    # The cross-product of the same values is refused: Seq-balance cannot run at n=16 with M=8.
    with pytest.raises(LaunchError, match="group_size=16: samples_per_round: must be >= "):
        services.launch_sweep(user, "crossed", SIM, services.parse_sweep_spec(
            "algorithm=ada-balance,grpo; group_size=4,16"), ps)
    sweep = services.launch_sweep(user, "budget", SIM, services.parse_sweep_spec(
        "(algorithm, group_size)=(ada-balance, 4), (grpo, 16); seed=0,1"), ps)
    runs = list(selectors.sweep_runs(sweep.pk))
    assert [(r.algorithm, r.config["group_size"], r.seed, r.sweep_index) for r in runs] == [
        ("ada-balance", 4, 0, 0), ("ada-balance", 4, 1, 1), ("grpo", 16, 0, 2),
        ("grpo", 16, 1, 3)]
    assert [r.name for r in runs][::3] == ["budget [algorithm=ada-balance, group_size=4, seed=0]",
                                           "budget [algorithm=grpo, group_size=16, seed=1]"]
    sweep.refresh_from_db()
    assert sweep.grid == [{"fields": ["algorithm", "group_size"],
                           "values": [["ada-balance", 4], ["grpo", 16]]},
                          {"field": "seed", "values": [0, 1]}]
    assert sweep.fields == ["algorithm", "group_size", "seed"]
    assert sweep.axes_label == "(algorithm, group_size) × seed"


@pytest.mark.parametrize("base, grid, field, reason", [
    # A swept value that is invalid: the error is on the sweep field and names the value.
    (SIM, {"group_size": [4, 16]}, "sweep",
     "the run group_size=16: samples_per_round: must be >= group_size (16)"),
    (SIM, {"lr": [1e-4, 3.0]}, "sweep", "lr=3.0: must be within (0, 1)"),
    (SIM, {"algorithm": ["grpo", "ppo"]}, "sweep", "algorithm='ppo': unknown value"),
    (SIM, {"batch_size": [4, 16]}, "sweep", "batch_size=16: larger than the prompt set"),
    # A pair's values are checked as any run's, the pair named by its values.
    (SIM, {"(algorithm, group_size)": [["grpo", 16], ["ada-balance", 16]]}, "sweep",
     "the run algorithm=ada-balance, group_size=16: samples_per_round: must be >= group_size"),
    # A base value that is invalid: the error is on that field and names the run.
    (SIM | {"lerning_rate": 1}, {"seed": [0, 1]}, "lerning_rate", "in the sweep's run seed=0"),
    (SIM | {"device": "cuda"}, {"seed": [0, 1]}, "queue", "needs a GPU"),
])
def test_an_invalid_run_launches_nothing(
        transactional_db: None, user: Any, prompt_set_factory: Any, base: dict[str, Any],
        grid: dict[str, Any], field: str, reason: str) -> None:
    ps = prompt_set_factory(8)
    with pytest.raises(LaunchError) as info:
        services.launch_sweep(user, "bad", base, grid, ps)
    assert info.value.field == field and reason in info.value.reason, info.value
    assert not Sweep.objects.exists() and not Run.objects.exists()
    assert queued_run_ids() == []


def test_swept_values_may_repair_an_invalid_base(db: None, user: Any,
                                                 prompt_set_factory: Any) -> None:
    # samples_per_round 2 < group_size 4 is invalid alone; every swept group size fits it.
    sweep = services.launch_sweep(user, "n", SIM | {"samples_per_round": 2},
                                  {"group_size": [2]}, prompt_set_factory(8))
    assert [r.config["group_size"] for r in selectors.sweep_runs(sweep.pk)] == [2]


def test_aggregate_status_and_cancel_all(db: None, user: Any, other_user: Any,
                                         staff_user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    sweep = services.launch_sweep(user, "s", SIM, {"seed": list(range(6))}, ps)
    other = services.launch_sweep(user, "t", SIM, {"seed": [0]}, ps)
    runs = list(selectors.sweep_runs(sweep.pk))
    for run, status in zip(runs, ("running", "running", "failed", "succeeded"), strict=False):
        Run.objects.filter(pk=run.pk).update(status=status)
    status = selectors.sweep_statuses([sweep.pk, other.pk])
    assert status[sweep.pk].summary == "2 running, 2 queued, 1 failed, 1 succeeded"
    assert (status[sweep.pk].status, status[sweep.pk].total, status[sweep.pk].active) == (
        "running", 6, 4)
    assert status[other.pk].summary == "1 queued" and status[other.pk].status == "queued"
    assert {s.pk: s.run_count for s in selectors.sweep_list()} == {sweep.pk: 6, other.pk: 1}

    with pytest.raises(PermissionDenied):
        services.cancel_sweep(sweep, other_user)
    assert services.cancel_sweep(sweep, staff_user) == 4
    after = {r.pk: (r.status, r.cancel_requested) for r in selectors.sweep_runs(sweep.pk)}
    assert [after[r.pk] for r in runs] == [
        ("running", True), ("running", True), ("failed", False), ("succeeded", False),
        ("cancelled", True), ("cancelled", True)]
    # The other sweep is untouched; a second cancel finds nothing left to do.
    assert Run.objects.get(sweep=other).status == "queued"
    assert services.cancel_sweep(sweep, user) == 0
    Run.objects.filter(sweep=sweep, status="running").update(status="cancelled")
    done = selectors.sweep_statuses([sweep.pk])[sweep.pk]
    assert done.status == "failed" and done.active == 0


def test_deleting_a_run_keeps_its_sweep(db: None, user: Any, prompt_set_factory: Any) -> None:
    sweep = services.launch_sweep(user, "s", SIM, {"seed": [0, 1]}, prompt_set_factory(8))
    services.delete_run(selectors.sweep_runs(sweep.pk).first(), user)
    assert selectors.sweep_statuses([sweep.pk])[sweep.pk].total == 1


# --- the dashboard: launch form, runs list, cancel-all, compare ---------------------------------

@pytest.fixture
def owner_client(user: Any) -> Any:
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


def _form(ps: Any, **overrides: Any) -> dict[str, Any]:
    from .test_dashboard_views import _launch_data

    return _launch_data(ps, total_steps=3, batch_size=4, **overrides)


def test_launch_form_launches_a_sweep(db: None, owner_client: Any, user: Any) -> None:
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set

    ps = make_prompt_set()
    resp = owner_client.post(reverse("dashboard:run_launch"), _form(
        ps, name="grid", sweep="algorithm=grpo,ada-balance; seed=0..1", lr="0.0002"))
    assert resp.status_code == 302, resp.content.decode()[:3000]
    sweep = Sweep.objects.get()
    assert resp["Location"] == reverse("dashboard:run_list") + f"?sweep={sweep.pk}"
    runs = list(selectors.sweep_runs(sweep.pk))
    assert [(r.algorithm, r.seed, r.config["lr"]) for r in runs] == [
        ("grpo", 0, 2e-4), ("grpo", 1, 2e-4), ("ada-balance", 0, 2e-4), ("ada-balance", 1, 2e-4)]
    assert sweep.owner == user and sweep.name == "grid"


def test_launch_form_launches_a_paired_sweep(db: None, owner_client: Any) -> None:
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set

    resp = owner_client.post(reverse("dashboard:run_launch"), _form(
        make_prompt_set(), name="budget",
        sweep="(algorithm, group_size)=(ada-balance, 4), (grpo, 16); seed=0..1"))
    assert resp.status_code == 302, resp.content.decode()[:3000]
    runs = list(selectors.sweep_runs(Sweep.objects.get().pk))
    assert [r.name for r in runs] == [
        f"budget [algorithm={a}, group_size={n}, seed={s}]"
        for a, n in (("ada-balance", 4), ("grpo", 16)) for s in (0, 1)]
    listed = owner_client.get(reverse("dashboard:run_list")).content.decode()
    assert "over (algorithm, group_size) × seed: 4 runs" in listed


@pytest.mark.parametrize("spec, message", [
    ("sed=0,1", "sed: no such config field (did you mean &#x27;seed&#x27;?)"),
    ("group_size=2,16", "the run group_size=16: samples_per_round: must be &gt;= group_size"),
    ("batch_size=4,64", "batch_size=64: larger than the prompt set (12 prompts)"),
    ("seed=0..200", "seed: range &#x27;0..200&#x27; is 201 runs; a sweep launches at most 64"),
    # The budget-matched comparison as a cross-product: refused, naming the run at fault.
    ("algorithm=ada-balance,grpo; group_size=4,16",
     "the run algorithm=ada-balance, group_size=16: samples_per_round: must be &gt;= group_size"),
    # Every bad axis at once, each its own message.
    ("(algorithm, group_size)=(grpo); sed=1",
     "(algorithm, group_size): (grpo) has 1 value; each tuple needs 2, one per field"),
    ("(algorithm, group_size)=(grpo); sed=1", "sed: no such config field"),
])
def test_bad_sweep_is_shown_on_its_field_and_launches_nothing(db: None, owner_client: Any,
                                                              spec: str, message: str) -> None:
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set
    from .test_dashboard_views import field_block

    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _form(make_prompt_set(), sweep=spec))
    assert resp.status_code == 200
    html = resp.content.decode()
    block = field_block(html, "sweep")
    assert message in block, block[:1500]
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_runs_list_groups_a_sweep_with_status_and_cancel_all(
        db: None, owner_client: Any, other_user: Any, user: Any) -> None:
    from django.test import Client
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set

    ps = make_prompt_set()
    sweep = services.launch_sweep(user, "grid", SIM, {"seed": [0, 1, 2]}, ps)
    single = services.launch_run(user, "lonely", SIM, ps)
    first, second, third = selectors.sweep_runs(sweep.pk)
    Run.objects.filter(pk=first.pk).update(status="running")
    Run.objects.filter(pk=second.pk).update(status="failed")
    html = owner_client.get(reverse("dashboard:run_list")).content.decode()
    head = html[html.index(f'id="sweep-{sweep.pk}"'):]
    assert "1 running, 1 queued, 1 failed" in head[:3000] and "Cancel all" in head[:3000]
    assert "over seed: 3 runs" in head[:3000]
    # The members follow their sweep's row, in grid order; the single run is outside it.
    positions = [html.index(f'id="cmp-{r.pk}"') for r in (first, second, third)]
    assert html.index(f'id="sweep-{sweep.pk}"') < positions[0] < positions[1] < positions[2]
    assert html.count('class="sweep-member"') == 3
    assert f'href="/runs/{single.pk}/"' in html
    only = owner_client.get(reverse("dashboard:run_list") + f"?sweep={sweep.pk}")
    assert f'id="cmp-{single.pk}"' not in only.content.decode()
    # A member's page links back to its sweep and the sweep's report.
    member = owner_client.get(reverse("dashboard:run_detail", args=[first.pk])).content.decode()
    assert f'href="/report/?sweep={sweep.pk}"' in member and f'?sweep={sweep.pk}"' in member

    url = reverse("dashboard:sweep_cancel", args=[sweep.pk])
    stranger = Client()
    stranger.force_login(other_user)
    assert "Cancel all" not in stranger.get(reverse("dashboard:run_list")).content.decode()
    assert stranger.post(url).status_code == 403
    resp = owner_client.post(url, HTTP_HX_REQUEST="true")
    assert resp.status_code == 204 and resp["HX-Refresh"] == "true"
    assert [(r.status, r.cancel_requested) for r in selectors.sweep_runs(sweep.pk)] == [
        ("running", True), ("failed", False), ("cancelled", True)]
    assert Run.objects.get(pk=single.pk).status == "queued"
    assert owner_client.post(reverse("dashboard:sweep_cancel", args=[99999])).status_code == 404


def test_compare_opens_a_sweep(db: None, owner_client: Any, user: Any) -> None:
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set

    sweep = services.launch_sweep(user, "grid", SIM, {"seed": [0, 1, 2]}, make_prompt_set())
    page = owner_client.get(reverse("dashboard:compare") + f"?sweep={sweep.pk}")
    assert page.status_code == 200
    assert [r.pk for r in page.context["runs"]] == [
        r.pk for r in selectors.sweep_runs(sweep.pk)]
    # Seeds of one setting: one group. Queued, none has a step to draw yet: the page says so
    # for each run, and the chart draws nothing rather than an empty mean.
    (group,) = page.context["groups"]
    assert [m.run.seed for m in group.left_out] == [0, 1, 2] and group.used == []
    assert "seed 0, queued: no step recorded yet" in page.content.decode()
    fig = owner_client.get(reverse("dashboard:compare_chart") + f"?sweep={sweep.pk}").json()
    assert fig["data"] == []
    assert fig["layout"]["annotations"][0]["text"] == "none of these runs recorded a step yet"


def test_sweep_launched_with_the_broker_down_says_so_and_stays_queued(
        transactional_db: None, user: Any, settings: Any, monkeypatch: Any) -> None:
    from django.contrib.messages import get_messages
    from django.test import Client
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set
    from .test_broker_down import broker_unreachable

    ps = make_prompt_set()
    with broker_unreachable(settings, monkeypatch):
        c = Client()
        c.force_login(user)
        resp = c.post(reverse("dashboard:run_launch"), _form(ps, name="down", sweep="seed=0,1"))
    assert resp.status_code == 302
    (message,) = get_messages(resp.wsgi_request)
    assert message.level_tag == "error" and "(2 runs)" in str(message)
    assert "the broker (Redis) is unreachable" in str(message) and "stay queued" in str(message)
    assert list(Run.objects.filter(sweep__name="down").values_list("status", flat=True)) == [
        "queued", "queued"]


# --- a failed run retried in its place ----------------------------------------------------------

def test_a_failed_run_retried_takes_its_place_in_the_sweep(
        db: None, user: Any, other_user: Any, staff_user: Any, prompt_set_factory: Any,
        django_capture_on_commit_callbacks: Any) -> None:
    """Issue 27: a sweep's failed run relaunched ran outside the sweep, which stayed failed.
    The retry is a new run of the sweep at the failed one's place; the failed one keeps its
    record and is counted no more."""
    ps = prompt_set_factory(8)
    sweep = services.launch_sweep(user, "s", SIM, {"seed": [0, 1, 2]}, ps)
    first, second, third = selectors.sweep_runs(sweep.pk)
    Run.objects.filter(pk__in=[first.pk, third.pk]).update(status="succeeded")
    Run.objects.filter(pk=second.pk).update(status="failed", error="ModuleNotFoundError: x")
    second.refresh_from_db()
    assert selectors.sweep_statuses([sweep.pk])[sweep.pk].status == "failed"
    assert services.retryable(second) and not services.retryable(first)

    # Only a failed or cancelled run of a sweep, by its owner or staff.
    first.refresh_from_db()
    with pytest.raises(LaunchError, match="the run is succeeded; only a failed or cancelled"):
        services.retry_run(first, user)
    lone = services.launch_run(user, "lone", SIM, ps)
    Run.objects.filter(pk=lone.pk).update(status="failed")
    lone.refresh_from_db()
    with pytest.raises(LaunchError, match="not part of a sweep: relaunch it"):
        services.retry_run(lone, user)
    with pytest.raises(PermissionDenied):
        services.retry_run(second, other_user)

    with django_capture_on_commit_callbacks(execute=True):
        retry = services.retry_run(second, user)
    second.refresh_from_db()
    assert (second.replaced_by_id, second.status, second.error) == (
        retry.pk, "failed", "ModuleNotFoundError: x")
    assert (retry.sweep_id, retry.sweep_index, retry.seed, retry.status, retry.cloned_from_id,
            retry.owner_id) == (sweep.pk, 1, 1, "queued", second.pk, user.pk)
    assert retry.config == second.config and retry.name == "s [seed=1] (attempt 2)"
    assert retry.pk in queued_run_ids()
    # The sweep counts the retry in the failed run's place, in the grid's order.
    assert [r.pk for r in selectors.sweep_runs(sweep.pk)] == [first.pk, retry.pk, third.pk]
    assert [r.pk for r in selectors.sweep_runs(sweep.pk, replaced=True)] == [
        first.pk, second.pk, retry.pk, third.pk]
    status = selectors.sweep_statuses([sweep.pk])[sweep.pk]
    assert (status.summary, status.status) == ("1 queued, 2 succeeded", "queued")
    assert selectors.sweep_list().get(pk=sweep.pk).run_count == 3
    Run.objects.filter(pk=retry.pk).update(status="succeeded")
    assert selectors.sweep_statuses([sweep.pk])[sweep.pk].status == "succeeded"

    # Once: the failed run has its retry.
    with pytest.raises(LaunchError, match=f"already retried, as run {retry.pk}"):
        services.retry_run(second, user)
    # A retry that fails too is retried in turn (staff may; the run stays its owner's).
    Run.objects.filter(pk=retry.pk).update(status="cancelled")
    retry.refresh_from_db()
    again = services.retry_run(retry, staff_user)
    assert (again.name, again.owner_id, again.sweep_index) == ("s [seed=1] (attempt 3)",
                                                               user.pk, 1)
    # Deleting a retry gives the point back to the run it replaced.
    services.delete_run(again, user)
    assert [r.pk for r in selectors.sweep_runs(sweep.pk)] == [first.pk, retry.pk, third.pk]


def test_the_run_page_retries_and_the_sweeps_pages_count_the_retry(
        db: None, owner_client: Any, user: Any, other_user: Any) -> None:
    from django.test import Client
    from django.urls import reverse

    from .dashboard_fixtures import make_prompt_set

    sweep = services.launch_sweep(user, "grid", SIM, {"seed": [0, 1]}, make_prompt_set())
    first, second = selectors.sweep_runs(sweep.pk)
    Run.objects.filter(pk=first.pk).update(status="succeeded")
    Run.objects.filter(pk=second.pk).update(status="failed", error="lost")
    page = owner_client.get(reverse("dashboard:run_detail", args=[second.pk])).content.decode()
    assert 'id="run-retry-button"' in page and "Retry in the sweep" in page
    done = owner_client.get(reverse("dashboard:run_detail", args=[first.pk])).content.decode()
    assert 'id="run-retry-button"' not in done

    resp = owner_client.post(reverse("dashboard:run_retry", args=[second.pk]))
    retry = Run.objects.get(replaces=second.pk)
    assert resp.status_code == 302 and resp["Location"] == reverse("dashboard:run_detail",
                                                                   args=[retry.pk])
    page = owner_client.get(resp["Location"]).content.decode()
    assert "Retried in sweep “grid” (in the place of run" in page
    assert f'retry of <a href="/runs/{second.pk}/">' in page
    old = owner_client.get(reverse("dashboard:run_detail", args=[second.pk])).content.decode()
    assert 'id="replaced-notice"' in old and 'id="run-retry-button"' not in old
    # A second retry of the same run is refused, on the run's page.
    again = owner_client.post(reverse("dashboard:run_retry", args=[second.pk]), follow=True)
    assert f"Cannot retry {second.name}: already retried, as run {retry.pk}" in (
        again.content.decode())

    # The list keeps the replaced run, marked; the sweep's counts are the retry's.
    html = owner_client.get(reverse("dashboard:run_list")).content.decode()
    head = html[html.index(f'id="sweep-{sweep.pk}"'):]
    assert "1 queued, 1 succeeded" in head[:3000] and "over seed: 2 runs" in head[:3000]
    assert f'replaced by <a href="/runs/{retry.pk}/">run {retry.pk}</a>' in html
    assert html.index(f'id="cmp-{second.pk}"') < html.index(f'id="cmp-{retry.pk}"')
    # Compare and report take the retry, not the run it replaced.
    compared = owner_client.get(reverse("dashboard:compare") + f"?sweep={sweep.pk}")
    assert [r.pk for r in compared.context["runs"]] == [first.pk, retry.pk]
    report = owner_client.get(reverse("dashboard:report") + f"?sweep={sweep.pk}")
    reported = {m.run.pk for g in report.context["groups"] for m in g.members}
    assert second.pk not in reported and retry.pk in reported
    # Only its owner or staff.
    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.post(reverse("dashboard:run_retry", args=[retry.pk])).status_code == 403


# --- one budget for everyone (issue 31): the ``budget`` pseudo-field ---------------------------

@pytest.mark.parametrize("spec, reason", [
    ("algorithm=grpo; budget=0", "budget: must be within [1, 32,767] responses per prompt"),
    ("budget=16,x", "budget: 'x' is not an integer"),
    ("budget=8,8", "budget: value 8 appears twice"),
    ("(algorithm, budget)=(grpo, 40000)", "budget: must be within [1, 32,767]"),
    ("budget=8; budget=16", "budget: swept twice"),
    ("budgte=8", "no such config field (did you mean 'budget'?)"),
])
def test_bad_budget_is_an_error_on_the_sweep_field(spec: str, reason: str) -> None:
    with pytest.raises(LaunchError) as info:
        services.parse_sweep_spec(spec)
    assert info.value.field == "sweep"
    assert reason in info.value.reason


@pytest.mark.parametrize("base, spec, reason", [
    # A key the budget sets may not be swept beside it.
    ({}, "algorithm=grpo; budget=16; group_size=4,8",
     "budget=16 sets group_size for grpo, which is swept too: sweep budget or group_size"),
    # A budget this algorithm cannot take at this config names the budget.
    ({}, "(algorithm, budget)=(pods, 2)",
     "budget=2 for pods: PODS at budget 2: the update keeps group_size (4, the paper's m)"),
    ({"algorithm": "ada-balance"}, "budget=2",
     "budget=2 for ada-balance: 2 is below group_size (4)"),
])
def test_a_budget_that_cannot_be_matched_launches_nothing(
        db: None, user: Any, prompt_set_factory: Any, base: dict, spec: str,
        reason: str) -> None:
    with pytest.raises(LaunchError) as info:
        services.launch_sweep(user, "b", SIM | base, services.parse_sweep_spec(spec),
                              prompt_set_factory(8))
    assert info.value.field == "sweep" and reason in info.value.reason, info.value.reason
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_an_algorithm_that_cannot_match_a_budget_is_refused_by_name(
        db: None, user: Any, prompt_set_factory: Any) -> None:
    import dataclasses

    from trainer.algorithms import GRPO, register_algorithm, unregister_algorithm

    record = dataclasses.replace(GRPO, name="toy-unmatched", label="Toy", baseline=False,
                                 match_budget=None, budget_match="",
                                 budget_note="it sizes each step by its own rule")
    register_algorithm(record)
    try:
        with pytest.raises(LaunchError) as info:
            services.launch_sweep(user, "b", SIM, services.parse_sweep_spec(
                "algorithm=grpo,toy-unmatched; budget=8"), prompt_set_factory(8))
    finally:
        unregister_algorithm(record.name)
    assert info.value.field == "sweep"
    assert info.value.reason == ("budget=8 for toy-unmatched: toy-unmatched (Toy) cannot be "
                                 "run at a matched budget: it sizes each step by its own rule")
    assert not Run.objects.exists()


def test_launch_form_launches_every_algorithm_at_one_budget(db: None, owner_client: Any) -> None:
    """The one-command, one-entry sweep of issue 31: every registered algorithm at 8 responses
    per prompt, each run's config drawing it through its own keys."""
    from django.urls import reverse

    from trainer.algorithms import algorithms
    from trainer.config import TrainConfig

    from .dashboard_fixtures import make_prompt_set

    names = [a.name for a in algorithms()]
    resp = owner_client.post(reverse("dashboard:run_launch"), _form(
        make_prompt_set(), name="matched", sweep=f"algorithm={','.join(names)}; budget=8"))
    assert resp.status_code == 302, resp.content.decode()[:3000]
    sweep = Sweep.objects.get()
    runs = list(selectors.sweep_runs(sweep.pk))
    assert [r.algorithm for r in runs] == names
    for run, record in zip(runs, algorithms(), strict=True):
        assert run.name == f"matched [algorithm={record.name}, budget=8]"
        assert services.run_point(run) == {"algorithm": record.name, "budget": 8}
        cfg = TrainConfig.from_stored(run.config)
        assert "budget" not in run.config
        per_batch = cfg.batch_size * 8
        if record.budget_match in ("exact", "cap"):
            assert cfg.max_samples_per_step == per_batch, record.name
        else:  # each generation batch draws the budget per prompt (DAPO)
            assert cfg.max_samples_per_step == per_batch * cfg.max_num_gen_batches
        for key, value in record.match_budget(cfg, 8).items():
            assert run.config[key] == value, (record.name, key)
    # A clone of a run keeps the budget in its name, which the config alone does not hold.
    from dashboard.forms import clone_name

    assert clone_name(runs[0]) == f"matched [algorithm={names[0]}, budget=8] (clone)"
