"""The launch preflight: estimates sampled by a real Celery worker (simulated backend, where the
true pass rates are known, and the built-in tiny model), reused, cancelled, and shown with the
simulator's predictions."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from experiments import preflight, services
from experiments.models import Estimate, PromptSet, Run

from tests.fixtures.services import wait_for
from trainer.preflight import SIMULATED_DRAWS, predict

from .dashboard_fixtures import make_prompt_set, make_run

HOOK = {"RADA_BACKEND_HOOK": "tests.platform.worker_hooks:paced"}
SIM = {"backend": "simulated", "algorithm": "ada-balance", "batch_size": 8}
SHAPE = {"batch_size": 8, "group_size": 4, "samples_per_round": 8, "max_rounds": 4}


def wait_estimate(estimate: Estimate, statuses: tuple[str, ...] = ("succeeded", "failed",
                                                                     "cancelled"),
                  timeout: float = 180) -> Estimate:
    def done() -> Estimate | None:
        estimate.refresh_from_db()
        return estimate if estimate.status in statuses else None

    return wait_for(done, timeout, what=f"estimate {estimate.pk} to reach {statuses}")


def queued(queue: str = "cpu") -> list[dict[str, Any]]:
    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])
    return [json.loads(m) for m in client.lrange(queue, 0, -1)]


@pytest.fixture(autouse=True)
def few_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages' predictions from 32 simulated steps per algorithm instead of the default 512:
    these tests check what the pages show and keep, not the simulator's precision (the
    comparison with the simulator below asks for the default explicitly)."""
    monkeypatch.setattr(preflight, "SIMULATED_DRAWS", 32)


def test_estimates_on_a_worker_simulated_and_tiny_model(
        start_worker: Any, user: Any, tiny_model_dir: Path) -> None:
    from trainer.model import MODEL_DIR_ENV

    # Pacing makes the third estimate long enough to cancel while it runs.
    start_worker("cpu", env={MODEL_DIR_ENV: str(tiny_model_dir), **HOOK,
                             "RADA_TEST_GENERATE_SLEEP": "0.3"})

    # 1. Simulated backend: the true pass rates are the prompts' metadata.
    ps = make_prompt_set("rates-96", 96)
    true_rate = {p.pk: p.metadata["pass_rate"] for p in ps.prompts.all()}
    estimate = preflight.request_estimate(user, SIM, ps, samples_per_prompt=64, num_prompts=40)
    estimate = wait_estimate(estimate)
    assert estimate.status == Estimate.Status.SUCCEEDED, estimate.traceback
    assert estimate.prompts_done == 40 and len(estimate.results) == 40
    measured = preflight.estimate_summary(estimate)["pass_rates"]
    truth = [true_rate[r["prompt_id"]] for r in estimate.results]
    assert len(set(truth)) == 40  # distinct prompts of the set
    assert all(len(r["rewards"]) == 64 for r in estimate.results)
    assert np.mean(np.abs(np.array(measured) - truth)) < 0.06  # std of one rate <= 0.0625
    # Predictions from the measured rates agree with the simulator fed the true ones.
    rows = {(r["algorithm"], r["group_size"]): r
            for r in preflight.estimate_predictions(estimate, SHAPE, draws=SIMULATED_DRAWS)}
    exact = {(r["algorithm"], r["group_size"]): r
             for r in predict(truth, draws=SIMULATED_DRAWS, **SHAPE)}
    assert set(rows) == set(exact)
    for key, row in rows.items():
        assert row["samples_per_step"] == pytest.approx(exact[key]["samples_per_step"], rel=0.1)
        assert row["zero_adv_frac"] == pytest.approx(exact[key]["zero_adv_frac"], abs=0.1)
    estimate.refresh_from_db()
    assert list(estimate.predictions) == ["B8-n4-M8-N4"]  # kept for the next reader

    # The same request is the same estimate; asking to sample again is a new one.
    assert preflight.request_estimate(user, SIM, ps, samples_per_prompt=64,
                                      num_prompts=40).pk == estimate.pk
    # 2. The built-in tiny model (hf backend) on the built-in task, with its real verifier.
    arith = services.create_builtin_prompt_set(user, "arith-40", 40, 1, 2, 0)
    tiny = preflight.request_estimate(user, {"backend": "hf", "device": "cpu", "batch_size": 8,
                                             "max_new_tokens": 6}, arith,
                                      samples_per_prompt=8, num_prompts=16)
    tiny = wait_estimate(tiny)
    assert tiny.status == Estimate.Status.SUCCEEDED, tiny.traceback
    summary = preflight.estimate_summary(tiny)
    assert summary["samples"] == 128 and summary["verifier_errors"] == 0
    assert tiny.tokens > 0 and tiny.time_generation > 0 and summary["samples_per_second"] > 0
    # The short warm start solves some 1-2 digit sums.
    assert 0.0 < np.mean(summary["pass_rates"]) and max(summary["pass_rates"]) <= 1.0
    tiny_rows = preflight.estimate_predictions(tiny, SHAPE)
    assert all(r["step_seconds"] > 0 for r in tiny_rows)

    # 3. Cancel while it samples: it stops before its next chunk of prompts.
    slow = preflight.request_estimate(user, SIM, ps, samples_per_prompt=4, num_prompts=96,
                                      again=True)
    assert slow.pk != estimate.pk
    wait_for(lambda: Estimate.objects.get(pk=slow.pk).prompts_done >= 8, 60,
             what="the estimate's first chunk")
    preflight.cancel_estimate(slow, user)
    slow = wait_estimate(slow)
    assert slow.status == Estimate.Status.CANCELLED
    assert 8 <= slow.prompts_done < 96 and len(slow.results) == slow.prompts_done
    assert preflight.estimate_predictions(slow, SHAPE) == []


