"""Reports on PostgreSQL: a sweep of simulated runs (3 algorithms x 2 seeds) recorded through the
worker's recorder, and every figure's and table's numbers checked against the recorded rows,
computed here independently with the ORM, numpy and scipy.stats."""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from dashboard import reports, selectors
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from experiments import selectors as experiment_selectors
from experiments import services
from experiments.models import EvalResult, Run, Sample, Step, Sweep
from scipy import stats

from trainer.types import Prompt as TrainerPrompt

from .dashboard_fixtures import make_prompt_set, record_run_with_evals

pytestmark = pytest.mark.django_db

BASE = {"backend": "simulated", "batch_size": 4, "total_steps": 6, "eval_every": 3,
        "eval_k": 8, "save_every": 0}
LABELS = [selectors.algorithm_label("grpo", 4), selectors.algorithm_label("ada-pos"),
          selectors.algorithm_label("ada-balance")]


def recorded_sweep(owner: User, name: str, grid: dict[str, list[Any]]) -> Sweep:
    """A sweep of ``grid`` over BASE on 12 prompts, every run recorded with its evaluations
    (steps 0, 3 and 6 on 10 eval prompts) and marked succeeded."""
    sweep = services.launch_sweep(owner, name, BASE, grid, make_prompt_set(size=12))
    eval_prompts = [TrainerPrompt(id=f"e{i}", text=f"{i}+0=", answer=str(i)[::-1],
                                  metadata={"pass_rate": i / 10}) for i in range(10)]
    for run in sweep.runs.all():
        record_run_with_evals(run, eval_prompts)
    Run.objects.filter(sweep=sweep).update(status=Run.Status.SUCCEEDED)
    return sweep


@pytest.fixture
def sweep(owner: User) -> Sweep:
    """Six recorded runs: algorithms x seeds, evaluated at steps 0, 3 and 6."""
    return recorded_sweep(owner, "study", {"algorithm": ["ada-balance", "grpo", "ada-pos"],
                                           "seed": [0, 1]})


def _runs(sweep: Sweep) -> list[Run]:
    return list(Run.objects.filter(sweep=sweep).select_related("prompt_set", "sweep"))


def _rows(report: dict[str, Any], name: str, group: str, **match: Any) -> list[dict[str, Any]]:
    return [r for r in report["rows"][name] if r["group"] == group
            and all(r[k] == v for k, v in match.items())]


def _check_spread(row: dict[str, Any], values: list[float]) -> None:
    assert row["mean"] == pytest.approx(statistics.fmean(values))
    assert (row["min"], row["max"], row["seeds"]) == (min(values), max(values), len(values))


def _ci(values: list[float]) -> float:
    return stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / np.sqrt(len(values))


