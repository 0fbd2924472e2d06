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
    ("seed=3..1", "empty or too long"),
    ("lr=fast", "not a number"),
    ("passive_filtering=maybe", "not one of"),
    ("seed=1,1", "appears twice"),
    ("seed=1; seed=2", "swept twice"),
    ("seed=0..200", "empty or too long"),
    ("seed=0..20; lr=1e-4,2e-4,3e-4,4e-4,5e-4", "105 runs"),
])
def test_bad_sweep_spec_is_an_error_on_the_sweep_field(spec: str, reason: str) -> None:
    with pytest.raises(LaunchError) as info:
        services.parse_sweep_spec(spec)
    assert info.value.field == "sweep"
    assert reason in info.value.reason


@pytest.mark.parametrize("grid", [
    {"seed": [0, 1]}, [["seed", [0, 1]]], [{"field": "seed", "values": ["0", "1"]}]])
def test_grid_spellings_agree(grid: Any) -> None:
    assert services.sweep_grid(grid) == [("seed", [0, 1])]


@pytest.mark.parametrize("grid", [5, "seed=1", [{"field": "seed"}], [["seed"]], {"seed": 3}])
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


@pytest.mark.parametrize("base, grid, field, reason", [
    # A swept value that is invalid: the error is on the sweep field and names the value.
    (SIM, {"group_size": [4, 16]}, "sweep",
     "the run group_size=16: samples_per_round: must be >= group_size (16)"),
    (SIM, {"lr": [1e-4, 3.0]}, "sweep", "lr=3.0: must be within (0, 1)"),
    (SIM, {"algorithm": ["grpo", "ppo"]}, "sweep", "algorithm='ppo': unknown value"),
    (SIM, {"batch_size": [4, 16]}, "sweep", "batch_size=16: larger than the prompt set"),
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