def test_a_queued_estimate_is_cancelled_at_once_and_never_sampled(
        transactional_db: None, user: Any, other_user: Any) -> None:
    redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).delete("cpu")
    ps = make_prompt_set("rates-12", 12)
    estimate = preflight.request_estimate(user, SIM, ps)
    # The same settings spelled as they resolve on the cpu queue are the same sample.
    assert preflight.request_estimate(user, SIM | {"device": "cpu", "rollout_dtype": "float32"},
                                      ps).pk == estimate.pk
    messages = queued()
    assert [m["headers"]["task"] for m in messages] == ["workers.estimate_pass_rates"]
    with pytest.raises(PermissionDenied):
        preflight.cancel_estimate(estimate, other_user)
    assert preflight.cancel_estimate(estimate, user).status == Estimate.Status.CANCELLED
    # The worker that gets the message later finds nothing to do.
    assert preflight.acquire_estimate(estimate.pk, "late-worker") is None
    # Cancelled is not reused: the next request samples afresh.
    assert preflight.request_estimate(user, SIM, ps).pk != estimate.pk
    redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).delete("cpu")


def test_estimate_request_reports_every_bad_value(db: None, user: Any) -> None:
    ps = make_prompt_set("rates-8", 8)
    with pytest.raises(services.LaunchError) as info:
        preflight.request_estimate(user, {"algorithm": "ppo", "device": "cuda",
                                          "temperature": 0}, ps, queue="cpu",
                                   samples_per_prompt=0, num_prompts=5000)
    assert set(info.value.message_dict) == {"algorithm", "temperature", "queue",
                                            "samples_per_prompt", "num_prompts"}
    assert not Estimate.objects.exists()


# --- the dashboard's side -----------------------------------------------------------------------