def test_report_numbers_match_the_recorded_rows(sweep: Sweep) -> None:
    report = reports.build_report(_runs(sweep))
    groups = report["groups"]
    assert [g["label"] for g in groups] == LABELS  # GRPO first, by ALGORITHMS order
    assert all(g["seeds"] == [0, 1] for g in groups)
    for g in groups:
        label = g["label"]
        steps = list(Step.objects.filter(run_id__in=g["runs"]))
        by_step: dict[int, list[Step]] = defaultdict(list)
        for s in steps:
            by_step[s.step].append(s)
        assert sorted(by_step) == [1, 2, 3, 4, 5, 6] and all(len(v) == 2 for v in by_step.values())

        # Fig. 3: real reward; Fig. 5: samples above B x n.
        for name, value in (("reward", lambda s: s.real_reward),
                            ("extra-samples", lambda s: s.samples - 4 * 4)):  # B x n
            rows = _rows(report, name, label)
            assert [r["step"] for r in rows] == sorted(by_step)
            for r in rows:
                _check_spread(r, [value(s) for s in by_step[r["step"]]])
        # Fig. 4: entropy against reward, both averaged over seeds per step.
        for r in _rows(report, "entropy-reward", label):
            members = by_step[r["step"]]
            assert r["reward"] == pytest.approx(statistics.fmean(s.real_reward for s in members))
            assert r["entropy"] == pytest.approx(
                statistics.fmean(s.metrics["entropy"] for s in members))

        # Fig. 5: fraction of each step's batch at or below a pass rate, estimated from each
        # prompt's first n = 4 samples.
        fractions: dict[tuple[int, int, float], float] = {}
        for run_id in g["runs"]:
            for st in by_step:
                first: dict[int, list[float]] = defaultdict(list)
                for sample in Sample.objects.filter(run_id=run_id, step=st, index__lt=4):
                    first[sample.prompt_id].append(sample.reward)
                assert len(first) == 4 and all(len(r) == 4 for r in first.values())
                for t in reports.PASS_RATE_THRESHOLDS:
                    fractions[run_id, st, t] = sum(
                        sum(r > 0.5 for r in rewards) / 4 <= t
                        for rewards in first.values()) / len(first)
        for t in reports.PASS_RATE_THRESHOLDS:
            rows = _rows(report, "hard-prompts", label, threshold=t)
            assert [r["step"] for r in rows] == sorted(by_step)
            for r in rows:
                _check_spread(r, [fractions[rid, r["step"], t] for rid in g["runs"]])
        # The trainer's step metrics (what the report reads) and the SQL over the sample rows
        # (for runs recorded before the trainer computed them) agree.
        for run in Run.objects.filter(pk__in=g["runs"]):
            sql = selectors.low_pass_rate_fractions(run, reports.PASS_RATE_THRESHOLDS)
            assert sql["fractions"] == [[fractions[run.pk, st, t] for st in sql["step"]]
                                        for t in reports.PASS_RATE_THRESHOLDS]

        # Fig. 2 and Table 1: each run's last evaluation (step 6).
        evals = [EvalResult.objects.filter(run_id=rid).latest("step") for rid in g["runs"]]
        assert {e.step for e in evals} == {6}
        for metric, prefix in (("pass@k", "pass@"), ("all-correct ratio", "all_correct@")):
            rows = _rows(report, "pass-at-k", label, metric=metric)
            assert [r["k"] for r in rows] == list(range(1, 9))
            for r in rows:
                _check_spread(r, [e.metrics[f"{prefix}{r['k']}"] for e in evals])
                assert r["eval_steps"] == "6"
        (t1,) = _rows(report, "table-eval", label)
        assert (t1["seeds"], t1["k"], t1["eval_steps"]) == (2, 8, "6")
        for key, col in (("greedy_accuracy", "greedy_accuracy"), ("avg@8", "avg_at_k"),
                         ("pass@8", "pass_at_k")):
            values = [e.metrics[key] for e in evals]
            assert t1[col] == pytest.approx(statistics.fmean(values))
            assert t1[f"{col}_ci95"] == pytest.approx(_ci(values))

        # Held-out accuracy against cost: every evaluation (steps 0, 3, 6) at the seeds' mean
        # wall time, cumulative samples and tokens by the step it evaluated (0 before the first).
        for axis in ("wall_seconds", "samples", "tokens"):
            rows = _rows(report, "accuracy-cost", label, axis=axis)
            assert [r["step"] for r in rows] == [0, 3, 6]
            for r in rows:
                st = r["step"]
                _check_spread(r, [EvalResult.objects.get(run_id=rid, step=st)
                                  .metrics["greedy_accuracy"] for rid in g["runs"]])
                spent = [next((s.wall_seconds for s in by_step.get(st, ()) if s.run_id == rid),
                              0.0) if axis == "wall_seconds" else
                         sum(getattr(s, axis) for s in steps if s.run_id == rid
                             and s.step <= st)
                         for rid in g["runs"]]
                assert r["x"] == pytest.approx(statistics.fmean(spent))
            assert rows[0]["x"] == 0 and rows[1]["x"] < rows[2]["x"]

        # Table 2: per-run means over steps, then across seeds.
        (t2,) = _rows(report, "table-cost", label)
        per_run_time = [statistics.fmean(s.metrics["time_step"] for s in steps
                                         if s.run_id == rid) for rid in g["runs"]]
        per_run_samples = [statistics.fmean(s.samples for s in steps if s.run_id == rid)
                           for rid in g["runs"]]
        per_run_tokens = [statistics.fmean(s.tokens for s in steps if s.run_id == rid)
                          for rid in g["runs"]]
        # Steps per seed (6 each), not their sum over the two seeds (12).
        assert (t2["seeds"], t2["steps_per_seed"]) == (2, "6")
        assert t2["step_seconds"] == pytest.approx(statistics.fmean(per_run_time))
        assert t2["step_seconds_ci95"] == pytest.approx(_ci(per_run_time))
        assert t2["samples_per_step"] == pytest.approx(statistics.fmean(per_run_samples))
        # Tokens per step: the same mean of per-run means, with its 95% CI (the seeds differ).
        assert len(set(per_run_tokens)) == 2
        assert t2["tokens_per_step"] == pytest.approx(statistics.fmean(per_run_tokens))
        assert t2["tokens_per_step_ci95"] == pytest.approx(_ci(per_run_tokens))
    grpo, pos, balance = report["rows"]["table-cost"]
    assert grpo["samples_per_step"] == 16 and grpo["samples_vs_grpo"] == 1.0
    for row in (pos, balance):
        assert row["samples_vs_grpo"] == pytest.approx(row["samples_per_step"] / 16)
        assert row["step_seconds_vs_grpo"] == pytest.approx(
            row["step_seconds"] / grpo["step_seconds"])
    # Reinforce-Ada spends more than GRPO's B x n; GRPO exactly that.
    assert all(r["mean"] == 0 for r in _rows(report, "extra-samples", "GRPO n=4"))
    assert any(r["mean"] > 0 for r in _rows(report, "extra-samples", LABELS[2]))


