"""A deployment's own rewards on the platform (issue 33): registered from a test module through
``RADA_REWARDS`` (tests/rewards_for_tests.py), offered by the launch form with their docstrings,
refused by name when unknown, and trained with on a real Celery worker, which records each
sample's components and counts every failing one as an error of its sample, never a number."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api.services import create_token
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import Run, Sample, Step

from tests.platform.test_worker import SIM, assert_recorded_as_emitted, replay, wait_status
from trainer import reward_registry

SETTING = {reward_registry.REWARDS_ENV: "odd=tests.rewards_for_tests"}
REWARDS = "verifier:1 odd:0.5 unruly:2"


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The setting in this process (the web side: the form, the launch's validation) as in the
    worker's environment."""
    for key, value in SETTING.items():
        monkeypatch.setenv(key, value)
    yield
    for name in ("odd", "short", "unruly"):
        reward_registry.unregister_reward(name)
    reward_registry._LOADED.clear()


@pytest.mark.django_db
def test_the_launch_form_offers_the_registered_rewards(registered, owner_client: Any) -> None:
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert 'name="rewards"' in page
    # Each with its docstring: the module's compute_score under the setting's name, and the
    # rewards the module registered itself.
    for name, doc in (("odd", "Odd answer: 1 when the response is an odd integer"),
                      ("short", "Short: 1 for a response of at most 3 token ids"),
                      ("unruly", "Unruly: by the response&#x27;s last digit")):
        assert f"<dt><code>{name}</code></dt><dd>{doc}" in page, name


def test_an_unknown_reward_is_refused_naming_the_field(registered, user: Any,
                                                       prompt_set_factory: Any) -> None:
    with pytest.raises(services.LaunchError) as caught:
        services.launch_run(user, "typo", SIM | {"rewards": "verifier odd:0.5 od"},
                            prompt_set_factory(4))
    assert caught.value.field == "rewards"
    assert caught.value.reason.startswith("unknown reward 'od'; registered: verifier, odd")


def test_a_worker_trains_with_registered_rewards_and_records_each_component(
        registered, start_worker: Any, user: Any, prompt_set_factory: Any,
        tmp_path: Path) -> None:
    start_worker("cpu", env=SETTING)
    run = services.launch_run(user, "own rewards", SIM | {"total_steps": 1,
                                                          "rewards": REWARDS},
                              prompt_set_factory(12, pass_rate=0.5))
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    emitted = replay(run, tmp_path)
    assert_recorded_as_emitted(run, emitted)
    rows = {(s.step, str(s.prompt_id), s.index): s for s in Sample.objects.filter(run=run)}
    assert len(rows) == sum(len(r.samples) for r in emitted.steps)
    failed: dict[int, int] = {}
    for rec in emitted.steps:
        failed[rec.step] = 0
        for s in rec.samples:
            row = rows[(rec.step, s.prompt_id, s.index)]
            parts = row.reward_components
            assert parts == s.reward_components and set(parts) == {"verifier", "odd", "unruly"}
            last = s.response[-1]
            assert parts["odd"] == float(int(s.response) % 2 == 1)
            if last in "0123":  # raises, NaN, -inf, text: an error of the sample, stored null
                failed[rec.step] += 1
                assert parts["unruly"] is None and row.verifier_error.startswith("unruly: ")
            else:
                assert parts["unruly"] == 0.25 and row.verifier_error == ""
            assert row.reward == pytest.approx(
                parts["verifier"] + 0.5 * parts["odd"] + 2 * (parts["unruly"] or 0.0))
            assert all(v is None or math.isfinite(v) for v in parts.values())
    assert sum(failed.values()) > 0
    for step in Step.objects.filter(run=run):
        assert step.metrics["verifier_errors"] == failed[step.step]

    # Served by the API as stored, and shown on the prompt's history page.
    sample = Sample.objects.filter(run=run, verifier_error__startswith="unruly: ").first()
    token = create_token(user, "t")[1]
    served = Client().get(f"/api/v1/runs/{run.pk}/samples?step=1&prompt={sample.prompt_id}",
                          headers={"Authorization": f"Bearer {token}"}).json()["items"]
    assert {s["index"]: s["reward_components"] for s in served} == dict(
        Sample.objects.filter(run=run, step=1, prompt=sample.prompt_id).values_list(
            "index", "reward_components"))
    page = Client()
    page.force_login(user)
    html = page.get(reverse("dashboard:prompt_history", args=[run.pk, sample.prompt_id])
                    ).content.decode()
    assert "reward error: unruly: " in html
    assert f"odd {sample.reward_components['odd']:.2f} · unruly <em>error</em>" in html
