"""A deployment's own rewards (``TrainConfig.rewards``, trainer.reward_registry): registration
by ``RADA_REWARDS`` (verl's ``compute_score`` module, TRL's batched function), the weighted sum
and its components per response, the verifier's guarantees for every component (raises, times
out, NaN, an infinity, no number: 0 and counted, never a number), the config's errors naming
the field, and the shipped examples."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator

import pytest

from trainer import reward_registry
from trainer.config import TrainConfig
from trainer.loop import make_scorer
from trainer.reward_examples.gsm8k import compute_score as gsm8k
from trainer.reward_examples.think_format import format_reward
from trainer.rewards import score_and_shape
from trainer.types import Generation, Prompt

TEST_REWARDS = "tests.rewards_for_tests,odd=tests.rewards_for_tests"


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(reward_registry.REWARDS_ENV, TEST_REWARDS)
    yield
    for name in ("odd", "rewards_for_tests", "short", "unruly"):
        reward_registry.unregister_reward(name)
    reward_registry._LOADED.clear()


def gen(text: str, n_tokens: int = 2) -> Generation:
    return Generation(prompt_id="p", text=text, prompt_token_ids=[],
                      response_token_ids=list(range(n_tokens)))


def test_the_setting_registers_a_verl_module_and_a_modules_own_rewards(registered) -> None:
    found = {r.name: r for r in reward_registry.rewards()}
    # The module's compute_score under the module's name and under the entry's name; the
    # module's register_reward calls as they named them.
    assert set(found) == {"rewards_for_tests", "odd", "short", "unruly"}
    assert (found["odd"].kind, found["short"].kind) == ("verl", "trl")
    assert found["odd"].summary.startswith("Odd answer: 1 when")
    assert reward_registry.reward_names()[0] == "verifier"


def test_components_are_weighted_recorded_and_every_failure_is_a_counted_zero(
        registered) -> None:
    config = TrainConfig(verifier="exact", rewards="verifier:1 odd:0.5 short:0.25, unruly",
                         verifier_timeout_seconds=0.2)
    assert config.errors() == []
    scorer = make_scorer(config)
    prompt = Prompt("p", "q", "15")
    gens = [gen("15", 2), gen("17", 9), gen("20"), gen("31"), gen("32"), gen("33"), gen("sleep 5")]
    rewards, scores, errors = score_and_shape(scorer, prompt, gens)
    assert rewards == scores
    parts = [g.reward_components for g in gens]
    assert parts[0] == {"verifier": 1.0, "odd": 1.0, "short": 1.0, "unruly": 0.25}
    assert parts[1] == {"verifier": 0.0, "odd": 1.0, "short": 0.0, "unruly": 0.25}
    assert rewards[:2] == pytest.approx([1 + 0.5 + 0.25 + 0.25, 0.5 + 0.25])
    assert errors[:2] == [None, None]
    # Raises, NaN, -inf, text, past the time limit: that component None, scored 0, the
    # sample's error naming it; the other components still count.
    for k, why in zip(range(2, 7), ("RuntimeError: no zeros", "returned nan", "returned -inf",
                                    "returned str", "VerifierTimeout"), strict=True):
        assert parts[k]["unruly"] is None and why in errors[k] and "unruly: " in errors[k], k
        assert all(v is None or (isinstance(v, float) and math.isfinite(v))
                   for v in parts[k].values())
        assert rewards[k] == pytest.approx((parts[k]["odd"] or 0) * 0.5
                                           + parts[k]["short"] * 0.25)
    # "sleep 5" is no integer either: odd raised too, and the error names both.
    assert parts[6]["odd"] is None and errors[6].startswith("odd: ValueError")


def test_without_rewards_nothing_changes() -> None:
    prompt, gens = Prompt("p", "q", "15"), [gen("15"), gen("16")]
    assert score_and_shape(make_scorer(TrainConfig(verifier="exact")), prompt, gens) == (
        [1.0, 0.0], [1.0, 0.0], [None, None])
    assert [g.reward_components for g in gens] == [None, None]


@pytest.mark.parametrize(("value", "reason"), [
    ("verifier:1 nope", "unknown reward 'nope'; registered: verifier, "),
    ("odd:x", "the weight 'x' is not a number"), ("odd:nan", "must be within [-1000, 1000]"),
    ("odd odd:2", "'odd' is listed twice"), (":2", "a reward's name comes before ':'")])
def test_a_bad_value_is_an_error_naming_the_field(registered, value: str, reason: str) -> None:
    errors = TrainConfig(rewards=value).errors()
    assert [e.field for e in errors] == ["rewards"] and reason in errors[0].reason


def test_a_toml_list_reads_as_the_same_value(registered, tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('rewards = ["verifier:1", "odd:0.5"]\n')
    assert TrainConfig.from_toml(path).rewards == "verifier:1 odd:0.5"
    path.write_text('rewards = ["verifier:1", 2]\n')
    with pytest.raises(ValueError, match="rewards: expected str"):
        TrainConfig.from_toml(path)


def test_a_setting_that_does_not_import_names_its_entry(monkeypatch) -> None:
    monkeypatch.setenv(reward_registry.REWARDS_ENV, "no_such_module_for_rewards")
    errors = TrainConfig(rewards="verifier").errors()
    assert errors[0].field == "rewards" and "no_such_module_for_rewards" in errors[0].reason


def test_the_examples() -> None:
    assert gsm8k("openai/gsm8k", "6 x 7 = 42\n#### 42", "42", {})["score"] == 1.0
    assert gsm8k("openai/gsm8k", "#### 1,000", "Alice has...\n#### 1000")["score"] == 1.0
    assert gsm8k("openai/gsm8k", "#### 41", "42")["score"] == 0.0
    assert gsm8k("openai/gsm8k", "42", "42")["score"] == 0.0  # no "#### " line
    assert format_reward(["q"] * 3, ["<think>6 x 7</think>\n#### 42", "#### 42",
                                     "<think>.</think>\n#### 42\nand more"]) == [1.0, 0.0, 0.0]
    assert reward_registry.reward_kind(gsm8k) == "verl"
    assert reward_registry.reward_kind(format_reward) == "trl"


def test_a_run_records_each_samples_components(registered, tmp_path) -> None:
    from trainer import train
    from trainer.backends.simulated import SimulatedBackend
    from trainer.recorders import ListRecorder, event

    prompts = [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": 0.5}) for i in range(8)]
    config = TrainConfig(backend="simulated", algorithm="grpo", batch_size=4, total_steps=1,
                         save_every=0, eval_every=0, rewards="verifier odd:2")
    rec = ListRecorder()
    train(config, prompts, SimulatedBackend(config), rec, out_dir=tmp_path)
    samples = rec.steps[0].samples
    for s in samples:
        odd = float(int(s.response) % 2 == 1)
        assert s.reward_components == {"verifier": float(s.response == s.prompt_id[1:]),
                                       "odd": odd}
        assert s.reward == s.reward_components["verifier"] + 2 * odd
    # The JSONL line carries them; without rewards the key is left out.
    assert "reward_components" in event("step", rec.steps[0])["samples"][0]


def test_the_web_process_lists_rewards_without_torch() -> None:
    code = ("import os, sys; os.environ['RADA_REWARDS'] = 'trainer.reward_examples.gsm8k,"
            "format=trainer.reward_examples.think_format:format_reward'; "
            "from trainer.reward_registry import rewards; "
            "print(sorted(r.name for r in rewards())); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[:2] == ["['format', 'gsm8k']", "False"]


def test_the_cli_lists_the_registered_rewards(registered, capsys, monkeypatch) -> None:
    from trainer.cli import main

    assert main(["rewards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("verifier (the config's verifier)")
    assert any(line.startswith("odd (verl, RADA_REWARDS: odd=tests.rewards_for_tests): Odd "
                               "answer: 1 when") for line in lines)
    assert any(line.startswith("short (trl, ") for line in lines)
    monkeypatch.setenv(reward_registry.REWARDS_ENV, "no_such_module_for_rewards")
    assert main(["rewards"]) == 2
    assert "no_such_module_for_rewards" in capsys.readouterr().err