def test_figures_and_csv_serve_the_report_numbers(sweep: Sweep, owner: User) -> None:
    c = Client()
    c.force_login(owner)
    query = f"?sweep={sweep.pk}"
    report = reports.build_report(_runs(sweep))
    for name in reports.FIGURES:
        fig = c.get(reverse("dashboard:report_figure", args=[name]) + query).json()
        layout = fig["layout"]
        assert layout["title"]["text"] and layout["showlegend"]
        assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
        legend = {t["name"] for t in fig["data"] if t.get("showlegend", True)}
        assert set(LABELS) <= legend, name
        resp = c.get(reverse("dashboard:report_csv", args=[name]) + query)
        assert resp["Content-Type"].startswith("text/csv")
        assert f'filename="report-sweep-{sweep.pk}-{name}.csv"' in resp["Content-Disposition"]
        rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
        assert len(rows) == len(report["rows"][name]) > 0
        assert list(rows[0]) == list(reports.SECTIONS[name].columns)
        for got, want in zip(rows, report["rows"][name], strict=True):
            for col in ("mean", "reward"):
                if col in want:
                    assert float(got[col]) == pytest.approx(want[col])
    # The drawn lines are the rows' means: GRPO's reward line, step by step.
    fig = c.get(reverse("dashboard:report_figure", args=["reward"]) + query).json()
    (line,) = [t for t in fig["data"] if t["name"] == "GRPO n=4"]
    assert line["y"] == [r["mean"] for r in _rows(report, "reward", "GRPO n=4")]
    for name in reports.TABLES:
        text = c.get(reverse("dashboard:report_csv", args=[name]) + query).content.decode()
        assert len(list(csv.DictReader(io.StringIO(text)))) == 3


