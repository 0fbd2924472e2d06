"""The simulator's response-length and engine-time models (their monotonic properties) and the
``simulate-time`` CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.cli import main
from trainer.enginetime import PAPER_MAX_RESPONSE_TOKENS, EngineTimeModel, EventEngine, LengthModel
from trainer.steptime import ratio_to_grpo, simulate_step_time, study


def test_wrong_answers_run_longer_and_lengths_stay_within_the_limit() -> None:
    m = LengthModel()
    assert m.max_tokens == PAPER_MAX_RESPONSE_TOKENS
    z = np.random.default_rng(0).standard_normal(20_000)
    right = m.lengths(np.ones(len(z), bool), 0.0, z)
    wrong = m.lengths(np.zeros(len(z), bool), 0.0, z)
    assert (wrong >= right).all() and np.median(wrong) > 1.8 * np.median(right)
    assert right.min() >= 1 and wrong.max() == m.max_tokens  # long wrong answers are truncated
    assert np.median(right) == pytest.approx(0.3 * m.max_tokens, rel=0.02)
    # A harder prompt (larger z_prompt) gets longer answers of both kinds.
    assert (m.lengths(np.ones(3, bool), 1.0, z[:3]) >= m.lengths(np.ones(3, bool), 0.0, z[:3])
            ).all()
    flat = LengthModel(max_tokens=100, spread=0.0)
    assert flat.lengths(np.array([True, False]), 2.0, np.array([3.0, -3.0])).tolist() == [30, 60]


def test_decode_step_time_grows_with_batch_and_context_and_batching_pays() -> None:
    t = EngineTimeModel()
    assert t.decode_seconds(2, 1000) > t.decode_seconds(1, 1000)
    assert t.decode_seconds(8, 9000) > t.decode_seconds(8, 1000)
    # Tokens per second rise with the batch: the fixed part of a step is shared.
    rates = [b / t.decode_seconds(b, b * 1000) for b in (1, 16, 256, 1024)]
    assert rates == sorted(rates)
    # k steps at once equal k single steps with the context growing by the batch each step.
    assert t.decode_seconds(4, 100, steps=5) == pytest.approx(
        sum(t.decode_seconds(4, 100 + 4 * s) for s in range(5)))


def test_event_engine_waits_for_the_slowest_and_queues_beyond_max_num_seqs() -> None:
    model = EngineTimeModel(prefill_token_s=0.0)
    one = EventEngine(model)
    one.submit("a", 100, "p")
    one.run_to_completion()
    batch = EventEngine(model)
    for j, n in enumerate([100, 10, 50]):
        batch.submit(j, n, "p")
    finished = []
    while batch.pending():
        finished += batch.step()
    assert finished == [1, 2, 0]  # shortest first
    assert batch.clock > one.clock  # a fuller batch makes every step slower...
    assert batch.clock < 3 * one.clock  # ...but runs the three at once
    serial = EventEngine(EngineTimeModel(prefill_token_s=0.0, max_num_seqs=1))
    for j, n in enumerate([100, 10, 50]):
        serial.submit(j, n, "p")
    serial.run_to_completion()
    assert serial.clock > batch.clock
    # Abort returns the tokens generated so far and drops queued requests too.
    e = EventEngine(EngineTimeModel(max_num_seqs=2))
    for j, n in enumerate([5, 20, 20]):
        e.submit(j, n, "p")
    assert e.step() == [0]
    assert e.abort([1, 2]) == 5 and e.pending() == 0


def test_per_prompt_shortens_the_step_and_streaming_draws_fewer_samples() -> None:
    rates = np.random.default_rng(1).beta(0.5, 0.5, 48).tolist()
    kw = dict(max_tokens=512, steps=1, engine=EngineTimeModel(max_num_seqs=64))
    r = {s: simulate_step_time("ada-balance", s, rates, **kw)
         for s in ("round", "per-prompt", "streaming")}
    assert r["per-prompt"].samples == r["round"].samples
    assert r["per-prompt"].tokens_generated == r["round"].tokens_generated
    assert r["per-prompt"].generation_s < r["round"].generation_s
    assert r["round"].tokens_discarded == r["per-prompt"].tokens_discarded == 0
    assert r["streaming"].samples < r["round"].samples
    assert r["streaming"].kept_response_length < r["round"].kept_response_length


def test_adaptive_sampling_costs_more_than_grpo() -> None:
    rates = np.random.default_rng(2).beta(0.5, 0.5, 32).tolist()
    results = study(rates, schedulers=("round",), progress=False, max_tokens=256, steps=1)
    ratios = ratio_to_grpo(results)
    assert ratios[("grpo", "round")] == 1.0
    assert 1.0 < ratios[("ada-pos", "round")] < ratios[("ada-balance", "round")]


def test_simulate_time_cli_table_and_json(capsys) -> None:
    args = ["simulate-time", "--batch-size", "16", "--max-tokens", "64", "--steps", "1",
            "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| algorithm | scheduler |" in out and "step / GRPO round" in out
    for a in ("grpo", "ada-pos", "ada-balance"):
        for s in ("round", "per-prompt", "streaming"):
            assert f"| {a} | {s} |" in out
    assert main([*args, "--json", "--engine", "max_num_seqs=8", "--length", "wrong=0.9",
                 "--algorithms", "ada-pos"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["max_num_seqs"] == 8 and data["lengths"]["wrong"] == 0.9
    pairs = {(r["algorithm"], r["scheduler"]) for r in data["results"]}
    assert ("grpo", "round") in pairs and ("ada-pos", "streaming") in pairs  # baseline added
    assert all(r["step_s"] > 0 for r in data["results"])


@pytest.mark.parametrize(("extra", "message"), [
    (["--beta", "x"], "error: beta: expected A,B"),
    (["--beta", "0,1"], "error: beta: A and B must be > 0"),
    (["--engine", "warp=3"], "error: engine: unknown constant 'warp'"),
    (["--engine", "max_num_seqs=0.5"], "error: engine: max_num_seqs must be a whole number"),
    (["--length", "wrong=2"], "error: length: wrong must be within (0, 1]"),
    (["--schedulers", "async"], "error: schedulers: unknown 'async'"),
    (["--samples-per-round", "2"], "error: samples-per-round: must be >= group_size"),
])
def test_simulate_time_cli_names_bad_input(capsys, extra: list[str], message: str) -> None:
    assert main(["simulate-time", "--batch-size", "8", "--steps", "1", *extra]) == 2
    assert message in capsys.readouterr().err
