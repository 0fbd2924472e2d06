"""The vllm backend's request bookkeeping, on CPU, against a stand-in engine: one request per
sample (n=1) with its own seed, counts honoured, old log-probs from the HF policy, weight pushes
through ``apply_model``. The real engine is exercised by test_vllm_backend.py on CUDA machines."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from trainer.backends.vllm import VLLMBackend
from trainer.model import build_tiny_model
from trainer.policy import response_logprobs
from trainer.tasks import arithmetic_prompts
from trainer.tokenizer import build_tokenizer


@dataclass
class FakeParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    seed: int | None = None
    skip_special_tokens: bool = True


@dataclass
class FakeEngine:
    requests: list[Any] = field(default_factory=list)
    params: list[FakeParams] = field(default_factory=list)
    applied: list[Any] = field(default_factory=list)

    def generate(self, requests, params, use_tqdm=False):
        self.requests.extend(requests)
        self.params.extend(params)
        out = []
        for p in params:
            ids = [5 + p.seed % 7, 2]  # a digit and EOS, depending on the request's seed
            out.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(
                token_ids=ids, text=str(p.seed % 7))]))
        return out

    def apply_model(self, fn):
        self.applied.append(fn)

    def reset_prefix_cache(self):
        pass


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> VLLMBackend:
    fake = types.ModuleType("vllm")
    fake.SamplingParams = FakeParams
    fake.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    monkeypatch.setitem(sys.modules, "vllm", fake)
    tok = build_tokenizer()
    b = VLLMBackend.__new__(VLLMBackend)  # skip __init__: it needs CUDA and a real engine
    b.model, b.tokenizer, b.llm = build_tiny_model(tok, seed=2), tok, FakeEngine()
    b.temperature, b.top_p, b.max_new_tokens = 0.9, 0.95, 6
    b.record_logprobs, b.logprob_batch_size, b.pad_id = True, 4, tok.pad_token_id
    return b


def test_one_request_per_sample_with_distinct_seeds(backend: VLLMBackend) -> None:
    prompts = arithmetic_prompts(3, seed=1)
    out = backend.generate(prompts, [3, 0, 2], seed=7)
    assert [len(g) for g in out] == [3, 0, 2]
    params = backend.llm.params
    assert len(params) == 5 and all(p.n == 1 for p in params)
    assert len({p.seed for p in params}) == 5
    assert all((p.temperature, p.top_p, p.max_tokens) == (0.9, 0.95, 6) for p in params)
    assert [r["prompt_token_ids"] for r in backend.llm.requests] == \
        [backend.tokenizer(prompts[i].text)["input_ids"] for i in (0, 0, 0, 2, 2)]
    # Same seed, same requests: reproducible.
    again = backend.generate(prompts, [3, 0, 2], seed=7)
    assert [[g.response_token_ids for g in x] for x in again] == \
        [[g.response_token_ids for g in x] for x in out]


def test_old_logprobs_come_from_the_policy(backend: VLLMBackend) -> None:
    prompts = arithmetic_prompts(2, seed=3)
    gens = [g for group in backend.generate(prompts, [3, 3], seed=0) for g in group]
    with torch.no_grad():
        lp, _, _ = response_logprobs(backend.model, [g.prompt_token_ids for g in gens],
                                     [g.response_token_ids for g in gens], backend.pad_id, 0.9)
    for i, g in enumerate(gens):
        assert torch.allclose(torch.tensor(g.logprobs), lp[i, :2], atol=1e-5)


def test_greedy_and_sync_weights(backend: VLLMBackend) -> None:
    backend.generate(arithmetic_prompts(1, seed=4), [1], seed=0, greedy=True)
    assert backend.llm.params[0].temperature == 0.0

    loaded: dict[str, torch.Tensor] = {}

    class EngineModel:
        def load_weights(self, weights):
            loaded.update(dict(weights))

    backend.sync_weights()
    (fn,) = backend.llm.applied
    fn(EngineModel())
    state = backend.model.state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