def test_report_page_of_a_sweep_and_of_chosen_runs(sweep: Sweep, owner: User) -> None:
    c = Client()
    c.force_login(owner)
    page = c.get(reverse("dashboard:report") + f"?sweep={sweep.pk}")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Report: sweep study" in html
    for label in LABELS:
        assert label in html
    for name in reports.FIGURES:
        assert f'id="fig-{name}"' in html
        assert f'data-filename="report-sweep-{sweep.pk}-{name}"' in html
    assert 'data-format="png"' in html and 'data-format="svg"' in html
    assert " ± " in html  # Table 1 and 2: mean ± 95% CI over two seeds
    # Compare sums each last evaluation up by its headline numbers, not the 16 curve points.
    final = c.get(reverse("dashboard:compare") + f"?sweep={sweep.pk}").content.decode()
    final = final[final.index('id="final-metrics"'):final.index("</table>", final.index(
        'id="final-metrics"'))]
    assert "avg@8" in final and "pass@8" in final
    assert "pass@1 " not in final and "all_correct@" not in final
    # Any chosen runs: two GRPO seeds and one balance run form two groups.
    runs = {(r.algorithm, r.seed): r for r in _runs(sweep)}
    chosen = [runs["grpo", 0], runs["grpo", 1], runs["ada-balance", 1]]
    page = c.get(reverse("dashboard:report") + "?runs=" + ",".join(str(r.pk) for r in chosen))
    assert page.status_code == 200 and "Report: 3 runs" in page.content.decode()
    assert [g.label for g in page.context["groups"]] == [LABELS[0], LABELS[2]]


def test_report_bad_requests(sweep: Sweep, owner: User) -> None:
    c = Client()
    assert c.get(reverse("dashboard:report") + f"?sweep={sweep.pk}").status_code == 302
    c.force_login(owner)
    assert c.get(reverse("dashboard:report")).status_code == 302  # nothing chosen
    # Ids that are no ids find nothing, whatever they look like (never an HTTP 500).
    for query in ("?runs=999999", "?runs=%C2%B2", "?runs=99999999999999999999999",
                  "?sweep=99999999999999999999999", "?sweep=-1", "?runs=1e3"):
        assert c.get(reverse("dashboard:report") + query).status_code == 302, query
    assert c.get(reverse("dashboard:run_list") + "?sweep=99999999999999999999999"
                 ).status_code == 200
    for url in (reverse("dashboard:report_figure", args=["nope"]) + f"?sweep={sweep.pk}",
                reverse("dashboard:report_figure", args=["table-eval"]) + f"?sweep={sweep.pk}",
                reverse("dashboard:report_csv", args=["nope"]) + f"?sweep={sweep.pk}",
                reverse("dashboard:report_figure", args=["reward"]) + "?sweep=x"):
        assert c.get(url).status_code == 404, url


def test_labels_name_what_tells_groups_apart(owner: User) -> None:
    ps = make_prompt_set(size=12)
    sweep = services.launch_sweep(owner, "lr", BASE, {"lr": [1e-4, 2e-4], "seed": [0, 1]}, ps)
    report = reports.build_report(_runs(sweep))
    assert [g["label"] for g in report["groups"]] == [
        f"{LABELS[2]} (lr=0.0001)", f"{LABELS[2]} (lr=0.0002)"]
    # GRPO's group size is its budget: its label names it, as the rest of the dashboard does.
    grpo = services.launch_sweep(owner, "n", BASE | {"algorithm": "grpo"},
                                 {"group_size": [4, 8]}, make_prompt_set(name="n-set"))
    assert [g["label"] for g in reports.build_report(_runs(grpo))["groups"]] == [
        "GRPO n=4", "GRPO n=8"]
    # Nothing recorded yet: empty rows, figures say so instead of drawing nothing silently.
    assert all(report["rows"][n] == [] for n in reports.FIGURES)
    fig = reports.figure(report, "reward")
    assert "no steps recorded yet" in fig["layout"]["annotations"][-1]["text"]


