"""The simulated backend and the simulate CLI's stable JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainer.backends.simulated import SimulatedBackend, wrong_answer
from trainer.cli import main, simulate
from trainer.config import TrainConfig
from trainer.types import Prompt


def test_backend_draws_bernoulli_answers_seeded_per_prompt() -> None:
    backend = SimulatedBackend(TrainConfig(simulated_pass_rate=0.25))
    assert backend.model is None and backend.tokenizer is None
    ps = [Prompt("a", "a", "12", {"pass_rate": 1.0}), Prompt("b", "b", "7", {"pass_rate": 0.0}),
          Prompt("c", "c", "x")]
    out = backend.generate(ps, [3, 2, 400], seed=5)
    assert [g.text for g in out[0]] == ["12"] * 3
    assert [g.text for g in out[1]] == ["8"] * 2
    hits = sum(g.text == "x" for g in out[2])
    assert 60 < hits < 140  # ~ 0.25 * 400
    g = out[0][0]
    assert g.prompt_token_ids == [] and g.logprobs is None
    # Placeholder token ids, as many as the length model says (at most max_new_tokens).
    assert 1 <= len(g.response_token_ids) <= TrainConfig().max_new_tokens
    # Same seed, same draws for a prompt whatever else is in the batch.
    again = backend.generate([ps[2]], [400], seed=5)[0]
    assert [x.text for x in again] == [x.text for x in out[2]]
    assert [x.text for x in backend.generate([ps[2]], [400], seed=6)[0]] != [x.text for x in again]
    assert wrong_answer("abc") != "abc"


def test_simulate_shape_and_invariants() -> None:
    rates = [0.9, 0.1, 0.0, 1.0, 0.5]
    out = simulate("ada-balance", rates, group_size=4, samples_per_round=8, max_rounds=4, seed=0)
    assert set(out) == {"total_samples", "prompts"}
    assert out["total_samples"] == sum(p["samples"] for p in out["prompts"])
    keys = {"index", "pass_rate", "samples", "positives", "negatives", "rounds", "resolved",
            "missing", "kept_positives", "kept_negatives", "advantages"}
    for i, p in enumerate(out["prompts"]):
        assert set(p) == keys and p["index"] == i and p["pass_rate"] == rates[i]
        assert p["samples"] == p["positives"] + p["negatives"] == 8 * p["rounds"]
        assert len(p["advantages"]) == p["kept_positives"] + p["kept_negatives"] == 4
        # positives first: their advantages are >= every negative's
        pos, neg = p["advantages"][:p["kept_positives"]], p["advantages"][p["kept_positives"]:]
        assert all(a >= b for a in pos for b in neg)
    never, always = out["prompts"][2], out["prompts"][3]
    assert never["rounds"] == 4 and not never["resolved"] and never["advantages"] == [0.0] * 4
    assert always["rounds"] == 4 and not always["resolved"]
    assert (never["missing"], always["missing"]) == ("positives", "negatives")
    assert all(p["missing"] is None for p in out["prompts"] if p["resolved"])
    assert simulate("ada-balance", rates, seed=0) == out  # seeded


def test_simulate_grpo_is_one_round_of_n() -> None:
    out = simulate("grpo", [0.5] * 3, group_size=4, samples_per_round=8, max_rounds=4)
    assert out["total_samples"] == 12
    assert all(p["rounds"] == 1 and p["resolved"] and p["samples"] == 4 for p in out["prompts"])


def test_simulate_cli_prints_one_json_object(tmp_path, capsys) -> None:
    rates = tmp_path / "rates.txt"
    rates.write_text("0.2\n0.7\n")
    assert main(["simulate", "--algorithm", "ada-pos", "--pass-rates", str(rates),
                 "--group-size", "4", "--samples-per-round", "8", "--max-rounds", "4",
                 "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["index"] for p in out["prompts"]] == [0, 1]
    assert out == simulate("ada-pos", [0.2, 0.7], seed=3)


@pytest.mark.parametrize("content, message", [
    ("0.5\nabc\n", "pass-rates: line 2"),
    ("1.5\n", "outside [0, 1]"),
])
def test_simulate_cli_rejects_bad_pass_rates(tmp_path, capsys, content, message) -> None:
    rates = tmp_path / "rates.txt"
    rates.write_text(content)
    assert main(["simulate", "--algorithm", "grpo", "--pass-rates", str(rates)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: pass-rates:") and message in err


def test_simulate_cli_rejects_bad_sizes(tmp_path, capsys) -> None:
    rates = tmp_path / "rates.txt"
    rates.write_text("0.5\n")
    assert main(["simulate", "--algorithm", "ada-balance", "--pass-rates", str(rates),
                 "--group-size", "8", "--samples-per-round", "4"]) == 2
    assert capsys.readouterr().err.startswith("error: samples-per-round:")


def test_simulate_cli_refuses_a_policy_lag_naming_where_it_runs(tmp_path, capsys) -> None:
    rates = tmp_path / "rates.txt"
    rates.write_text("0.5\n0.25\n")
    assert main(["simulate", "--algorithm", "grpo", "--pass-rates", str(rates),
                 "--set", "max_policy_lag=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: max_policy_lag:") and "simulate-time" in err


def test_python_dash_m_simulate(tmp_path) -> None:
    rates = tmp_path / "rates.txt"
    rates.write_text("0.5\n")
    proc = subprocess.run([sys.executable, "-m", "trainer", "simulate", "--algorithm",
                           "ada-balance", "--pass-rates", str(rates)], capture_output=True,
                          text=True, check=True)
    assert json.loads(proc.stdout)["prompts"][0]["index"] == 0


def test_simulate_est_multi_step_estimator_converges_to_fixed_pass_rates() -> None:
    rates = [0.05, 0.2, 0.5, 0.9]
    out = simulate("ada-est", rates, steps=40, seed=0,
                   overrides={"budget_per_prompt": 8, "est_max_samples": 32})
    assert set(out) == {"total_samples", "steps"} and len(out["steps"]) == 40
    assert out["total_samples"] == 40 * 4 * 8
    first, last = out["steps"][0], out["steps"][-1]
    assert [p["p_hat"] for p in first["prompts"]] == [1 / 17] * 4  # the prior
    assert [p["allocated"] for p in first["prompts"]] == [8] * 4
    for s in out["steps"]:
        assert s["total_samples"] == sum(p["allocated"] for p in s["prompts"]) == 32
        for p in s["prompts"]:
            assert p["samples"] == p["allocated"] and p["rounds"] == 1 and p["resolved"]
            assert len(p["advantages"]) == p["samples"]  # all kept
    p_hat = [p["p_hat"] for p in last["prompts"]]
    assert p_hat == sorted(p_hat)  # ordered as the true pass rates
    # In steady state the decayed counts hold N/(1 - lambda) samples, N p/(1 - lambda) of them
    # positive, next to the prior's 1 + 16: an easy prompt, which gets few samples, stays
    # pulled towards the prior mean 1/17.
    for i, rate in enumerate(rates):
        n = sum(s["prompts"][i]["allocated"] for s in out["steps"][-20:]) / 20 / (1 - 0.9)
        assert p_hat[i] == pytest.approx((n * rate + 1) / (n + 17), abs=0.1)
    assert p_hat[3] < 0.8
    alloc = [p["allocated"] for p in last["prompts"]]
    assert alloc == sorted(alloc, reverse=True) and alloc[0] > 8 > alloc[3]


def test_simulate_one_step_keeps_the_v1_shape_and_seq_counts_apply() -> None:
    one = simulate("ada-pos", [0.5, 0.5], steps=1, overrides={"K_pos": 3})
    assert set(one) == {"total_samples", "prompts"}
    assert all(p["positives"] >= 3 or not p["resolved"] for p in one["prompts"])
    assert "p_hat" not in one["prompts"][0]


def test_simulate_cli_steps_and_set(tmp_path, capsys) -> None:
    rates = tmp_path / "rates.txt"
    rates.write_text("0.1\n0.8\n")
    assert main(["simulate", "--algorithm", "ada-est", "--pass-rates", str(rates), "--steps",
                 "3", "--set", "budget_per_prompt=4", "--set", "est_weight=inv"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == simulate("ada-est", [0.1, 0.8], steps=3,
                           overrides={"budget_per_prompt": 4, "est_weight": "inv"})
    assert [s["total_samples"] for s in out["steps"]] == [8, 8, 8]
    assert main(["simulate", "--algorithm", "ada-est", "--pass-rates", str(rates), "--set",
                 "est_lambda=2"]) == 2
    assert capsys.readouterr().err.startswith("error: est_lambda:")
    assert main(["simulate", "--algorithm", "ada-est", "--pass-rates", str(rates), "--steps",
                 "0"]) == 2
    assert capsys.readouterr().err.startswith("error: steps:")
    assert main(["simulate", "--algorithm", "grpo", "--pass-rates", str(rates), "--set",
                 "nonsense"]) == 2
    assert capsys.readouterr().err.startswith("error: set:")
