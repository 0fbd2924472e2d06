import itertools
import json
from pathlib import Path

import pytest

from trainer.backends.hf import HFBackend
from trainer.cli import main
from trainer.evaluate import all_correct_at_k, evaluate, pass_at_k
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


def test_all_correct_at_k() -> None:
    assert all_correct_at_k(4, 4, 4) == 1.0
    assert all_correct_at_k(4, 3, 4) == 0.0
    assert all_correct_at_k(10, 3, 1) == pytest.approx(0.3)
    assert all_correct_at_k(5, 3, 2) == pytest.approx(3 / 10)


def test_curves_for_every_k_match_enumerating_subsets() -> None:
    """pass@j and all_correct@j for j = 1..k, against the fraction of j-subsets of each prompt's
    k samples with any (every) response correct, averaged over prompts."""
    from trainer.backends.simulated import SimulatedBackend
    from trainer.config import TrainConfig
    from trainer.types import Prompt

    k = 6
    prompts = [Prompt(id=str(i), text=f"{i}+0=", answer=str(i)[::-1],
                      metadata={"pass_rate": i / 9}) for i in range(10)]
    backend = SimulatedBackend(TrainConfig(backend="simulated"))
    metrics = evaluate(backend, prompts, exact_verifier, k=k, seed=3, batch_prompts=4)
    sampled = backend.generate(prompts[:4], [k] * 4, seed=3) + backend.generate(
        prompts[4:8], [k] * 4, seed=7) + backend.generate(prompts[8:], [k] * 2, seed=11)
    for j in range(1, k + 1):
        any_ok, all_ok = [], []
        for p, group in zip(prompts, sampled, strict=True):
            hits = [g.text == p.answer for g in group]
            subsets = list(itertools.combinations(hits, j))
            any_ok.append(sum(any(s) for s in subsets) / len(subsets))
            all_ok.append(sum(all(s) for s in subsets) / len(subsets))
        assert metrics[f"pass@{j}"] == pytest.approx(sum(any_ok) / len(prompts))
        assert metrics[f"all_correct@{j}"] == pytest.approx(sum(all_ok) / len(prompts))
    assert metrics["pass@1"] == pytest.approx(metrics[f"avg@{k}"])
    assert 0.0 < metrics["all_correct@6"] < metrics["all_correct@1"]
    assert metrics["pass@1"] < metrics["pass@6"] < 1.0


def test_evaluate_counts_correct_by_the_runs_positive_threshold() -> None:
    """A reward of 0.7 is correct at the default threshold 0.5 and wrong at 0.8: evaluation
    counts as the sampler does (positive_threshold), not by a fixed 0.5."""
    from trainer.backends.simulated import SimulatedBackend
    from trainer.config import TrainConfig
    from trainer.types import Prompt

    prompts = [Prompt(id=str(i), text=f"{i}+0=", answer=str(i), metadata={"pass_rate": 1.0})
               for i in range(4)]
    backend = SimulatedBackend(TrainConfig(backend="simulated"))

    def partial_credit(response: str, answer: str) -> float:
        return 0.7 if response == answer else 0.0

    at_half = evaluate(backend, prompts, partial_credit, k=4, seed=0)
    strict = evaluate(backend, prompts, partial_credit, k=4, seed=0, positive_threshold=0.8)
    assert at_half["greedy_accuracy"] == 1.0 and at_half["pass@4"] == 1.0
    assert strict["greedy_accuracy"] == 0.0 and strict["pass@4"] == 0.0
    assert strict["avg@4"] == at_half["avg@4"] == pytest.approx(0.7)  # the mean reward itself