def test_pass_rate_fractions_of_a_live_run_add_only_new_steps(owner: User,
                                                              tmp_path: Any) -> None:
    from .dashboard_fixtures import make_run, trained_steps, write_step

    run = make_run(owner, make_prompt_set(size=12), total_steps=6)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    records = trained_steps(run, tmp_path)
    thresholds = reports.PASS_RATE_THRESHOLDS

    def expected() -> list[list[float]]:
        out = []
        for t in thresholds:
            column = []
            for st in range(1, run.current_step + 1):
                first: dict[int, int] = defaultdict(int)
                for s in Sample.objects.filter(run=run, step=st, index__lt=4):
                    first[s.prompt_id] += s.reward > 0.5
                column.append(sum(pos / 4 <= t for pos in first.values()) / len(first))
            out.append(column)
        return out

    for record in records[:3]:
        write_step(run, record)
    early = selectors.low_pass_rate_fractions(run, thresholds)
    assert early["step"] == [1, 2, 3] and early["fractions"] == expected()
    for record in records[3:]:
        write_step(run, record)
    # Steps 1-3 come from the cache: change a recorded sample of step 1 and it stays unseen.
    Sample.objects.filter(run=run, step=1).update(reward=0.0)
    later = selectors.low_pass_rate_fractions(run, thresholds)
    assert later["step"] == [1, 2, 3, 4, 5, 6]
    assert [c[1:] for c in later["fractions"]] == [c[1:] for c in expected()]
    assert [c[0] for c in later["fractions"]] == [c[0] for c in early["fractions"]]
    # A resumed run (a new attempt) is read afresh.
    Run.objects.filter(pk=run.pk).update(attempts=run.attempts + 1)
    run.refresh_from_db()
    assert selectors.low_pass_rate_fractions(run, thresholds)["fractions"] == expected()


def test_report_of_a_large_finished_sweep_is_cached_under_a_valid_key(owner: User) -> None:
    import warnings

    sweep = services.launch_sweep(owner, "big", BASE, {"seed": ["0..39"]}, make_prompt_set())
    Run.objects.filter(sweep=sweep).update(status=Run.Status.SUCCEEDED)
    runs = _runs(sweep)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CacheKeyWarning (key over 250 characters) fails
        first = reports.cached_report(runs)
        calls = []
        assert selectors.cached_for_finished(reports.REPORT_CACHE, runs,
                                             lambda: calls.append(1)) == first
    # None recorded a step: all 40 are listed, as left out.
    assert calls == [] and len(first["groups"][0]["left_out"]) == 40


