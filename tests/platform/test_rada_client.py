"""``python -m rada`` end to end: the client runs as its own process and talks HTTP to a live
server (pytest-django's live_server, on the test database) while a real Celery worker executes
the runs it launches."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from api.services import create_token
from experiments.models import Run, Sample, Sweep

from tests.fixtures.services import ROOT

CONFIG = """# the keys of python -m trainer run
algorithm = "ada-balance"
backend = "simulated"
prompts = "builtin:arithmetic"
batch_size = 4
group_size = 4
samples_per_round = 4
max_rounds = 2
total_steps = 3
eval_every = 0
"""


def rada(args: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rada", *args], cwd=ROOT, env=env,
                          input=stdin, capture_output=True, text=True, timeout=300)


def test_client_end_to_end(live_server: Any, start_worker: Any, user: Any, other_user: Any,
                           tmp_path: Path, settings: Any) -> None:
    start_worker("cpu")
    env = {k: v for k, v in os.environ.items() if k not in ("RADA_URL", "RADA_TOKEN")}
    env["RADA_CONFIG"] = str(tmp_path / "conf" / "credentials.json")
    token = create_token(user, "client")[1]

    # Commands need a login first (exit 3), and every command has --help.
    assert rada(["runs"], env).returncode == 3
    for cmd in (["login"], ["prompt-sets", "upload"], ["launch"], ["runs"], ["wait"],
                ["cancel"], ["retry"], ["export"]):
        helped = rada([*cmd, "--help"], env)
        assert helped.returncode == 0 and "usage: python -m rada" in helped.stdout, cmd
    assert "Exit codes" in rada(["--help"], env).stdout

    bad = rada(["login", "--url", live_server.url], env, stdin="rada_not-a-token\n")
    assert bad.returncode == 3, bad.stderr
    login = rada(["login", "--url", live_server.url], env, stdin=token + "\n")
    assert login.returncode == 0, login.stderr
    assert "as alice" in login.stdout
    creds = Path(env["RADA_CONFIG"])
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert json.loads(creds.read_text())["token"] == token

    prompts = tmp_path / "sums.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)[::-1],
                                           "pass_rate": 0.5}) + "\n" for i in range(12)))
    # The upload answers before its import ends (202, "importing"): the client waits for it.
    settings.PROMPT_UPLOAD_WAIT_SECONDS = 0
    up = rada(["prompt-sets", "upload", str(prompts), "--name", "sums"], env)
    assert up.returncode == 0, up.stderr
    assert "12 prompts" in up.stdout and "importing sums: " in up.stderr
    assert "sums" in rada(["prompt-sets", "list"], env).stdout

    config = tmp_path / "sim.toml"
    config.write_text(CONFIG)
    # A paired axis crossed with seeds (issue 27), under a long name: the runs' names differ
    # only at their end.
    study = "a budget-matched comparison of the adaptive samplers"
    launched = rada(["launch", str(config), "--prompt-set", "sums", "--name", study,
                     "--sweep", "(algorithm, group_size)=(ada-balance, 4), (grpo, 8); seed=0,1",
                     "--wait"], env)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    sweep = Sweep.objects.get()
    runs = list(Run.objects.filter(sweep=sweep).order_by("pk"))
    assert [(r.algorithm, r.config["group_size"], r.seed, r.status, r.current_step)
            for r in runs] == [("ada-balance", 4, 0, "succeeded", 3),
                               ("ada-balance", 4, 1, "succeeded", 3),
                               ("grpo", 8, 0, "succeeded", 3), ("grpo", 8, 1, "succeeded", 3)]
    assert "3/3" in launched.stderr  # the progress bars
    # `runs` shows whole names to a pipe, and on an 80-column terminal cuts them in the
    # middle, keeping the values at their end (issue 27: cut at 40, four runs read alike).
    listed = rada(["runs", "--sweep", str(sweep.pk)], env)
    for run in runs:
        assert re.search(rf"^{run.pk}\s+{re.escape(run.name)}\s", listed.stdout, re.M), (
            listed.stdout)
    narrow = rada(["runs", "--sweep", str(sweep.pk)], {**env, "COLUMNS": "100"}).stdout
    rows = narrow.splitlines()[1:]
    assert len(rows) == 4 and all(len(row) <= 100 for row in rows), narrow
    for run in runs:
        (row,) = [row for row in rows if row.startswith(f"{run.pk} ")]
        assert "…" in row and f"group_size={run.config['group_size']}, seed={run.seed}]" in row

    # Bad input: exit 2, the field named.
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text(CONFIG.replace("group_size = 4", "group_size = 1"))
    refused = rada(["launch", str(bad_config), "--prompt-set", "sums"], env)
    assert refused.returncode == 2 and "group_size" in refused.stderr
    # A derived error only where its inputs are valid: a negative batch_size is one error,
    # not a second about the untouched mini-batch (issue 27).
    bad_config.write_text(CONFIG.replace("batch_size = 4", "batch_size = -5"))
    refused = rada(["launch", str(bad_config), "--prompt-set", "sums"], env)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == "error: batch_size: must be within [1, 65,536], got -5"
    assert rada(["launch", str(config), "--prompt-set", "nope"], env).returncode == 2

    out = tmp_path / "bundle"
    exported = rada(["export", str(runs[0].pk), "--out", str(out)], env)
    assert exported.returncode == 0, exported.stderr
    assert pq.read_table(out / "samples.parquet").num_rows == Sample.objects.filter(
        run=runs[0]).count()
    assert rada(["export", "999999"], env).returncode == 4
    down = rada(["runs", "--url", "http://127.0.0.1:9"], env)
    assert down.returncode == 5 and "cannot reach" in down.stderr

    # Cancel: a long run stops; another user's run is not ours to cancel (exit 4).
    config.write_text(CONFIG.replace("total_steps = 3", "total_steps = 100000"))
    long = rada(["launch", str(config), "--prompt-set", "sums", "--name", "long",
                 "--sweep", "seed=5"], env)
    assert long.returncode == 0, long.stderr
    long_run = Run.objects.get(sweep__name="long", total_steps=100000)
    theirs = as_user(env, create_token(other_user, "bob")[1])
    assert rada(["cancel", str(long_run.pk)], theirs).returncode == 4
    cancelled = rada(["cancel", str(long_run.pk)], env)
    assert cancelled.returncode == 0, cancelled.stderr
    # `wait` returns once it stopped: exit 1, it did not succeed.
    waited = rada(["wait", str(long_run.pk)], env)
    assert waited.returncode == 1 and "cancelled" in waited.stdout, waited.stdout
    long_run.refresh_from_db()
    assert long_run.status == "cancelled"
    assert rada(["wait", "--sweep", str(sweep.pk)], env).returncode == 0

    # Retry: the cancelled run of its sweep, in its place (issue 27); once.
    retried = rada(["retry", str(long_run.pk)], env)
    assert retried.returncode == 0, retried.stderr
    retry = Run.objects.get(replaces=long_run.pk)
    assert (retry.sweep_id, retry.seed, retry.name) == (long_run.sweep_id, 5,
                                                        "long [seed=5] (attempt 2)")
    assert f"retried in sweep {long_run.sweep_id} as run {retry.pk}" in retried.stdout
    assert f"cancelled (replaced by {retry.pk})" in rada(
        ["runs", "--sweep", str(long_run.sweep_id)], env).stdout
    twice = rada(["retry", str(long_run.pk)], env)
    assert twice.returncode == 2 and "already retried" in twice.stderr
    assert rada(["cancel", "--sweep", str(long_run.sweep_id)], env).returncode == 0
    # The sweep's wait follows the retry, not the run it replaced.
    waited = rada(["wait", "--sweep", str(long_run.sweep_id)], env)
    assert waited.returncode == 1 and f"run {retry.pk} " in waited.stdout
    assert f"run {long_run.pk} " not in waited.stdout
    listed = [json.loads(line) for line in rada(["runs", "--json"], env).stdout.splitlines()]
    assert {r["id"] for r in listed} == set(Run.objects.values_list("pk", flat=True))


def as_user(env: dict[str, str], token: str) -> dict[str, str]:
    """The environment of another user's client: the token given in $RADA_TOKEN wins over the
    stored one."""
    return {**env, "RADA_TOKEN": token}


def test_the_client_installs_as_a_command_of_its_own(tmp_path: Path) -> None:
    """``pip install ./rada`` gives a ``rada`` command that runs from any folder, imports
    neither Django nor torch, and calls itself ``rada`` in its help and messages."""
    import shutil

    # From a copy: setuptools builds in the source folder, which must stay as checked out.
    source = shutil.copytree(ROOT / "rada", tmp_path / "rada",
                             ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(target),
                    str(source)], check=True, capture_output=True, timeout=300)
    command = target / "bin" / "rada"
    assert command.is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(target), "HOME": str(tmp_path),
           "RADA_CONFIG": str(tmp_path / "credentials.json")}
    shown = subprocess.run([str(command), "--help"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: rada ")
    refused = subprocess.run([str(command), "runs"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3 and "run `rada login --url URL`" in refused.stderr
    light = subprocess.run(
        [sys.executable, "-c", "import sys, rada.cli; "
         "print(sorted(m for m in ('django', 'torch') if m in sys.modules))"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert light.stdout.strip() == "[]", light.stderr
