"""Runs only where CUDA and vllm exist; elsewhere it is skipped with a visible reason."""

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None),
    reason="vllm and CUDA not available",
)


def test_vllm_generates_and_syncs_weights(tiny_model_dir: Path) -> None:
    from trainer.backends.vllm import VLLMBackend
    from trainer.model import load_model_dir
    from trainer.tasks import arithmetic_prompts

    model, tok = load_model_dir(tiny_model_dir, "cuda")
    backend = VLLMBackend(model, tok, max_new_tokens=6)
    prompts = arithmetic_prompts(4, max_digits=2, seed=2)
    out = backend.generate(prompts, [3, 1, 0, 2], seed=0)
    assert [len(g) for g in out] == [3, 1, 0, 2]
    for group in out:
        for g in group:
            assert len(g.logprobs) == len(g.response_token_ids)
    greedy = backend.generate(prompts, [1] * 4, seed=0, greedy=True)
    # Zero the policy, push it, and the engine must follow: its greedy output changes.
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    backend.sync_weights()
    after = backend.generate(prompts, [1] * 4, seed=0, greedy=True)
    assert [g[0].response_token_ids for g in after] != [g[0].response_token_ids for g in greedy]
