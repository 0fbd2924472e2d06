import json
from pathlib import Path

import pytest

from trainer.backends.hf import HFBackend
from trainer.cli import main
from trainer.evaluate import evaluate, pass_at_k
from trainer.model import load_model_dir
from trainer.tasks import arithmetic_prompts
from trainer.verifiers import exact_verifier


def test_pass_at_k() -> None:
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)


def test_evaluate_tiny_model(tiny_model_dir: Path) -> None:
    model, tok = load_model_dir(tiny_model_dir, "cpu")
    backend = HFBackend(model, tok, max_new_tokens=6)
    prompts = arithmetic_prompts(12, max_digits=1, seed=5)
    metrics = evaluate(backend, prompts, exact_verifier, k=4, seed=0, batch_prompts=5)
    assert metrics["prompts"] == 12 and metrics["k"] == 4
    assert 0.0 <= metrics["avg@4"] <= metrics["pass@4"] <= 1.0
    assert 0.0 <= metrics["greedy_accuracy"] <= 1.0
    assert metrics["pass@4"] > 0.0  # the short warm start solves some 1-digit sums
    assert metrics == evaluate(backend, prompts, exact_verifier, k=4, seed=0, batch_prompts=5)


def test_eval_cli_prints_json(tiny_model_dir: Path, capsys) -> None:
    rc = main(["eval", "--model", str(tiny_model_dir), "--num-prompts", "8", "-k", "2",
               "--device", "cpu", "--max-new-tokens", "6"])
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["prompts"] == 8 and "pass@2" in metrics


def test_eval_cli_missing_model(tmp_path: Path, capsys) -> None:
    assert main(["eval", "--model", str(tmp_path / "none")]) == 2
    assert "model" in capsys.readouterr().err