@pytest.fixture
def owner_client(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _finished(user: Any, ps: PromptSet, rates: list[float], k: int = 16,
              errors: int = 0, config: dict[str, Any] | None = None) -> Estimate:
    """An estimate as a worker leaves it: results of k rewards per prompt."""
    estimate = preflight.request_estimate(user, config or SIM, ps, samples_per_prompt=k,
                                          num_prompts=len(rates))
    assert preflight.acquire_estimate(estimate.pk, "w")
    prompts = list(ps.prompts.order_by("index"))
    results = [{"prompt_id": prompts[i].pk, "errors": errors,
                "rewards": [1.0] * round(rate * k) + [0.0] * (k - round(rate * k))}
               for i, rate in enumerate(rates)]
    assert preflight.finish_estimate(estimate.pk, "w", Estimate.Status.SUCCEEDED,
                                     results=results, time_generation=2.0, time_scoring=0.1,
                                     tokens=1000)
    estimate.refresh_from_db()
    return estimate


def _launch_post(ps: PromptSet, **overrides: object) -> dict[str, object]:
    from .test_dashboard_views import _launch_data

    return _launch_data(ps, **overrides)


def test_estimate_button_keeps_the_form_and_shows_live_progress(
        db: None, user: Any, owner_client: Client) -> None:
    ps = make_prompt_set("rates-64", 64)
    url = reverse("dashboard:run_launch")
    data = _launch_post(ps, name="", batch_size=8, group_size=2, estimate_prompts=20,
                        estimate_samples=8, action="estimate")
    resp = owner_client.post(url, data)
    assert resp.status_code == 200  # no run name needed: nothing is launched
    estimate = Estimate.objects.get()
    assert (estimate.samples_per_prompt, estimate.num_prompts, estimate.queue) == (8, 20, "cpu")
    assert not Run.objects.exists()
    html = resp.content.decode()
    assert 'id="estimate"' in html and 'data-status="queued"' in html
    panel = reverse("dashboard:estimate_panel", args=[estimate.pk])
    assert f'hx-get="{panel}?batch_size=8&amp;group_size=2' in html  # polls while queued
    assert resp.context["form"]["group_size"].value() == "2"  # the form keeps its values
    # Asking again for the same sample is the same estimate; "Sample again" is a new one.
    owner_client.post(url, data)
    assert Estimate.objects.count() == 1
    owner_client.post(url, {**data, "action": "estimate-again"})
    assert Estimate.objects.count() == 2
    # Progress, then cancel from the panel.
    Estimate.objects.filter(pk=estimate.pk).update(status="running", prompts_done=8,
                                                   lease_owner="w")
    live = owner_client.get(panel, SHAPE).content.decode()
    assert 'value="8"' in live and "8</strong> of 20 prompts" in live and "hx-trigger" in live
    cancelled = owner_client.post(reverse("dashboard:estimate_cancel", args=[estimate.pk]),
                                  HTTP_HX_REQUEST="true").content.decode()
    assert "cancel requested" in cancelled
    assert Estimate.objects.get(pk=estimate.pk).cancel_requested


def test_finished_estimate_shows_predictions_chart_and_warnings(
        db: None, user: Any, owner_client: Client) -> None:
    ps = make_prompt_set("rates-32", 32)
    good = _finished(user, ps, [i / 31 for i in range(32)])
    page = owner_client.get(reverse("dashboard:estimate_detail", args=[good.pk]),
                            SHAPE).content.decode()
    for label in ("GRPO n=4", "GRPO n=8", "GRPO n=16", "Reinforce-Ada Seq-pos",
                  "Reinforce-Ada Seq-balance", "Reinforce-Ada Est"):
        assert f"<td>{label}</td>" in page, label
    assert 'class="alert"' not in page
    assert "hx-trigger" not in page  # finished: no polling
    # Every column is defined once, for every row; DAPO's discarded groups have their own.
    from trainer.algorithms import ALGORITHM_NAMES
    from trainer.preflight import PREDICTION_COLUMNS

    # A row per registered algorithm, GRPO's three group sizes as three.
    n_rows = len(ALGORITHM_NAMES) + 2
    table = page[page.index('id="estimate-table"'):page.index("</table>",
                                                              page.index('id="estimate-table"'))]
    for column in PREDICTION_COLUMNS:
        assert f'title="{column.definition}"' in table.replace("&#x27;", "'"), column.key
        assert table.count(f'data-column="{column.key}"') == n_rows
    dapo = table[table.index('data-algorithm="dapo"'):]
    dapo = dapo[:dapo.index("</tr>")]
    assert 'data-column="discarded_frac">0%' not in dapo
    grpo = table[table.index('data-algorithm="grpo"'):]
    assert 'data-column="discarded_frac">0%' in grpo[:grpo.index("</tr>")]
    assert 'id="estimate-columns"' in page
    # How sure: beside each samples per step, its interval over the sampled prompts as the
    # stored predictions hold it (GRPO's fixed budget: exact), and what the interval means.
    good.refresh_from_db()
    rows = good.predictions["B8-n4-M8-N4"]
    cells = table.split('data-column="samples_per_step">')[1:]
    assert len(cells) == len(rows) == n_rows
    for row, cell in zip(rows, cells, strict=True):
        cell = cell[:cell.index("</td>")]
        want = ("(exact)" if row["spend_fixed"] else
                f"(95%: {row['samples_per_step_low']:,.0f}–{row['samples_per_step_high']:,.0f})")
        assert want in cell, (row["algorithm"], cell)
        # Fixed budgets: GRPO's n, Est's B x budget, PODS's n drawn per prompt, GVM-RAFT's
        # B x gvm_budget, VADE's n.
        assert row["spend_fixed"] == (row["algorithm"] in ("grpo", "ada-est", "pods",
                                                           "gvm-raft", "vade"))
    assert 'id="estimate-interval"' in page and "drawn again with replacement" in page
    budget = owner_client.get(reverse("dashboard:estimate_chart", args=[good.pk, "budget"]),
                              SHAPE).json()
    bars = budget["data"][0]
    assert bars["y"][:3] == ["GRPO n=4", "GRPO n=8", "GRPO n=16"]
    assert bars["x"][:3] == [32.0, 64.0, 128.0]  # B x n for B = 8
    # The whiskers: each bar's interval, none for a fixed budget.
    (whiskers,) = [t for t in budget["data"] if "error_x" in t]
    varying = [r["algorithm"] for r in rows if not r["spend_fixed"]]
    # DPPO's spend varies with the prompts it prunes, but each group it draws costs n, so its
    # interval of the cost per kept group is a point: no whisker.
    assert varying == ["dapo", "ada-pos", "ada-balance", "dppo"]
    ranged = [(r, b) for r, b in zip(rows, bars["y"], strict=True)
              if r["samples_per_step_high"] > r["samples_per_step_low"]]
    assert whiskers["y"] == [b for _, b in ranged] and len(ranged) == 3
    for (row, _), x, up, down in zip(ranged, whiskers["x"], whiskers["error_x"]["array"],
                                     whiskers["error_x"]["arrayminus"], strict=True):
        assert x + up == pytest.approx(row["samples_per_step_high"], abs=0.1)
        assert x - down == pytest.approx(row["samples_per_step_low"], abs=0.1)
    hist = owner_client.get(reverse("dashboard:estimate_chart", args=[good.pk, "passrates"]),
                            SHAPE).json()
    assert len(hist["data"][0]["x"]) == 32 and hist["layout"]["title"]["text"]
    # Another run shape is predicted from the same sample, once.
    owner_client.get(reverse("dashboard:estimate_panel", args=[good.pk]),
                     {**SHAPE, "group_size": 8})
    good.refresh_from_db()
    assert sorted(good.predictions) == ["B8-n4-M8-N4", "B8-n8-M8-N4"]
    # A shape value that does not parse is the estimate's own (the panel says which it shows).
    odd = owner_client.get(reverse("dashboard:estimate_panel", args=[good.pk]),
                           {**SHAPE, "group_size": "x"})
    assert odd.status_code == 200 and "n = 4" in odd.content.decode()

    # "Sample again" draws a new sample of the same settings.
    again = owner_client.post(reverse("dashboard:estimate_again", args=[good.pk]))
    new = Estimate.objects.latest("created_at")
    assert new.pk != good.pk and new.key == good.key
    assert again["Location"] == reverse("dashboard:estimate_detail", args=[new.pk])

    # All prompts never solved: the no-signal warning; a verifier that raises: its warning.
    other = make_prompt_set("rates-16", 16)
    dead = _finished(user, other, [0.0] * 15 + [1.0], errors=4)
    page = owner_client.get(reverse("dashboard:estimate_detail", args=[dead.pk])).content.decode()
    assert page.count('class="alert"') == 2
    assert "Rewards will carry no signal" in page and "15 were never solved" in page
    assert "The verifier raised on 64 of 256 responses" in page


def test_an_async_configs_estimate_shows_its_lag_beside_the_synchronous_step(
        db: None, user: Any, owner_client: Client) -> None:
    """max_policy_lag = 2: the panel adds the step time and idle shares at k = 2 beside k = 0
    (``trainer.preflight.predict_async``), in units, stored once per shape; a synchronous
    config's panel has no such table."""
    from trainer.preflight import ASYNC_COLUMNS

    ps = make_prompt_set("rates-async", 16)
    est = _finished(user, ps, [i / 15 for i in range(16)],
                    config={**SIM, "algorithm": "grpo", "max_policy_lag": 2})
    # The synchronous predictions stored (another test's subject, seconds to compute).
    skip = {"B8-n4-M8-N4": [{"algorithm": "grpo", "group_size": 4, "error": "skipped"}]}
    Estimate.objects.filter(pk=est.pk).update(predictions=skip)
    page = owner_client.get(reverse("dashboard:estimate_panel", args=[est.pk]),
                            SHAPE).content.decode()
    table = page[page.index('id="estimate-async-table"'):]
    table = table[:table.index("</table>")]
    est.refresh_from_db()
    stored = est.predictions["async-B8-n4-M8-N4"]
    assert [(r["split"], r["max_policy_lag"]) for r in stored["rows"]] == [
        ("colocated", 0), ("1+1", 0), ("1+1", 2)]
    for r in stored["rows"]:
        row = table[table.index(f'data-split="{r["split"]}" data-lag="{r["max_policy_lag"]}"'):]
        row = row[:row.index("</tr>")]
        assert f'data-column="step_s">{r["step_s"]:,.2f} s<' in row
        assert f'data-column="engine_idle">{100 * r["engine_idle"]:.0f}%' in row
        assert f'data-column="trainer_idle">{100 * r["trainer_idle"]:.0f}%' in row
    for c in ASYNC_COLUMNS:
        assert table.count(f'data-column="{c.key}"') == 3 and c.header in table
    assert "max_policy_lag = 2" in page and "--max-policy-lag 0,2" in page
    sync = _finished(user, make_prompt_set("rates-sync", 16), [0.5] * 16)
    Estimate.objects.filter(pk=sync.pk).update(predictions=skip)
    assert 'id="estimate-async' not in owner_client.get(
        reverse("dashboard:estimate_panel", args=[sync.pk]), SHAPE).content.decode()


def test_estimate_from_a_finished_run(db: None, user: Any, owner_client: Client) -> None:
    ps = make_prompt_set("rates-24", 24)
    run = make_run(user, ps, name="done", batch_size=8)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert 'id="run-estimate-button"' in page
    resp = owner_client.post(reverse("dashboard:run_estimate", args=[run.pk]))
    estimate = Estimate.objects.get()
    assert resp["Location"] == reverse("dashboard:estimate_detail", args=[estimate.pk])
    assert estimate.prompt_set == ps and estimate.config["backend"] == "simulated"
    assert preflight.run_shape(estimate)["batch_size"] == 8
    assert User.objects.filter(pk=estimate.owner_id).exists()


def test_estimate_of_settings_that_no_longer_validate_goes_back_with_the_reason(
        db: None, user: Any, owner_client: Client) -> None:
    ps = make_prompt_set("rates-10", 10)
    run = make_run(user, ps, name="old", batch_size=8)
    Run.objects.filter(pk=run.pk).update(config={**run.config, "samples_per_round": 1})
    resp = owner_client.post(reverse("dashboard:run_estimate", args=[run.pk]), follow=True)
    assert resp.redirect_chain[-1][0] == reverse("dashboard:run_detail", args=[run.pk])
    assert "Cannot estimate: samples_per_round: must be &gt;= group_size" in (
        resp.content.decode())
    assert not Estimate.objects.exists()


def test_an_estimate_keeps_a_bounded_number_of_shapes(db: None, user: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "MAX_SHAPES", 2)
    estimate = _finished(user, make_prompt_set("rates-6", 6), [0.5] * 6)
    own = preflight.run_shape(estimate)
    for n in (4, 6, 8, 10):
        rows = preflight.estimate_predictions(estimate, {**own, "group_size": n,
                                                         "samples_per_round": 16})
        assert rows and all(r["error"] is None for r in rows)
    estimate.refresh_from_db()
    assert len(estimate.predictions) <= 2
    assert "B8-n10-M16-N4" in estimate.predictions


def test_the_preflight_shows_every_algorithm_at_a_matched_budget(
        db: None, user: Any, owner_client: Client) -> None:
    """Issue 31: an estimate's page with ``budget=16`` (as a sweep ``budget=16`` asks) has a
    table of every algorithm at 16 responses per prompt: how it is matched, the keys set, the
    samples per step it is predicted to spend and its bound."""
    from trainer.algorithms import algorithms

    ps = make_prompt_set("rates-8", 8)
    est = _finished(user, ps, [0.0, 0.1, 0.3, 0.5, 0.6, 0.8, 0.95, 1.0])
    # Few simulated draws here (the page's default is trainer.preflight.SIMULATED_DRAWS); the
    # page reads the rows kept with the estimate.
    preflight.estimate_predictions(est, SHAPE, draws=16)
    rows = preflight.budget_predictions(est, 16, 8, draws=16)
    assert [r["algorithm"] for r in rows] == [a.name for a in algorithms()]
    est.refresh_from_db()
    assert set(est.predictions) == {"B8-n4-M8-N4", "B8-budget16"}
    assert est.predictions["B8-budget16"] == rows
    page = owner_client.get(reverse("dashboard:estimate_detail", args=[est.pk]),
                            {**SHAPE, "budget": "16"}).content.decode()
    table = page[page.index('data-budget="16"'):]
    table = table[:table.index("</table>")]
    assert "B x budget = 128 responses per step" in page
    for row in rows:
        cells = table[table.index(f'data-algorithm="{row["algorithm"]}"'):]
        cells = cells[:cells.index("</tr>")]
        assert row["error"] is None
        assert f">{row['budget_match']}</td>" in cells
        assert f'data-column="max_samples_per_step">{row["max_samples_per_step"]:,}' in cells
        if row["budget_match"] == "exact":
            assert 'data-column="samples_per_step">128 samples ' in cells and "(exact)" in cells
            assert 'data-column="multiple_of_grpo">1.00×' in cells
    # The launch form's estimate button with a sweep at a budget: the same sample (the form's
    # sampling settings are the estimate's), and the panel has the budget's table.
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_post(
        ps, name="", batch_size=8, action="estimate", estimate_prompts=8, estimate_samples=16,
        sweep="algorithm=grpo,pods; budget=16"))
    assert resp.status_code == 200 and resp.context["estimate"].pk == est.pk
    launch_page = resp.content.decode()
    assert 'data-budget="16"' in launch_page and "budget=16" in resp.context["shape_query"]
    # No budget asked: no such table; a malformed one is left out.
    assert "data-budget" not in owner_client.get(
        reverse("dashboard:estimate_detail", args=[est.pk]), {**SHAPE, "budget": "x"}
    ).content.decode()
