"""The platform side of asynchronous training (issue 30, the parts the trainer supports): the
launch form, the API and the sweep field take ``max_policy_lag`` and ``off_policy_correction``
with their bounds, the async cross-checks show on their fields; an asynchronous run's page
charts the lag of its trained samples against the bound and the samples it dropped, an
off-policy run's its ESS and applied lr; a prompt's history says which policy version drew each
response; a synchronous run shows none of it.

Runs are 2-6 simulated steps recorded in-process through the worker's recorder (no worker)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from experiments import selectors as experiment_selectors
from experiments import services
from experiments.models import Run, Sample, Step

from .dashboard_fixtures import make_prompt_set, make_run, record_run
from .test_dashboard_views import _launch_data, field_block

pytestmark = pytest.mark.django_db

ASYNC_CHARTS = ("policy_lag", "stale_dropped", "engine_timeline", "ess", "baseline_shift",
                "lr_applied")


def _fig(c: Client, run: Run, name: str) -> dict:
    resp = c.get(reverse("dashboard:run_chart", args=[run.pk, name]))
    assert resp.status_code == 200, name
    return resp.json()


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t["name"] == name)


def _metric(run: Run, key: str) -> list[float]:
    return [s.metrics[key] for s in Step.objects.filter(run=run).order_by("step")]


# --- launch: form, API, sweep -------------------------------------------------------------------

def test_launch_form_offers_the_lag_and_the_correction_with_bounds_and_errors(
        owner_client: Client) -> None:
    ps = make_prompt_set(size=12)
    url = reverse("dashboard:run_launch")
    page = owner_client.get(url).content.decode()
    lag = field_block(page, "max_policy_lag")
    assert 'min="0"' in lag and 'max="8"' in lag and "optimiser versions" in lag
    correction = field_block(page, "off_policy_correction")
    assert [v for v in ("tis", "decoupled", "vcpo") if f'value="{v}"' in correction] == [
        "tis", "decoupled", "vcpo"]
    assert "AReaL" in correction and "sqrt(ESS)" in correction

    resp = owner_client.post(url, _launch_data(ps, name="async", batch_size=4, max_policy_lag=2,
                                               off_policy_correction="decoupled"))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    run = Run.objects.get(name="async")
    assert (run.config["max_policy_lag"], run.config["off_policy_correction"]) == (2, "decoupled")

    # The bound and the async cross-checks, each next to the field it names.
    for overrides, field, reason in (
            ({"max_policy_lag": 9}, "max_policy_lag", "must be within [0, 8], got 9"),
            ({"max_policy_lag": 1, "scheduler": "per-prompt"}, "scheduler",
             "asynchronous training drives the rounds itself"),
            ({"max_policy_lag": 1, "backend": "hf", "tis_cap": 0}, "tis_cap",
             "give tis_cap (2 is common)"),
            ({"max_policy_lag": 1, "backend": "vllm", "world_size": 2}, "max_policy_lag",
             "which colocated ranks")):
        html = owner_client.post(url, _launch_data(ps, name="bad", batch_size=4, **overrides)
                                 ).content.decode()
        assert reason in field_block(html, field), (overrides, field)
    assert not Run.objects.filter(name="bad").exists()


def test_api_launches_an_async_run_and_refuses_bad_values_naming_the_field(
        user: User, client: Client) -> None:
    from api.services import create_token

    make_prompt_set("arith", size=12)
    headers = {"Authorization": f"Bearer {create_token(user, 'tests')[1]}"}

    def launch(config: dict) -> object:
        return client.post("/api/v1/runs", {"name": "a", "prompt_set": "arith", "config": {
            "backend": "simulated", "batch_size": 4, "total_steps": 2, **config}},
            content_type="application/json", headers=headers)

    ok = launch({"max_policy_lag": 1, "off_policy_correction": "vcpo"})
    assert ok.status_code == 201, ok.content
    run = Run.objects.get(pk=ok.json()["id"])
    assert (run.config["max_policy_lag"], run.config["off_policy_correction"]) == (1, "vcpo")
    for config, field in (({"max_policy_lag": 9}, "max_policy_lag"),
                          ({"max_policy_lag": -1}, "max_policy_lag"),
                          ({"off_policy_correction": "ppo"}, "off_policy_correction"),
                          ({"max_policy_lag": 1, "scheduler": "streaming"}, "scheduler")):
        bad = launch(config)
        assert bad.status_code == 400, (config, bad.content)
        assert field in [e["field"] for e in bad.json()["errors"]], (config, bad.json())
    # The TOML of `python -m trainer run`, as `rada launch` sends it.
    toml = client.post("/api/v1/runs?name=t&prompt_set=arith",
                       'backend = "simulated"\nbatch_size = 4\nmax_policy_lag = 2\n'
                       'off_policy_correction = "decoupled"\n',
                       content_type="application/toml", headers=headers)
    assert toml.status_code == 201, toml.content
    assert (toml.json()["config"]["max_policy_lag"],
            toml.json()["config"]["off_policy_correction"]) == (2, "decoupled")
    assert Run.objects.count() == 2


def test_a_sweep_over_the_lag_is_an_axis_like_any_other(owner: User,
                                                        owner_client: Client) -> None:
    ps = make_prompt_set(size=12)
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(
        ps, name="lag", batch_size=4, total_steps=2, sweep="max_policy_lag=0,1,2"))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    runs = list(Run.objects.filter(sweep__isnull=False).order_by("sweep_index"))
    assert [r.config["max_policy_lag"] for r in runs] == [0, 1, 2]
    assert [r.name for r in runs] == [f"lag [max_policy_lag={k}]" for k in (0, 1, 2)]
    # A lag past the bound is refused on the sweep field, naming the value.
    with pytest.raises(services.LaunchError) as info:
        services.launch_sweep(owner, "far", {"backend": "simulated", "batch_size": 4},
                              services.parse_sweep_spec("max_policy_lag=1,9"), ps)
    assert info.value.field == "sweep" and "max_policy_lag=9" in info.value.reason
    assert experiment_selectors.sweep_runs(runs[0].sweep_id).count() == 3


def test_launch_form_offers_the_rollout_split_under_gpus_and_machines(
        owner_client: Client) -> None:
    """``rollout_ranks`` comes from the config's metadata like every field: its help and bounds
    on the input, in the "GPUs and machines" group beside world_size."""
    from trainer.config import field_specs

    spec = next(s for s in field_specs() if s["name"] == "rollout_ranks")
    assert spec["group"] == "distributed"
    make_prompt_set(size=12)
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    split = field_block(page, "rollout_ranks")
    assert f'min="{spec["ge"]}"' in split and f'max="{spec["le"]}"' in split
    assert "only generate" in split and "Unit: ranks." in split
    group = page[page.rindex("<fieldset", 0, page.index('id="field-world_size"')):]
    group = group[:group.index("</fieldset>")]
    assert "GPUs and machines" in group and 'id="field-rollout_ranks"' in group


def test_api_refuses_a_bad_lag_correction_and_split_naming_each_field(
        user: User, client: Client) -> None:
    from api.services import create_token

    make_prompt_set("arith", size=12)
    headers = {"Authorization": f"Bearer {create_token(user, 'tests')[1]}"}
    bad = client.post("/api/v1/runs", {"name": "a", "prompt_set": "arith", "config": {
        "backend": "vllm", "batch_size": 4, "total_steps": 2, "max_policy_lag": 9,
        "off_policy_correction": "nope", "world_size": 2, "rollout_ranks": 2}},
        content_type="application/json", headers=headers)
    assert bad.status_code == 400, bad.content
    errors = {e["field"]: e["reason"] for e in bad.json()["errors"]}
    assert {"max_policy_lag", "off_policy_correction", "rollout_ranks"} <= set(errors), errors
    assert "got 9" in errors["max_policy_lag"] and "'nope'" in errors["off_policy_correction"]
    assert "leave at least one" in errors["rollout_ranks"]
    # The TOML `rada launch` sends: a good split is stored as given.
    ok = client.post("/api/v1/runs?name=split&prompt_set=arith",
                     'backend = "vllm"\nbatch_size = 4\nworld_size = 3\nrollout_ranks = 1\n',
                     content_type="application/toml", headers=headers)
    assert ok.status_code == 201, ok.content
    assert (ok.json()["config"]["world_size"], ok.json()["config"]["rollout_ranks"]) == (3, 1)
    assert Run.objects.count() == 1


def test_a_sweep_over_the_split_is_an_axis_and_a_bad_split_names_its_value(
        owner: User) -> None:
    ps = make_prompt_set(size=12)
    base = {"backend": "vllm", "batch_size": 4, "world_size": 2}
    sweep = services.launch_sweep(owner, "split", base,
                                  services.parse_sweep_spec("rollout_ranks=0,1"), ps)
    assert [r.config["rollout_ranks"] for r in sweep.runs.order_by("sweep_index")] == [0, 1]
    with pytest.raises(services.LaunchError) as info:
        services.launch_sweep(owner, "none left", base,
                              services.parse_sweep_spec("rollout_ranks=1,2"), ps)
    assert info.value.field == "sweep" and "rollout_ranks=2" in info.value.reason


# --- the run page -------------------------------------------------------------------------------

@pytest.fixture
def async_run(owner: User) -> Run:
    # DAPO, k = 1: its producer leaves groups without signal out and refills their room.
    return record_run(make_run(owner, make_prompt_set("async-set", size=12), name="async",
                               algorithm="dapo", total_steps=6, max_policy_lag=1))


def test_async_run_page_charts_the_lag_against_the_bound_and_the_drops(
        async_run: Run, owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_detail", args=[async_run.pk])).content.decode()
    assert "Asynchronous and off-policy training" in page and 'id="async-note"' in page
    for name in ("policy_lag", "stale_dropped"):
        assert f'id="chart-{name}"' in page and f'id="caption-{name}"' in page
    # The simulated backend trains no policy: no ESS and no applied lr to chart.
    assert 'id="chart-ess"' not in page and 'id="chart-lr_applied"' not in page

    fig = _fig(owner_client, async_run, "policy_lag")
    assert "annotations" not in fig["layout"]
    steps = list(range(1, 7))
    assert _trace(fig, "bound: max_policy_lag = 1")["y"] == [1] * 6
    assert _trace(fig, "mean lag of the kept samples")["y"] == pytest.approx(
        _metric(async_run, "policy_lag_mean"))
    assert _trace(fig, "largest lag of a kept sample")["y"] == _metric(async_run,
                                                                       "policy_lag_max")
    # The shares, counted here from the sample rows: step s trains version s - 1.
    lags: dict[int, Counter] = defaultdict(Counter)
    for step, version in Sample.objects.filter(run=async_run, kept=True).values_list(
            "step", "policy_version"):
        lags[step][step - 1 - version] += 1
    bars = {t["name"]: t for t in fig["data"] if t["type"] == "bar"}
    assert set(bars) == {"lag 0 (on-policy)", "lag 1"}  # the bound: nothing older trained
    for name, lag in (("lag 0 (on-policy)", 0), ("lag 1", 1)):
        assert bars[name]["x"] == steps and bars[name]["yaxis"] == "y2"
        assert bars[name]["y"] == pytest.approx(
            [lags[s][lag] / sum(lags[s].values()) for s in steps])
    assert bars["lag 1"]["y"][0] == 0 and any(y > 0 for y in bars["lag 1"]["y"])
    # The shares come from the steps' own counts (policy_lag_samples_<lag>), equal to the rows;
    # a run recorded before those counts falls back to counting its sample rows.
    assert [_metric(async_run, f"policy_lag_samples_{lag}") for lag in (0, 1)] == [
        [float(lags[s][lag]) for s in steps] for lag in (0, 1)]
    for step in Step.objects.filter(run=async_run):
        step.metrics = {k: v for k, v in step.metrics.items()
                        if not k.startswith("policy_lag_samples_")}
        step.save(update_fields=["metrics"])
    cache.clear()
    old = {t["name"]: t["y"] for t in _fig(owner_client, async_run, "policy_lag")["data"]
           if t["type"] == "bar"}
    assert old == {name: bar["y"] for name, bar in bars.items()}

    # Stale drops are rare on this small run (the simulated draws are seeded by prompt id, so
    # whether one happens depends on the database's ids): the chart is checked against what
    # was recorded; DAPO's refilled groups happen on every id tried (116 id offsets).
    drops = _fig(owner_client, async_run, "stale_dropped")
    assert _trace(drops, "dropped: training them would exceed max_policy_lag")["y"] == _metric(
        async_run, "samples_stale_dropped")
    filtered = _metric(async_run, "samples_filtered")
    assert _trace(drops, "left out by the algorithm (no signal), refilled")["y"] == filtered
    assert any(v > 0 for v in filtered)


def test_async_run_page_draws_the_engine_and_trainer_timeline(async_run: Run,
                                                             owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_detail", args=[async_run.pk])).content.decode()
    assert 'id="chart-engine_timeline"' in page and 'id="caption-engine_timeline"' in page
    fig = _fig(owner_client, async_run, "engine_timeline")
    assert "annotations" not in fig["layout"]
    assert fig["layout"]["title"]["text"].startswith("Engine and trainer over the last 6 steps")
    assert fig["layout"]["xaxis"]["title"]["text"] == "seconds into the step (s)"
    steps = Step.objects.filter(run=async_run).order_by("step")
    engine = [f"step {s.step} engine" for s in steps]
    trainer = [f"step {s.step} trainer" for s in steps]
    # The latest step on top (a category axis lists from the bottom up), engine over trainer.
    assert fig["layout"]["yaxis"]["categoryarray"][-2:] == [trainer[-1], engine[-1]]
    bars = [(t["name"], t["y"], t["x"]) for t in fig["data"]]
    # Each step's two bars, each one's segments from the step's metrics in the order they
    # happen; the two lanes' idle share one legend entry.
    idle = [s.metrics["time_trainer_idle_share"] * s.metrics["time_step"] for s in steps]
    assert bars[0] == ("idle", trainer, pytest.approx(idle))
    assert bars[1] == ("generating (engine)", engine, [s.metrics["time_engine_busy"]
                                                       for s in steps])
    assert bars[2] == ("training (trainer)", trainer, [s.metrics["time_trainer_busy"]
                                                       for s in steps])
    assert bars[3][:2] == ("idle", engine) and not fig["data"][3]["showlegend"]
    assert bars[4] == ("weight transfer", engine + trainer,
                       [s.metrics["time_sync"] for s in steps] * 2)
    # Each bar spans its step's wall time (busy, idle and transfer add up to it).
    for s in steps:
        m = s.metrics
        assert m["time_engine_busy"] + m["time_sync"] \
            + m["time_engine_idle_share"] * m["time_step"] == pytest.approx(m["time_step"])


def test_a_prompt_history_says_which_policy_drew_each_response(
        async_run: Run, owner_client: Client) -> None:
    sample = Sample.objects.filter(run=async_run, step__gte=3).order_by("-step").first()
    rows = Sample.objects.filter(run=async_run, prompt_id=sample.prompt_id, step=sample.step)
    html = owner_client.get(reverse("dashboard:prompt_history",
                                    args=[async_run.pk, sample.prompt_id])).content.decode()
    assert 'id="async-history-note"' in html and "drawn by policy (lag)" in html
    block = html[html.index(f'id="step-{sample.step}"'):]
    block = block[:block.index("</section>")]
    versions = sorted({r.policy_version for r in rows})
    assert f"this step trains version {sample.step - 1}" in block
    assert f"Drawn by policy version{'s' if len(versions) > 1 else ''} " \
           f"{', '.join(map(str, versions))};" in block
    cells = [c.split("</td>")[0] for c in block.split('<td class="policy-version">')[1:]]
    assert cells == [f"v{r.policy_version} ({sample.step - 1 - r.policy_version})"
                     for r in rows.order_by("index")]


def test_an_off_policy_run_charts_its_ess_against_the_reference_and_the_lr_applied(
        owner: User, owner_client: Client) -> None:
    # What an hf run with vcpo records, built directly: the steps of a simulated run (lag,
    # drops) given the ESS and the lr that VCPO's rule applies (lr x sqrt(ESS)).
    run = record_run(make_run(owner, make_prompt_set("vcpo-set", size=12), name="vcpo",
                              total_steps=3, max_policy_lag=2, off_policy_correction="vcpo"))
    run.config = {**run.config, "backend": "hf", "tis_cap": 2.0}
    run.save()
    ess = [1.0, 0.62, 0.31]
    shift = [0.0, 0.04, 0.18]
    for step, value, moved in zip(Step.objects.filter(run=run).order_by("step"), ess, shift,
                                  strict=True):
        step.metrics = {**step.metrics, "ess": value, "is_truncated_frac": 0.01,
                        "lr_applied": step.metrics["lr"] * math.sqrt(value),
                        "baseline_shift": moved}
        step.save()
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    for name in ASYNC_CHARTS:
        assert f'id="chart-{name}"' in page, name
    fig = _fig(owner_client, run, "ess")
    assert _trace(fig, "ESS = (sum w)^2 / (n sum w^2)")["y"] == ess
    reference = next(t for t in fig["data"] if t["name"].startswith("reference 0.5"))
    assert reference["y"] == [0.5] * 3 and reference["line"]["dash"] == "dash"
    assert fig["layout"]["yaxis"]["range"] == pytest.approx([-0.02, 1.02])
    # VCPO's baseline shift: its own chart in reward units, captioned; tis records none.
    assert 'id="caption-baseline_shift"' in page
    moved = _fig(owner_client, run, "baseline_shift")
    assert _trace(moved, "mean |VCPO's baseline - the algorithm's baseline|")["y"] == shift
    assert moved["layout"]["yaxis"]["title"]["text"] == "baseline shift (reward units)"
    assert moved["layout"]["xaxis"]["title"]["text"] and moved["layout"]["showlegend"]
    run.config = {**run.config, "off_policy_correction": "tis"}
    run.save()
    assert 'id="chart-baseline_shift"' not in owner_client.get(
        reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert _fig(owner_client, run, "baseline_shift")["data"] == []
    run.config = {**run.config, "off_policy_correction": "vcpo"}
    run.save()
    lr = _fig(owner_client, run, "lr_applied")
    scheduled = _metric(run, "lr")
    assert _trace(lr, "lr applied (mean over the step's optimiser steps)")["y"] == pytest.approx(
        [v * math.sqrt(e) for v, e in zip(scheduled, ess, strict=True)])
    assert _trace(lr, "lr the schedule set (lr, warmup)")["y"] == scheduled


def test_a_synchronous_run_shows_none_of_it(owner: User, owner_client: Client) -> None:
    run = record_run(make_run(owner, make_prompt_set("sync-set", size=12), name="sync",
                              algorithm="grpo", total_steps=2))
    assert Sample.objects.filter(run=run, policy_version__isnull=False).count() == 0
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()
    assert "Asynchronous and off-policy training" not in page
    for name in ASYNC_CHARTS:
        assert f'id="chart-{name}"' not in page, name
        # Asked for anyway, each says why it has nothing, and draws no line (no zero, no bound).
        fig = _fig(owner_client, run, name)
        assert fig["data"] == [] and fig["layout"]["annotations"][0]["text"].startswith("not "),\
            name
    prompt_id = Sample.objects.filter(run=run).values_list("prompt_id", flat=True).first()
    html = owner_client.get(reverse("dashboard:prompt_history",
                                    args=[run.pk, prompt_id])).content.decode()
    assert "drawn by policy" not in html and "policy-version" not in html


# --- compare: a synchronous run and its asynchronous twin ---------------------------------------

def test_a_sync_run_and_its_async_twin_compare_on_wall_time_and_held_out_accuracy(
        owner: User, owner_client: Client) -> None:
    """Their lags differ: the compare page opens on wall time (steps when they agree), and
    draws held-out accuracy against wall time and against samples, each point an evaluation
    at what its run had spent by the evaluated step."""
    from trainer.types import Prompt as TrainerPrompt

    from .dashboard_fixtures import record_run_with_evals

    ps = make_prompt_set("twins", size=12)
    evals = [TrainerPrompt(id=f"e{i}", text=f"{i}+0=", answer=str(i),
                           metadata={"pass_rate": i / 6}) for i in range(6)]
    runs = [record_run_with_evals(make_run(owner, ps, name=f"lag{k}", algorithm="grpo",
                                           total_steps=4, eval_every=2, eval_k=2,
                                           max_policy_lag=k), evals) for k in (0, 1)]
    query = f"?runs={runs[0].pk}&runs={runs[1].pk}"
    page = owner_client.get(reverse("dashboard:compare") + query)
    assert page.context["x"] == "wall" and 'id="x-by-lag"' in page.content.decode()
    html = page.content.decode()
    for key in ("wall", "samples"):
        assert f'id="chart-held-out-{key}"' in html
    chart = owner_client.get(reverse("dashboard:compare_chart") + query).json()
    assert chart["layout"]["xaxis"]["title"]["text"] == "wall time (s)"
    # Asked for explicitly, steps stay steps; two synchronous runs open on steps.
    assert owner_client.get(reverse("dashboard:compare") + query + "&x=step").context["x"] \
        == "step"
    other = make_run(owner, ps, name="sync2", algorithm="grpo", seed=1, total_steps=4)
    assert owner_client.get(reverse("dashboard:compare")
                            + f"?runs={runs[0].pk}&runs={other.pk}").context["x"] == "step"

    for key, title in (("wall", "wall time (s)"), ("samples", "cumulative samples")):
        fig = owner_client.get(reverse("dashboard:compare_held_out") + query
                               + f"&x={key}").json()
        assert fig["layout"]["xaxis"]["title"]["text"] == title
        assert fig["layout"]["yaxis"]["title"]["text"].startswith("greedy accuracy")
        assert fig["layout"]["title"]["text"] == f"Held-out accuracy vs {title}"
        for run in runs:
            (line,) = [t for t in fig["data"] if t["name"].startswith(run.name)]
            steps = {s.step: s for s in Step.objects.filter(run=run)}
            rows = list(run.eval_results.order_by("step"))
            assert [e.step for e in rows] == [0, 2, 4]
            assert line["y"] == [e.metrics["greedy_accuracy"] for e in rows]
            want = [0.0 if e.step == 0 else steps[e.step].wall_seconds if key == "wall" else
                    float(sum(s.samples for st, s in steps.items() if st <= e.step))
                    for e in rows]
            assert line["x"] == pytest.approx(want)
    bad = owner_client.get(reverse("dashboard:compare_held_out") + query + "&x=step")
    assert bad.status_code == 400
