import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.model import MODEL_DIR_ENV
from trainer.warmstart import REPORT_NAME, ensure_builtin_model, summarize_pass_rates


def test_fixture_checkpoint_loads_and_pass_rates_move_off_zero(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    assert (tiny_model_dir / "model.safetensors").is_file()
    ids = torch.tensor([tokenizer("12+34=")["input_ids"]])
    out = model.generate(ids, max_new_tokens=5, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > ids.shape[1]
    report = json.loads((tiny_model_dir / REPORT_NAME).read_text())
    assert report["stop_reason"] == "max steps"
    two = report["pass_rates"]["2_digit"]
    assert two["mean"] > 0.0
    assert two["never"] < two["prompts"]
    assert sum(two["histogram"]) == two["prompts"]


def test_summarize_pass_rates() -> None:
    s = summarize_pass_rates([0.0, 0.05, 0.5, 1.0])
    assert s["histogram"] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    assert (s["never"], s["always"], s["mean"]) == (1, 1, 0.3875)


def test_ensure_builtin_model_reuses_existing(tiny_model_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL_DIR_ENV, str(tiny_model_dir))
    before = (tiny_model_dir / "model.safetensors").stat().st_mtime_ns
    assert ensure_builtin_model(progress=False) == tiny_model_dir
    assert (tiny_model_dir / "model.safetensors").stat().st_mtime_ns == before


def test_warmstart_cli_refuses_to_overwrite(tiny_model_dir: Path, capsys) -> None:
    from trainer.cli import main

    assert main(["warmstart", "--out", str(tiny_model_dir)]) == 1
    assert "--force" in capsys.readouterr().err


def test_cli_time_limit_still_writes_a_loadable_checkpoint(tmp_path: Path, capsys) -> None:
    from trainer.cli import main

    out = tmp_path / "ws"
    rc = main(["warmstart", "--out", str(out), "--steps", "50", "--batch-size", "8",
               "--max-seconds", "0", "--report-prompts", "0", "--threads", "1"])
    assert rc == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert (report["steps"], report["stop_reason"]) == (1, "time limit")
    # The bar names the target it stops at and bounds the time, rather than reading "0/50"
    # with the ETA of all 50 steps (a user's 0/1500, 14-22 min, stopped at 600 in 3.5 min).
    bar = captured.err.replace("\r", "\n")
    assert "warm start until the 2-digit pass rate reaches 0.60: step 0 of at most 50" in bar
    assert "2-digit pass rate not checked yet (every 50 steps), at most 00:00 more" in bar
    assert "warm start stopped after 1 step: time limit" in bar
    assert json.loads((out / REPORT_NAME).read_text()) == report
    AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert not (tmp_path / ".ws.tmp").exists()


def test_long_task_warm_start_from_a_checkpoint(tiny_model_dir: Path, tmp_path: Path,
                                                capsys) -> None:
    """``--task arithmetic-long --init DIR``: continues from the checkpoint's weights and reports
    pass rates and response lengths per operand count (a few steps: the recipe itself is
    measured in docs/benchmarks.md, not here)."""
    from trainer.cli import main

    out = tmp_path / "long"
    rc = main(["warmstart", "--task", "arithmetic-long", "--init", str(tiny_model_dir),
               "--out", str(out), "--steps", "2", "--batch-size", "4", "--report-prompts", "2",
               "--target-pass-rate", "0", "--threads", "1"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["task"], report["init"], report["steps"]) == (
        "arithmetic-long", str(tiny_model_dir), 2)
    rates = report["pass_rates"]
    assert [k for k in rates if k.endswith("_operands")] == [
        "2_operands", "4_operands", "6_operands", "8_operands"]
    assert all(rates[k]["prompts"] == 2 and rates[k]["mean_response_tokens"] >= 1
               for k in rates if k.endswith("_operands"))
    AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert main(["warmstart", "--task", "arithmetic-long", "--init", str(tmp_path / "none"),
                 "--out", str(tmp_path / "x")]) == 2
    assert "--init" in capsys.readouterr().err


def test_long_task_default_out_is_next_to_the_builtin_model(tmp_path: Path, capsys,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from trainer.cli import main

    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "tiny"))
    (tmp_path / "tiny-long").mkdir()
    (tmp_path / "tiny-long" / "config.json").write_text("{}")
    assert main(["warmstart", "--task", "arithmetic-long"]) == 1  # never the built-in's dir
    assert str(tmp_path / "tiny-long") in capsys.readouterr().err
