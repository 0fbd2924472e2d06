"""LoRA policies (``lora_rank`` > 0, trainer/lora.py) on the tiny model with peft's real layers:
the update trains the adapter alone and lowers the loss, the merged weights are the adapted
policy's, a run through ``trainer.train`` on the hf backend checkpoints the adapter and a merged
model and resumes exactly. The engine's side (vLLM's log-probs of the merged weights) is in
tests/trainer/test_vllm_backend.py, next to the engine it shares."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.trainer.test_e2e_hf import comparable, hf_config, run
from trainer.clustertime import MODELS, ModelShape, rank_memory
from trainer.config import TrainConfig

pytestmark = pytest.mark.slow


def lora_policy(model_dir: Path, **kw) -> tuple[torch.nn.Module, object]:
    from trainer.lora import apply_lora
    from trainer.model import load_model_dir

    model, tokenizer = load_model_dir(model_dir, "cpu")
    config = TrainConfig(lora_rank=4, lora_alpha=8.0, **kw)
    return apply_lora(model, config), tokenizer


def seq_logprobs(model, prompt_ids, responses) -> torch.Tensor:
    from trainer.policy import response_logprobs

    with torch.no_grad():
        lp, _, mask = response_logprobs(model, prompt_ids, responses, 0, 1.0)
    return (lp * mask).sum(-1)


def test_update_trains_the_adapter_alone_and_lowers_the_loss(tiny_model_dir: Path) -> None:
    """Three updates on one batch: the policy-gradient loss -sum_i A_i log pi(y_i) falls, only
    A and B move (W and the embeddings are bit-for-bit what they were), and the merged weights
    in a plain model give the adapted policy's log-probs."""
    from transformers import AutoModelForCausalLM

    from trainer.lora import merged_state_dict
    from trainer.update import UpdateBatch, make_optimizer, update_policy

    model, tokenizer = lora_policy(tiny_model_dir)
    frozen = {k: v.clone() for k, v in model.state_dict().items() if ".lora_" not in k}
    prompts = [list(tokenizer(t)["input_ids"]) for t in ("12+7=", "12+7=", "3+40=", "3+40=")]
    responses = [list(tokenizer(t)["input_ids"])[1:] for t in ("19", "91", "43", "34")]
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    batch = UpdateBatch(prompts, responses, advantages.tolist(), [0, 0, 1, 1], [None] * 4)
    config = TrainConfig(lr=2e-2, weight_decay=0.0, entropy_coef=0.0, lora_rank=4)
    optimizer, scheduler = make_optimizer(model, config)
    trained = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for n, p in model.named_parameters() if ".lora_" in n}
    # The simulator's count of adapter parameters (trainer.clustertime) is peft's.
    c = model.config
    shape = ModelShape("tiny", c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                       c.num_key_value_heads, c.intermediate_size, c.vocab_size,
                       c.tie_word_embeddings)
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) \
        == shape.lora_params(4)

    def loss() -> float:
        return float(-(advantages * seq_logprobs(model, prompts, responses)).sum())

    before = loss()
    for _ in range(3):
        update_policy(model, optimizer, scheduler, batch, config, pad_token_id=0)
    assert loss() < before - 0.1, (before, loss())
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())

    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    plain.load_state_dict(merged_state_dict(model))
    gap = (seq_logprobs(plain, prompts, responses) - seq_logprobs(model, prompts, responses))
    assert float(gap.abs().max()) < 1e-4