def test_a_failed_seed_is_left_out_and_said_so_on_every_page(owner: User) -> None:
    """Seq-balance's seed 0 failed before its first step, GRPO's seed 1 was cancelled after 4
    steps: compare draws both groups from the runs that have steps, its scatter compares two
    such runs, and compare, the report, the runs list and the API each say what they left out
    and why."""
    from api.services import create_token

    from .dashboard_fixtures import sweep_with_a_failed_seed

    sweep = sweep_with_a_failed_seed(owner)
    runs = {(r.algorithm, r.seed): r for r in _runs(sweep)}
    failed = runs["ada-balance", 0]
    note = f"{LABELS[2]}: 1 seed (seed 1); left out: seed 0, failed before its first step"
    c = Client()
    c.force_login(owner)
    query = f"?sweep={sweep.pk}"

    # Compare: both groups drawn, each labelled by what its runs share.
    fig = c.get(reverse("dashboard:compare_chart") + query).json()
    lines = {t["name"]: t for t in fig["data"] if t.get("mode") == "lines" and t["name"]
             not in ("max", "min-max across seeds")}
    assert sorted(lines) == ["GRPO n=4: mean of 2 seeds (seeds 0, 1)",
                             f"{LABELS[2]}: seed 1 (1 of 2 seeds)"]
    assert not any("seed=" in name or "[" in name for name in lines)
    balance = list(Step.objects.filter(run=runs["ada-balance", 1]).order_by("step"))
    line = lines[f"{LABELS[2]}: seed 1 (1 of 2 seeds)"]
    assert line["x"] == [s.step for s in balance] == [1, 2, 3, 4, 5, 6]
    assert line["y"] == pytest.approx([s.real_reward for s in balance])
    # GRPO's mean: the steps both seeds recorded (the cancelled one stopped at step 4).
    grpo = defaultdict(list)
    for s in Step.objects.filter(run__in=[runs["grpo", 0], runs["grpo", 1]]):
        grpo[s.step].append(s.real_reward)
    line = lines["GRPO n=4: mean of 2 seeds (seeds 0, 1)"]
    assert line["x"] == [1, 2, 3, 4]
    assert line["y"] == pytest.approx([statistics.fmean(grpo[st]) for st in (1, 2, 3, 4)])
    # The scatter compares a run of each group that has steps, never the failed one.
    scatter = c.get(reverse("dashboard:compare_scatter") + query).json()
    assert scatter["layout"]["xaxis"]["title"]["text"].startswith(
        f"pass rate in A: {runs['grpo', 0].name}")
    assert scatter["layout"]["yaxis"]["title"]["text"].startswith(
        f"pass rate in B: {runs['ada-balance', 1].name}")
    assert len(scatter["data"][0]["x"]) > 0 and "annotations" not in scatter["layout"]
    page = c.get(reverse("dashboard:compare") + query)
    html = page.content.decode()
    assert page.context["scatter"] == (runs["grpo", 0], runs["ada-balance", 1])
    assert 'id="compare-groups-left-out"' in html and f"{note}." in html
    assert "mean of 2 seeds (seeds 0, 1)" in html
    # The final-metrics columns say what each is: means of the last steps, totals over the run.
    head = html[html.index('id="final-metrics"'):html.index("</thead>",
                                                              html.index('id="final-metrics"'))]
    assert "mean of the last 10 steps" in head and "total over the run" in head
    assert html.count("(mean of the last 10 steps)") == 0

    # The report: the same groups, rows from the runs with steps, the same note.
    report = reports.build_report(_runs(sweep))
    groups = {g["label"]: g for g in report["groups"]}
    assert groups[LABELS[2]]["runs"] == [runs["ada-balance", 1].pk]
    assert groups[LABELS[2]]["left_out"] == [{
        "run": failed.pk, "name": failed.name, "seed": 0, "status": "failed",
        "reason": "failed before its first step"}]
    assert groups[LABELS[2]]["note"] == note
    assert groups["GRPO n=4"]["runs"] == [runs["grpo", 0].pk, runs["grpo", 1].pk]
    assert groups["GRPO n=4"]["left_out"] == []
    cost = {r["group"]: r for r in report["rows"]["table-cost"]}
    assert (cost["GRPO n=4"]["seeds"], cost["GRPO n=4"]["steps_per_seed"]) == (2, "4/6")
    assert (cost[LABELS[2]]["seeds"], cost[LABELS[2]]["steps_per_seed"]) == (1, "6")
    assert cost[LABELS[2]]["samples_per_step"] == pytest.approx(
        statistics.fmean(s.samples for s in balance))
    assert cost[LABELS[2]]["samples_per_step_ci95"] is None  # one seed: no interval
    rows = list(csv.DictReader(io.StringIO(c.get(
        reverse("dashboard:report_csv", args=["table-cost"]) + query).content.decode())))
    assert [(r["group"], r["seeds"], r["steps_per_seed"]) for r in rows] == [
        ("GRPO n=4", "2", "4/6"), (LABELS[2], "1", "6")]
    html = c.get(reverse("dashboard:report") + query).content.decode()
    assert 'id="report-groups-left-out"' in html and f"{note}." in html
    assert "failed before its first step" in html[html.index('id="report-groups"'):]

    # The runs list's sweep row, and the API's report.
    html = c.get(reverse("dashboard:run_list")).content.decode()
    head = html[html.index(f'id="sweep-{sweep.pk}"'):html.index("</tr>",
                                                               html.index(f'id="sweep-{sweep.pk}"'))]
    assert f"Compare and report leave out: {note}" in head
    api = Client(HTTP_AUTHORIZATION=f"Bearer {create_token(owner, 'tests')[1]}")
    body = api.get("/api/v1/report", {"sweep": sweep.pk}).json()
    assert [g["note"] for g in body["groups"]] == [
        "GRPO n=4: mean of 2 seeds (seeds 0, 1)", note]

    # Retried in its place (services.retry_run): the sweep's pages count the retry (queued, no
    # step yet) and no longer the failed run; chosen together, the failed run is left out as
    # replaced by its retry.
    retry = services.retry_run(failed, owner)
    note = f"{LABELS[2]}: 1 seed (seed 1); left out: seed 0, queued: no step recorded yet"
    assert [g["note"] for g in reports.build_report(
        list(experiment_selectors.sweep_runs(sweep.pk)))["groups"]][1] == note
    html = c.get(reverse("dashboard:compare") + query).content.decode()
    assert f"{note}." in html and f'href="/runs/{failed.pk}/"' not in html
    html = c.get(reverse("dashboard:run_list")).content.decode()
    assert "Compare and report leave out" not in html  # the retry is queued: not for good
    chosen = [failed, retry, runs["ada-balance", 1]]
    (group,) = selectors.seed_groups(
        list(Run.objects.filter(pk__in=[r.pk for r in chosen]).select_related("prompt_set")))
    assert [(m.run.pk, m.reason) for m in group.left_out] == [
        (failed.pk, f"replaced by its retry (run {retry.pk})"),
        (retry.pk, "queued: no step recorded yet")]


