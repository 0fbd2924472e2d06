"""Export (a run as a Parquet bundle, from the API and the run page) and import (``manage.py
import_run``: a trainer CLI run, or a bundle) on the real database. The round trip exports a
recorded run, imports the bundle, and finds the same records; importing again changes nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from api.services import create_token
from django.conf import settings
from django.core.management import CommandError, call_command
from django.urls import reverse
from experiments import bundles
from experiments.imports import import_run
from experiments.models import (
    Checkpoint,
    EvalResult,
    Prompt,
    PromptSet,
    PromptStep,
    RoundStat,
    Run,
    Sample,
    Step,
)

from tests.fixtures.services import ROOT, make_prompts

from .dashboard_fixtures import make_prompt_set, make_run, record_run_with_evals

RECORDS = {
    Step: ("step", "metrics", "real_reward", "kept_reward", "samples", "tokens", "wall_seconds"),
    RoundStat: ("step", "round", "active_prompts", "samples", "positives", "finished", "tokens"),
    PromptStep: ("step", "prompt_id", "samples", "positives", "negatives", "rounds",
                 "exit_round", "missing", "kept_positives", "kept_negatives", "baseline",
                 "tokens", "p_hat", "allocated"),
    Sample: ("step", "prompt_id", "index", "round", "response", "tokens", "reward", "kept",
             "advantage", "verifier_error", "weight", "policy_version", "reward_components"),
    EvalResult: ("step", "metrics"),
    Checkpoint: ("step", "path"),
}


def records(run: Run) -> dict[str, list[tuple[Any, ...]]]:
    """Every record of the run, without its id, in key order."""
    out = {}
    for model, fields in RECORDS.items():
        key = {RoundStat: ["step", "round"], PromptStep: ["step", "prompt_id"],
               Sample: ["step", "prompt_id", "index"]}.get(model, ["step"])
        out[model.__name__] = list(model.objects.filter(run=run).order_by(*key)
                                   .values_list(*fields))
    return out


def unzip(data: bytes, folder: Path) -> Path:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        zf.extractall(folder)
    return folder


@pytest.fixture
def recorded(user: Any) -> Run:
    ps = make_prompt_set("arith", size=12)
    # Asynchronous (max_policy_lag 1): its samples carry the policy version that generated them.
    run = record_run_with_evals(make_run(user, ps, total_steps=3, eval_every=2, eval_k=2,
                                         name="source", max_policy_lag=1),
                                make_prompts(4, pass_rate=0.5))
    Checkpoint.objects.create(run=run, step=3, path=str(
        Path(settings.CHECKPOINT_ROOT) / f"run-{run.pk}" / "checkpoints" / "step-000003"))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    # Step 2's samples as a run combining rewards records them (a failed component: null).
    Sample.objects.filter(run=run, step=2).update(
        reward_components={"verifier": 1.0, "odd": 0.5, "unruly": None})
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_export_holds_every_record_as_parquet(recorded: Run, user: Any, tmp_path: Path,
                                              monkeypatch: Any) -> None:
    # Small chunks: the tables are written as several row groups, as a large run's are.
    monkeypatch.setattr(bundles, "CHUNK_ROWS", 7)
    token = create_token(user, "t")[1]
    from django.test import Client

    r = Client().get(f"/api/v1/runs/{recorded.pk}/export",
                     headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r["Content-Type"] == "application/zip"
    assert f"run-{recorded.pk}-bundle.zip" in r["Content-Disposition"]
    folder = unzip(b"".join(r.streaming_content), tmp_path / "bundle")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["run"]["name"] == "source" and manifest["version"] == bundles.VERSION
    assert json.loads((folder / "config.json").read_text()) == recorded.config

    samples = pq.read_table(folder / "samples.parquet")
    assert pq.ParquetFile(folder / "samples.parquet").num_row_groups > 1
    db = records(recorded)
    assert manifest["rows"]["samples"] == samples.num_rows == len(db["Sample"])
    # reward_components as JSON text (null: the verifier alone).
    assert list(zip(*([None if v is None else json.loads(v) for v in samples.column(c)
                       .to_pylist()] if c == "reward_components" else samples.column(c)
                      .to_pylist() for c in RECORDS[Sample]), strict=True)) == db["Sample"]
    assert {json.dumps(r[-1]) for r in db["Sample"]} == {
        "null", '{"odd": 0.5, "unruly": null, "verifier": 1.0}'}
    prompt_steps = pq.read_table(folder / "prompt_steps.parquet")
    assert list(zip(*(prompt_steps.column(c).to_pylist() for c in RECORDS[PromptStep]),
                    strict=True)) == db["PromptStep"]
    rounds = pq.read_table(folder / "rounds.parquet").to_pylist()
    assert [tuple(r[c] for c in RECORDS[RoundStat]) for r in rounds] == db["RoundStat"]
    steps = pq.read_table(folder / "steps.parquet").to_pylist()
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert [json.loads(s["metrics"]) for s in steps] == [row[1] for row in db["Step"]]
    # Each numeric metric is a column of its own too.
    assert [s["metric.zero_adv_frac"] for s in steps] == [row[1]["zero_adv_frac"]
                                                          for row in db["Step"]]
    evals = pq.read_table(folder / "evaluations.parquet").to_pylist()
    assert [e["step"] for e in evals] == [0, 2]
    assert "metric.greedy_accuracy" in evals[0]
    prompts = pq.read_table(folder / "prompts.parquet")
    assert prompts.column("prompt_id").to_pylist() == list(
        Prompt.objects.filter(prompt_set=recorded.prompt_set).order_by("index")
        .values_list("pk", flat=True))


@pytest.mark.django_db
def test_run_page_has_an_export_button(recorded: Run, client: Any, user: Any,
                                       tmp_path: Path) -> None:
    client.force_login(user)
    page = client.get(reverse("dashboard:run_detail", args=[recorded.pk])).content.decode()
    url = reverse("dashboard:run_export", args=[recorded.pk])
    assert f'href="{url}"' in page
    r = client.get(url)
    assert r.status_code == 200
    folder = unzip(b"".join(r.streaming_content), tmp_path / "b")
    assert pq.read_table(folder / "samples.parquet").num_rows == Sample.objects.filter(
        run=recorded).count()


@pytest.mark.django_db
def test_round_trip_export_import_gives_identical_records(recorded: Run, user: Any,
                                                          tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.zip"
    with open(bundle, "wb") as fh:
        bundles.write_bundle(recorded, fh)
    folder = unzip(bundle.read_bytes(), tmp_path / "unzipped")
    # The bundle names checkpoints relative to the checkpoint root, not by the server's
    # absolute paths (issue 19); the import resolves them back under this server's root.
    assert pq.read_table(folder / "checkpoints.parquet").column("path").to_pylist() == [
        f"run-{recorded.pk}/checkpoints/step-000003"]
    sets = PromptSet.objects.count()

    first = import_run(folder, user)
    assert first.created and first.run.pk != recorded.pk
    # Back on the platform it came from: the same prompt set, so the very same prompt ids.
    assert first.run.prompt_set_id == recorded.prompt_set_id and PromptSet.objects.count() == sets
    assert records(first.run) == records(recorded)
    for f in ("name", "algorithm", "config", "model", "seed", "retention", "total_steps",
              "status", "current_step", "samples_spent", "latest_real_reward"):
        assert getattr(first.run, f) == getattr(recorded, f), f

    again = import_run(folder, user)
    assert not again.created and again.run.pk == first.run.pk
    # A new attempt: the dashboard's caches of the first import's records do not apply.
    assert (first.run.attempts, again.run.attempts) == (1, 2)
    assert records(again.run) == records(recorded)
    assert Run.objects.count() == 2

    # The zip itself imports too (another source, so another run), with the same records.
    from_zip = import_run(bundle, user)
    assert from_zip.run.pk not in (first.run.pk, recorded.pk)
    assert records(from_zip.run) == records(recorded)


@pytest.mark.django_db
def test_export_run_command_writes_the_same_bundle(recorded: Run, user: Any,
                                                   tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("export_run", str(recorded.pk), str(tmp_path), stdout=out)
    path = tmp_path / f"run-{recorded.pk}-bundle.zip"
    assert str(path) in out.getvalue()
    result = import_run(path, user)
    assert records(result.run) == records(recorded)
    # A bundle written before samples had a loss weight imports with the default, 1.
    folder = unzip(path.read_bytes(), tmp_path / "old")
    table = pq.read_table(folder / "samples.parquet")
    pq.write_table(table.drop_columns(["weight"]), folder / "samples.parquet")
    old = import_run(folder, user)
    assert records(old.run) == records(recorded)
    assert set(Sample.objects.filter(run=old.run).values_list("weight", flat=True)) == {1.0}
    assert set(Sample.objects.filter(run=old.run).values_list("policy_version", flat=True)) \
        == {0, 1, 2}  # 3 steps, each 0 or 1 version behind
    # One written before samples had a policy version imports them as synchronous (null).
    pq.write_table(table.drop_columns(["weight", "policy_version"]),
                   folder / "samples.parquet")
    older = import_run(folder, user)
    assert set(Sample.objects.filter(run=older.run).values_list("policy_version", flat=True)) \
        == {None}
    with pytest.raises(CommandError, match="run_id: no run"):
        call_command("export_run", "99999999", str(tmp_path))


@pytest.mark.django_db
def test_bundle_into_a_platform_without_its_prompt_set_brings_the_prompts(
        recorded: Run, user: Any, tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    with open(tmp_path / "b.zip", "wb") as fh:
        bundles.write_bundle(recorded, fh)
    unzip((tmp_path / "b.zip").read_bytes(), folder)
    # A platform without the set: none of its sets holds these prompts (a set with the same
    # contents, whatever its name, would be reused: the next test).
    PromptSet.objects.filter(pk=recorded.prompt_set_id).update(name="renamed",
                                                               content_hash="other")
    result = import_run(folder, user)
    assert result.run.prompt_set_id != recorded.prompt_set_id
    old = dict(Prompt.objects.filter(prompt_set=recorded.prompt_set).values_list("pk", "text"))
    new = dict(Prompt.objects.filter(prompt_set=result.run.prompt_set).values_list("pk",
                                                                                  "text"))
    mine, theirs = records(result.run), records(recorded)
    # Same records once prompt ids are read as the prompts they name.
    for table in ("PromptStep", "Sample"):
        assert [(r[0], new[r[1]], *r[2:]) for r in mine[table]] == [
            (r[0], old[r[1]], *r[2:]) for r in theirs[table]]
    assert mine["Step"] == theirs["Step"]


CLI_TOML = """
algorithm = "ada-balance"
backend = "simulated"
prompts = "builtin:arithmetic"
task_num_prompts = 40
eval_num_prompts = 8
batch_size = 6
group_size = 4
samples_per_round = 4
max_rounds = 3
total_steps = 4
save_every = 2
eval_every = 2
eval_k = 2
seed = 5
"""


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: Any) -> Path:
    """A run of ``python -m trainer run`` (simulated backend)."""
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "run.toml").write_text(CLI_TOML)
    # Run with a reward of a test module too (tests/rewards_for_tests.py): the import carries
    # each sample's components, without the reward registered in the importing process (whose
    # tests read run.toml: the same run but for its rewards).
    (tmp / "rewards.toml").write_text(CLI_TOML + 'rewards = "verifier odd:0.5"\n')
    out = tmp / "out"
    done = subprocess.run([sys.executable, "-m", "trainer", "run", "--config",
                           str(tmp / "rewards.toml"), "--out", str(out), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RADA_REWARDS": "odd=tests.rewards_for_tests"})
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.django_db
def test_import_of_a_cli_run_records_what_it_emitted(cli_run: Path, user: Any,
                                                     staff_user: Any) -> None:
    from trainer.recorders import read_events

    out = io.StringIO()
    call_command("import_run", str(cli_run), owner="alice", name="cli", stdout=out)
    assert "imported run" in out.getvalue()
    run = Run.objects.get(name="cli")
    assert (run.status, run.owner, run.algorithm, run.seed, run.current_step) == (
        "succeeded", user, "ada-balance", 5, 4)
    by_pk = dict(Prompt.objects.filter(prompt_set=run.prompt_set)
                 .values_list("pk", "metadata__source_id"))
    events = read_events(cli_run / "events.jsonl")
    steps = [e for e in events if e["type"] == "step"]
    db = records(run)
    assert [r[0] for r in db["Step"]] == [e["step"] for e in steps]
    assert sum(r[4] for r in db["Step"]) == run.samples_spent == sum(
        len(e["samples"]) for e in steps)
    emitted = [(e["step"], s["prompt_id"], s["index"], s["round"], s["response"], s["tokens"],
                s["reward"], s["kept"]) for e in steps for s in e["samples"]]
    assert sorted(emitted) == sorted((r[0], by_pk[r[1]], *r[2:8]) for r in db["Sample"])
    components = [(e["step"], s["prompt_id"], s["index"], s["reward_components"])
                  for e in steps for s in e["samples"]]
    assert sorted(components) == sorted((r[0], by_pk[r[1]], r[2], r[12]) for r in db["Sample"])
    assert {tuple(c[3]) for c in components} == {("verifier", "odd")}
    emitted_ps = [(e["step"], p["prompt_id"], p["samples"], p["exit_round"],
                   p["kept_positives"]) for e in steps for p in e["prompts"]]
    assert sorted(emitted_ps) == sorted((r[0], by_pk[r[1]], r[2], r[6], r[8])
                                        for r in db["PromptStep"])
    assert [r[0] for r in db["EvalResult"]] == [e["step"] for e in events
                                                if e["type"] == "eval"]
    assert [r[0] for r in db["Checkpoint"]] == [2, 4]
    assert run.eval_set.size == 8 and run.prompt_set.size == 40
    assert all(Path(r[1]).is_dir() for r in db["Checkpoint"])
    # What the import is for: the dashboard's report draws it.
    from dashboard import reports

    report = reports.build_report([run])
    assert [g["runs"] for g in report["groups"]] == [[run.pk]]
    assert len(report["rows"]["reward"]) == 4

    # Idempotent: the same folder again updates the same run, with the same records.
    out = io.StringIO()
    call_command("import_run", str(cli_run), owner="alice", name="cli", stdout=out)
    assert "updated run" in out.getvalue()
    assert Run.objects.filter(name="cli").count() == 1 and records(run) == db
    # Another CLI run on the same prompts would share the prompt set; default owner: none
    # is a superuser here, so the command asks for one.
    with pytest.raises(CommandError, match="owner"):
        call_command("import_run", str(cli_run))


@pytest.mark.django_db
def test_a_bundle_never_shows_a_server_path(recorded: Run, user: Any, tmp_path: Path) -> None:
    # A checkpoint kept outside the root is named by its folder alone.
    Checkpoint.objects.create(run=recorded, step=2, path="/srv/secret/elsewhere/step-000002")
    with open(tmp_path / "b.zip", "wb") as fh:
        bundles.write_bundle(recorded, fh)
    folder = unzip((tmp_path / "b.zip").read_bytes(), tmp_path / "b")
    paths = pq.read_table(folder / "checkpoints.parquet").column("path").to_pylist()
    assert paths == ["step-000002", f"run-{recorded.pk}/checkpoints/step-000003"]
    assert not any(str(settings.CHECKPOINT_ROOT) in p or "/srv" in p for p in paths)
    imported = import_run(folder, user).run
    assert list(Checkpoint.objects.filter(run=imported).order_by("step")
                .values_list("path", flat=True)) == [
        str(Path(settings.CHECKPOINT_ROOT) / p) for p in paths]

    # A path that would climb out of the root is refused, naming the file; nothing is stored.
    import pyarrow as pa
    table = pq.read_table(folder / "checkpoints.parquet")
    pq.write_table(table.set_column(table.schema.get_field_index("path"), "path",
                                    pa.array(["../../etc", "x"])), folder / "checkpoints.parquet")
    runs = Run.objects.count()
    with pytest.raises(CommandError, match="checkpoints.parquet: .*leaves the checkpoint root"):
        call_command("import_run", str(folder), owner="alice", name="other")
    assert Run.objects.count() == runs


@pytest.mark.django_db
def test_import_errors_name_the_file(tmp_path: Path, user: Any) -> None:
    with pytest.raises(CommandError, match="dir: .* neither events.jsonl"):
        call_command("import_run", str(tmp_path), owner="alice")
    (tmp_path / "events.jsonl").write_text("")
    with pytest.raises(CommandError, match="config.json: missing"):
        call_command("import_run", str(tmp_path), owner="alice")
    (tmp_path / "config.json").write_text(json.dumps({"group_size": 1}))
    with pytest.raises(CommandError, match="config.json: group_size"):
        call_command("import_run", str(tmp_path), owner="alice")
    (tmp_path / "config.json").write_text(json.dumps({"backend": "simulated",
                                                      "task_num_prompts": 40}))
    (tmp_path / "events.jsonl").write_text(json.dumps({"type": "step", "step": 1}) + "\n")
    with pytest.raises(CommandError, match="events.jsonl: line 1: malformed step"):
        call_command("import_run", str(tmp_path), owner="alice")
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_damaged_bundle_names_the_file_and_stores_nothing(recorded: Run, user: Any,
                                                            tmp_path: Path) -> None:
    with open(tmp_path / "b.zip", "wb") as fh:
        bundles.write_bundle(recorded, fh)
    folder = unzip((tmp_path / "b.zip").read_bytes(), tmp_path / "b")
    runs = Run.objects.count()
    (folder / "samples.parquet").write_bytes(b"not parquet")
    with pytest.raises(CommandError, match="samples.parquet: "):
        call_command("import_run", str(folder), owner="alice")
    (folder / "prompts.parquet").unlink()
    with pytest.raises(CommandError, match="prompts.parquet: "):
        call_command("import_run", str(folder), owner="alice")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["run"]["algorithm"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CommandError, match="manifest.json: the run lacks algorithm"):
        call_command("import_run", str(folder), owner="alice")
    assert Run.objects.count() == runs


@pytest.mark.django_db
def test_import_of_a_cli_run_on_a_prompt_file_catches_up_when_reimported(
        tmp_path: Path, user: Any) -> None:
    """A CLI run on a JSONL file of prompts, imported while it had recorded 2 of its 4 steps
    (cancelled, saying so), then again once it finished: the same run, now complete."""
    import shutil

    prompts = tmp_path / "sums.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1),
                                           "pass_rate": 0.5}) + "\n" for i in range(10)))
    (tmp_path / "run.toml").write_text(
        CLI_TOML.replace('prompts = "builtin:arithmetic"', f'prompts = "{prompts}"')
        .replace("eval_every = 2", "eval_every = 0").replace("save_every = 2", "save_every = 0"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "trainer", "run", "--config",
                           str(tmp_path / "run.toml"), "--out", str(out), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    full = (out / "events.jsonl").read_text()
    partial = tmp_path / "partial"
    shutil.copytree(out, partial)
    events = [json.loads(line) for line in full.splitlines()]
    (partial / "events.jsonl").write_text("".join(
        json.dumps(e) + "\n" for e in events if e.get("step", 0) <= 2))

    first = import_run(partial, user)
    assert (first.run.status, first.run.current_step) == ("cancelled", 2)
    assert "2 of 4" in first.run.error
    ps = first.run.prompt_set
    assert (ps.source, ps.size, ps.name.startswith("sums.jsonl [")) == ("upload", 10, True)
    assert first.run.eval_set is None

    (partial / "events.jsonl").write_text(full)
    again = import_run(partial, user)
    assert not again.created and again.run.pk == first.run.pk
    assert (again.run.status, again.run.current_step, again.run.error) == ("succeeded", 4, "")
    assert Step.objects.filter(run=again.run).count() == 4
    assert again.run.samples_spent == sum(len(e["samples"]) for e in events
                                          if e["type"] == "step")
    # Another folder of the same run shares the prompt set.
    assert import_run(out, user).run.prompt_set_id == ps.pk


@pytest.mark.django_db
def test_a_bundle_reuses_a_set_of_the_same_prompts_whatever_its_name(
        recorded: Run, user: Any, tmp_path: Path) -> None:
    with open(tmp_path / "b.zip", "wb") as fh:
        bundles.write_bundle(recorded, fh)
    PromptSet.objects.filter(pk=recorded.prompt_set_id).update(name="renamed")
    result = import_run(tmp_path / "b.zip", user)
    assert result.run.prompt_set_id == recorded.prompt_set_id


@pytest.mark.django_db
def test_a_cli_run_on_the_built_in_task_shares_the_dashboards_sets(cli_run: Path,
                                                                    user: Any) -> None:
    """A ``python -m trainer run`` on builtin:arithmetic and a dashboard run on the same
    problems are compared prompt by prompt: the import finds the stored sets of the same
    contents (the training set generated on the prompt sets page, the held-out set as the demo
    stores it) instead of making its own, and the held-out set is the same definition."""
    from experiments import services

    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.digest import PromptDigest

    config = TrainConfig.from_toml(cli_run.parent / "run.toml")
    generated = services.create_builtin_prompt_set(user, "arithmetic 40 (generated)",
                                                   config.task_num_prompts,
                                                   config.task_min_digits,
                                                   config.task_max_digits, 0)
    heldout, created = services.find_or_import_prompt_set(
        resolve_prompts(config)[1], name="held out", source=PromptSet.Source.BUILTIN)
    assert created
    before = PromptSet.objects.count()
    run = import_run(cli_run, user, name="cli-shared").run
    assert (run.prompt_set_id, run.eval_set_id) == (generated.pk, heldout.pk)
    assert PromptSet.objects.count() == before
    assert generated.content_hash == PromptDigest.of(resolve_prompts(config)[0])
    # Compare's scatter now finds the prompts a dashboard run on that set sampled too.
    from dashboard import selectors

    from .dashboard_fixtures import make_run, record_run

    dash = record_run(make_run(user, generated, name="dash", total_steps=2, batch_size=6))
    assert selectors.per_prompt_pass_rates(run, dash)["a"]


@pytest.mark.django_db
def test_a_vade_runs_posterior_means_make_the_round_trip(user: Any, tmp_path: Path) -> None:
    """VADE stores each selected prompt's posterior mean (p_hat) with nothing allocated: the
    bundle carries both, null included."""
    run = record_run_with_evals(make_run(user, make_prompt_set("vade-set", size=12),
                                         algorithm="vade", total_steps=3, name="vade"), [])
    bundle = tmp_path / "vade.zip"
    with open(bundle, "wb") as fh:
        bundles.write_bundle(run, fh)
    back = import_run(bundle, user).run
    assert records(back) == records(run)
    rows = list(PromptStep.objects.filter(run=back).values_list("p_hat", "allocated"))
    assert rows and all(p is not None and a is None for p, a in rows)


def test_a_dppo_run_round_trips_its_pruning_and_importance_weights(user: Any,
                                                                  tmp_path: Path) -> None:
    """DPPO's decisions are in the records every run has: each completion's ``kept`` and its
    loss weight (1 / keep probability, above 1 where it could be pruned) and the steps' pruning
    metrics. The bundle carries them to an identical run."""
    ps = make_prompt_set("arith-dppo", size=8)
    run = record_run_with_evals(make_run(user, ps, algorithm="dppo", total_steps=4, name="dppo",
                                         group_size=6), [])
    weights = set(Sample.objects.filter(run=run).values_list("weight", flat=True))
    assert max(weights) > 1 and Sample.objects.filter(run=run, kept=False).exists()
    bundle = tmp_path / "dppo.zip"
    with open(bundle, "wb") as fh:
        bundles.write_bundle(run, fh)
    imported = import_run(bundle, user).run
    assert records(imported) == records(run)
    assert {s.metrics["samples_pruned"] for s in Step.objects.filter(run=imported)} != {0.0}
