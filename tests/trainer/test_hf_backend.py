import logging

import pytest
import torch

from trainer.backends import make_backend
from trainer.backends.hf import HFBackend
from trainer.config import TrainConfig
from trainer.model import build_tiny_model
from trainer.policy import response_logprobs
from trainer.tasks import arithmetic_prompts
from trainer.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    tok = build_tokenizer()
    return HFBackend(build_tiny_model(tok, seed=3), tok, temperature=1.0, max_new_tokens=6)


# Prompts of different lengths, so batches really are left-padded.
PROMPTS = arithmetic_prompts(6, min_digits=1, max_digits=3, seed=11)


def _ids(groups) -> list[list[list[int]]]:
    return [[g.response_token_ids for g in group] for group in groups]


def test_counts_are_honoured(backend: HFBackend) -> None:
    counts = [3, 0, 1, 2, 5, 1]
    out = backend.generate(PROMPTS, counts, seed=0)
    assert [len(group) for group in out] == counts
    for prompt, group in zip(PROMPTS, out, strict=True):
        for g in group:
            assert g.prompt_id == prompt.id
            assert g.prompt_token_ids == backend.tokenizer(prompt.text)["input_ids"]
            assert 1 <= len(g.response_token_ids) <= 6
            assert len(g.logprobs) == len(g.response_token_ids)
            assert g.text == backend.tokenizer.decode(g.response_token_ids,
                                                      skip_special_tokens=True)


def test_greedy_batched_equals_unbatched(backend: HFBackend) -> None:
    batched = backend.generate(PROMPTS, [1] * len(PROMPTS), seed=0, greedy=True)
    for prompt, group in zip(PROMPTS, batched, strict=True):
        (alone,) = backend.generate([prompt], [1], seed=5, greedy=True)
        assert alone[0].response_token_ids == group[0].response_token_ids


def test_sampling_is_seeded(backend: HFBackend) -> None:
    torch.manual_seed(0)
    a = backend.generate(PROMPTS, [4] * 6, seed=42)
    after_a = torch.rand(1)
    torch.manual_seed(0)
    b = backend.generate(PROMPTS, [4] * 6, seed=42)
    assert _ids(a) == _ids(b)
    # The caller's global RNG stream is not consumed by sampling.
    assert torch.equal(torch.rand(1), after_a)
    assert _ids(backend.generate(PROMPTS, [4] * 6, seed=43)) != _ids(a)


@pytest.mark.parametrize("source", ["logits", "forward"])
def test_old_logprobs_match_recomputation(backend: HFBackend, source: str) -> None:
    backend.temperature, backend.top_p, backend.logprobs_from = 0.8, 0.9, source
    try:
        out = backend.generate(PROMPTS, [2] * 6, seed=1)
    finally:
        backend.temperature, backend.top_p, backend.logprobs_from = 1.0, 1.0, "auto"
    gens = [g for group in out for g in group]
    with torch.no_grad():
        lp, _, mask = response_logprobs(backend.model, [g.prompt_token_ids for g in gens],
                                        [g.response_token_ids for g in gens],
                                        backend.pad_id, temperature=0.8)
    for i, g in enumerate(gens):
        n = int(mask[i].sum())
        assert torch.allclose(torch.tensor(g.logprobs), lp[i, :n], atol=1e-4)


def test_both_logprob_sources_give_the_same_samples(backend: HFBackend) -> None:
    backend.logprobs_from = "forward"
    try:
        forward = backend.generate(PROMPTS, [3] * 6, seed=4)
    finally:
        backend.logprobs_from = "auto"
    assert backend._logprobs_from_logits(18)  # the tiny vocabulary takes the logits path
    via_logits = backend.generate(PROMPTS, [3] * 6, seed=4)
    assert _ids(forward) == _ids(via_logits)
    for a, b in zip(forward, via_logits, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)


def test_model_generation_defaults_do_not_leak_into_sampling() -> None:
    # A model dir's generation_config (e.g. repetition_penalty) must not change what is sampled
    # away from softmax(logits / T), or the recorded old log-probs would describe another policy.
    tok = build_tokenizer()
    plain = HFBackend(build_tiny_model(tok, seed=3), tok, max_new_tokens=6)
    model = build_tiny_model(tok, seed=3)
    model.generation_config.repetition_penalty = 5.0
    model.generation_config.top_k = 2
    model.generation_config.min_new_tokens = 6
    tweaked = HFBackend(model, tok, max_new_tokens=6)
    assert _ids(plain.generate(PROMPTS, [3] * 6, seed=9)) == \
        _ids(tweaked.generate(PROMPTS, [3] * 6, seed=9))


def test_greedy_generation_logs_no_invalid_flag_warning(backend: HFBackend) -> None:
    # Every evaluation is greedy; the sampling-neutral top_k=0 used to make generate() warn
    # "generation flags are not valid and may be ignored: ['top_k']" in every run's log.
    logging.Logger.warning_once.cache_clear()  # transformers' once-per-process cache
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        backend.generate(PROMPTS, [1] * len(PROMPTS), seed=0, greedy=True)
        backend.generate(PROMPTS, [2] * len(PROMPTS), seed=0)
    finally:
        logger.removeHandler(handler)
    assert not [r for r in records if "not valid" in r.getMessage()]


def test_responses_stop_at_eos(backend: HFBackend) -> None:
    eos = backend.tokenizer.eos_token_id
    for group in backend.generate(PROMPTS, [4] * 6, seed=2):
        for g in group:
            assert eos not in g.response_token_ids[:-1]


def test_make_backend_hf(tiny_model_dir) -> None:
    cfg = TrainConfig(model=str(tiny_model_dir), device="cpu", max_new_tokens=5)
    backend = make_backend(cfg, PROMPTS)
    assert isinstance(backend, HFBackend) and backend.max_new_tokens == 5
    backend.sync_weights()
    (group,) = backend.generate(PROMPTS[:1], [2], seed=0)
    assert len(group) == 2


def test_make_backend_simulated_needs_no_model(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.model import MODEL_DIR_ENV

    # No built-in checkpoint anywhere: the simulated backend must not try to load one.
    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "absent"))
    backend = make_backend(TrainConfig(backend="simulated"), PROMPTS)
    assert backend.model is None and backend.tokenizer is None
    out = backend.generate(PROMPTS, [2] * len(PROMPTS), seed=0)
    assert [len(g) for g in out] == [2] * len(PROMPTS)


def test_chat_prompts_go_through_the_chat_template() -> None:
    from trainer.types import Prompt

    tok = build_tokenizer()
    # A template that keeps user turns and ends with "=" as the generation prompt.
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
                         "{{ m['content'] }}{% endif %}{% endfor %}"
                         "{% if add_generation_prompt %}={% endif %}")
    backend = HFBackend(build_tiny_model(tok), tok, max_new_tokens=3)
    chat = [{"role": "system", "content": "9"}, {"role": "user", "content": "1+2"}]
    prompts = [Prompt("c", "1+2", "3", {"chat": chat}), Prompt("p", "1+2=", "3")]
    (with_chat,), (plain,) = backend.generate(prompts, [1, 1], seed=0)
    assert with_chat.prompt_token_ids == plain.prompt_token_ids == tok("1+2=")["input_ids"]