FAMILY = ["grpo", "pods", "gvm-raft", "vade", "dppo"]


@pytest.fixture
def family(owner: User) -> Sweep:
    """The adaptive-sampling family side by side: five algorithms x two seeds, recorded with
    their evaluations (steps 0, 3 and 6)."""
    return recorded_sweep(owner, "family", {"algorithm": FAMILY, "seed": [0, 1]})


def _difficulty_bin(rate: float) -> str:
    """The family report's bins, written out: never solved, quarters, always solved."""
    if rate == 0:
        return "0"
    if rate == 1:
        return "1"
    upper = int(np.ceil(rate * 4))
    return f"({(upper - 1) / 4:g}, {upper / 4:g}{')' if upper == 4 else ']'}"


def test_family_report_of_every_method(family: Sweep, owner: User) -> None:
    """The family report's own sections, each computed here from the sample rows; its page
    shows every method under every section with a sentence of what to look for, and each
    section's CSV is its rows."""
    report = reports.build_report(_runs(family))
    groups = report["groups"]
    assert sorted(g["algorithm"] for g in groups) == sorted(FAMILY)
    for g in groups:
        label = g["label"]
        assert g["seeds"] == [0, 1]
        # Zero-advantage groups: per step, the kept groups whose kept samples' advantages are
        # all zero, from the sample rows (the trainer's metric, recomputed).
        zero: dict[tuple[int, int], float] = {}
        for rid in g["runs"]:
            kept: dict[tuple[int, int], list[float]] = defaultdict(list)
            for s in Sample.objects.filter(run_id=rid, kept=True):
                kept[s.step, s.prompt_id].append(s.advantage)
            for st in {st for st, _ in kept}:
                prompts = [a for (k, _), a in kept.items() if k == st]
                zero[rid, st] = sum(all(abs(x) <= 1e-12 for x in a) for a in prompts) / len(
                    prompts)
        rows = _rows(report, "zero-advantage", label)
        assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
        for r in rows:
            _check_spread(r, [zero[rid, r["step"]] for rid in g["runs"]])
        # Samples per prompt against difficulty: a prompt's pass rate over its first n = 4
        # samples of every step it was drawn in, binned; its samples per such step.
        per_seed: list[dict[str, list[float]]] = []
        for rid in g["runs"]:
            first: dict[int, list[bool]] = defaultdict(list)
            drawn: dict[int, int] = defaultdict(int)
            steps: dict[int, set[int]] = defaultdict(set)
            for s in Sample.objects.filter(run_id=rid):
                drawn[s.prompt_id] += 1
                steps[s.prompt_id].add(s.step)
                if s.index < 4:
                    first[s.prompt_id].append(s.reward > 0.5)
            bins: dict[str, list[float]] = defaultdict(list)
            for p, outcomes in first.items():
                bins[_difficulty_bin(sum(outcomes) / len(outcomes))].append(
                    drawn[p] / len(steps[p]))
            per_seed.append(bins)
        rows = _rows(report, "samples-difficulty", label)
        names = [n for _, n in reports.DIFFICULTY_BINS]
        assert [r["pass_rate_bin"] for r in rows] == [
            n for n in names if any(n in b for b in per_seed)]
        for r in rows:
            seeds = [b[r["pass_rate_bin"]] for b in per_seed if r["pass_rate_bin"] in b]
            _check_spread(r, [statistics.fmean(v) for v in seeds])
            assert r["prompts"] == pytest.approx(statistics.fmean(len(v) for v in seeds))
    # GRPO spends n = 4 on every prompt whatever its difficulty; POD-style down-sampling or
    # GVM's allocation do not.
    grpo = next(g["label"] for g in groups if g["algorithm"] == "grpo")
    assert {r["mean"] for r in _rows(report, "samples-difficulty", grpo)} == {4.0}

    c = Client()
    c.force_login(owner)
    url = reverse("dashboard:sweep_family", args=[family.pk])
    html = c.get(url).content.decode()
    assert "Family report: sweep family" in html
    for g in groups:
        assert f'data-group="{g["label"]}"' in html
    for name, look_for in reports.FAMILY.items():
        assert f'id="section-{name}"' in html and escape(look_for) in html
        if reports.SECTIONS[name].kind == "figure":
            for fmt in ("png", "svg"):
                assert (f'data-download-chart="fig-{name}" data-format="{fmt}" '
                        f'data-filename="family-sweep-{family.pk}-{name}"') in html
    assert " ± " in html  # the cost table: mean ± 95% CI over the two seeds
    for name in ("zero-advantage", "samples-difficulty"):
        resp = c.get(reverse("dashboard:report_csv", args=[name]) + f"?sweep={family.pk}")
        assert f'href="{reverse("dashboard:report_csv", args=[name])}?sweep={family.pk}"' in html
        got = list(csv.DictReader(io.StringIO(resp.content.decode())))
        want = report["rows"][name]
        assert [r["group"] for r in got] == [r["group"] for r in want]
        assert [float(r["mean"]) for r in got] == pytest.approx([r["mean"] for r in want])
        assert list(got[0]) == list(reports.SECTIONS[name].columns)
    # The difficulty figure: a bar per method, its heights the rows' means.
    fig = c.get(reverse("dashboard:report_figure", args=["samples-difficulty"])
                + f"?sweep={family.pk}").json()
    assert [t["name"] for t in fig["data"]] == [g["label"] for g in groups]
    assert fig["data"][0]["y"] == [r["mean"] for r in _rows(report, "samples-difficulty",
                                                             groups[0]["label"])]
    # Linked from the sweep's row in the runs list and from its report.
    assert f'href="{url}"' in c.get(reverse("dashboard:run_list")).content.decode()
    report_html = c.get(reverse("dashboard:report") + f"?sweep={family.pk}").content.decode()
    assert f'id="family-link" href="{url}"' in report_html
    assert c.get(reverse("dashboard:sweep_family", args=[999999])).status_code == 404
