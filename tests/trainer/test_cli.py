"""python -m trainer run: validation before any work, error format, a simulated run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainer.cli import main
from trainer.recorders import read_events


@pytest.mark.parametrize("toml, field", [
    ('algorithm = "ada-balance"\ngroup_size = 8\nsamples_per_round = 4\n', "samples_per_round"),
    ('algorithm = "ppo"\n', "algorithm"),
    ('grup_size = 4\n', "grup_size"),
    ('model = "/no/such/model"\n', "model"),
    ('batch_size = "big"\n', "batch_size"),
])
def test_invalid_config_fails_before_the_out_dir_exists(tmp_path, capsys, toml, field) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(toml)
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ")
    assert not out.exists()


def test_missing_config_file(tmp_path, capsys) -> None:
    assert main(["run", "--config", str(tmp_path / "nope.toml"), "--out",
                 str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: config: no such file")
    assert not (tmp_path / "o").exists()


def test_every_command_has_help(capsys) -> None:
    # One process for the entry point itself (`python -m trainer`); the subcommands' help is the
    # same parser, asked in this process (a process each cost a Python and torch start).
    proc = subprocess.run([sys.executable, "-m", "trainer", "--help"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m trainer" in proc.stdout
    for cmd in (["run"], ["simulate"], ["warmstart"], ["eval"]):
        with pytest.raises(SystemExit) as exit_:
            main([*cmd, "--help"])
        out = capsys.readouterr().out
        assert exit_.value.code == 0, cmd
        assert f"usage: python -m trainer {cmd[0]}" in out, cmd


def test_simulated_run_writes_events_and_checkpoints(tmp_path, capsys) -> None:
    pytest.importorskip("trainer.data")
    pytest.importorskip("trainer.backends")
    cfg = tmp_path / "run.toml"
    cfg.write_text('backend = "simulated"\nalgorithm = "ada-pos"\nbatch_size = 4\n'
                   'total_steps = 2\nsave_every = 1\neval_every = 0\ntask_num_prompts = 16\n')
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["last_step"] == 2
    events = read_events(out / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2]
    assert (out / "checkpoints" / "step-000002" / "trainer_state.json").is_file()
    assert json.loads((out / "config.json").read_text())["algorithm"] == "ada-pos"


def test_missing_builtin_model_is_a_field_error(tmp_path, capsys, monkeypatch) -> None:
    pytest.importorskip("trainer.model")
    from trainer.model import MODEL_DIR_ENV

    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "not-warm-started"))
    cfg = tmp_path / "run.toml"
    cfg.write_text("task_num_prompts = 16\n")
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: model: ")
    assert not out.exists()
