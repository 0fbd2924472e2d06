"""DAPO's overlong reward shaping (issue 21), off by default: the penalty against its formula,
the run's scorer applying it by token count, and a simulated run whose long responses lose
reward."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, TrainConfig
from trainer.loop import make_scorer
from trainer.rewards import overlong_penalty, score_generations
from trainer.types import Generation, Prompt


@pytest.mark.parametrize(("length", "expected"), [
    (0, 0.0), (12, 0.0),            # up to L_max - B = 12 tokens: no penalty
    (13, -0.25 * 0.5),              # 1 of B = 4 tokens into the buffer, factor 0.5
    (14, -0.5 * 0.5), (16, -0.5),   # at L_max: -factor
])
def test_penalty_is_linear_over_the_buffer(length: int, expected: float) -> None:
    assert overlong_penalty(length, 16, 4, 0.5) == pytest.approx(expected)
    assert overlong_penalty(length, 16, 0, 0.5) == 0.0  # B = 0: off


def gen(text: str, n_tokens: int) -> Generation:
    return Generation(prompt_id="p", text=text, prompt_token_ids=[],
                      response_token_ids=list(range(n_tokens)))


def test_the_runs_scorer_shapes_by_token_count_and_only_when_on() -> None:
    prompt = Prompt("p", "1+1=", "2")
    gens = [gen("2", 2), gen("2", 16), gen("3", 14)]
    off = make_scorer(TrainConfig(verifier="exact", max_new_tokens=16))
    on = make_scorer(TrainConfig(verifier="exact", max_new_tokens=16, overlong_buffer_len=4,
                                 overlong_penalty_factor=1.0))
    assert score_generations(off, prompt, gens)[0] == [1.0, 1.0, 0.0]
    assert score_generations(on, prompt, gens)[0] == pytest.approx([1.0, 0.0, -0.5])
    assert on(prompt, ["2"])[0] == [1.0]  # by text alone (no lengths): the verifier's reward
    # A plain function scorer still works with the schedulers' call.
    assert score_generations(lambda p, t: ([0.5] * len(t), [None] * len(t)), prompt, gens)[0] \
        == [0.5] * 3


def test_buffer_longer_than_max_new_tokens_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        TrainConfig(max_new_tokens=8, overlong_buffer_len=9).validate()
    assert err.value.field == "overlong_buffer_len" and "max_new_tokens" in str(err.value)


def test_a_run_with_shaping_records_lower_rewards_for_long_responses(tmp_path) -> None:
    from trainer import train
    from trainer.backends.simulated import SimulatedBackend
    from trainer.recorders import ListRecorder

    prompts = [Prompt(f"p{i}", f"q{i}", str(i), {"pass_rate": 1.0}) for i in range(8)]
    rewards = {}
    for buffer in (0, 16):
        config = TrainConfig(backend="simulated", algorithm="grpo", batch_size=4, total_steps=1,
                             save_every=0, eval_every=0, max_new_tokens=16,
                             overlong_buffer_len=buffer)
        rec = ListRecorder()
        train(config, prompts, SimulatedBackend(config), rec, out_dir=tmp_path / str(buffer))
        rewards[buffer] = [(s.tokens, s.reward) for s in rec.steps[0].samples]
    # Same samples (same seeds); every response right, so shaped reward = 1 - tokens / 16.
    assert [t for t, _ in rewards[0]] == [t for t, _ in rewards[16]]
    assert all(r == 1.0 for _, r in rewards[0])
    assert [r for _, r in rewards[16]] == pytest.approx([1 - t / 16 for t, _ in rewards[16]])