def test_adapter_depends_on_the_seed_alone(tiny_model_dir: Path) -> None:
    """A is drawn from the run's seed in a forked generator: equal seeds give equal adapters,
    another seed another one, and the caller's torch stream is untouched."""
    from trainer.lora import apply_lora
    from trainer.model import load_model_dir

    def adapter(seed: int) -> list[torch.Tensor]:
        model, _ = load_model_dir(tiny_model_dir, "cpu")
        torch.manual_seed(123)
        lora = apply_lora(model, TrainConfig(lora_rank=4, seed=seed))
        assert torch.equal(torch.rand(3), expected)
        return [p.detach() for n, p in lora.named_parameters() if ".lora_A" in n]

    torch.manual_seed(123)
    expected = torch.rand(3)
    a, b, c = adapter(5), adapter(5), adapter(6)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not any(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_unknown_target_module_names_the_field(tiny_model_dir: Path) -> None:
    from trainer.validation import ConfigError

    with pytest.raises(ConfigError) as err:
        lora_policy(tiny_model_dir, lora_target_modules="no_such_proj")
    assert err.value.field == "lora_target_modules"


def test_lora_run_checkpoints_adapter_and_merged_model_and_resumes_exactly(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two LoRA steps on the hf backend with the KL to the reference (the adapter switched off)
    in the loss; a run resumed from step 1's checkpoint draws step 2 exactly as the
    uninterrupted one. The checkpoint holds the adapter, which peft loads onto the base
    model, and a merged model, which transformers loads alone: both give the policy's
    log-probs."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = hf_config(tiny_model_dir, total_steps=2, save_every=1, lora_rank=4,
                       lora_alpha=8.0, lr=1e-2, kl_coef=0.05, warmup_steps=0)
    full, result = run(config, tmp_path / "full")
    assert result.status == "completed"
    assert all(s.metrics["grad_norm"] > 0 for s in full.steps)
    assert full.steps[1].metrics["kl"] > 0  # the adapter moved the policy off the reference

    # A new process resuming from step 1's checkpoint (a fresh policy from the config's model,
    # the adapter loaded into it) draws step 2 exactly.
    cut = tmp_path / "cut" / "checkpoints" / "step-000001"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step-000001", cut)
    resumed, result = run(config, tmp_path / "cut", resume_from=cut)
    assert result.status == "completed" and [s.step for s in resumed.steps] == [2]
    assert comparable(resumed.steps[0]) == comparable(full.steps[1])

    ckpt = tmp_path / "full" / "checkpoints" / "step-000002"
    assert (ckpt / "adapter_model.safetensors").is_file()
    assert (ckpt / "adapter_config.json").is_file()
    assert not (ckpt / "model.safetensors").exists() and not (ckpt / "reference").exists()
    merged = AutoModelForCausalLM.from_pretrained(ckpt / "merged", local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, ckpt)
    prompts, responses = [[1, 5, 6], [1, 7]], [[8, 9, 2], [5]]
    merged_lp = seq_logprobs(merged, prompts, responses)
    assert float((merged_lp - seq_logprobs(adapted, prompts, responses)).abs().max()) < 1e-4
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert float((merged_lp - seq_logprobs(fresh, prompts, responses)).abs().max()) > 1e-3


def test_lora_rank_zero_is_full_fine_tuning(tiny_model_dir: Path) -> None:
    from trainer.backends import make_backend
    from trainer.lora import is_lora

    config = hf_config(tiny_model_dir)
    assert config.lora_rank == 0 and not is_lora(make_backend(config).model)
    assert is_lora(make_backend(hf_config(tiny_model_dir, lora_rank=2)).model)


def test_simulator_fits_a_7b_lora_on_one_gpu() -> None:
    """``simulate-time --lora-rank``: the frozen base keeps 4 bytes a parameter, the adapter 16;
    a 7B's full fine-tuning state overflows one 80 GB GPU, its LoRA state leaves the engine room
    for a KV cache; on 8 GPUs LoRA leaves more room than full fine-tuning."""
    seven = MODELS["7b"]
    full, lora = rank_memory(seven, 1), rank_memory(seven, 1, lora_rank=32)
    assert lora.shard == pytest.approx((4 * seven.params + 16 * seven.lora_params(32)) / 2**30)
    assert full.shard > 79.6 > lora.training
    assert full.sequences_fit(79.6) == 0 < lora.sequences_fit(79.6)
    assert rank_memory(seven, 8).sequences_fit(79.6) \
        < rank_memory(seven, 8, lora_rank=32).sequences_fit(79.6)
    assert rank_memory(seven, 8, lora_rank=0) == rank_memory(seven, 8)
