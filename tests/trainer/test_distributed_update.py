"""The FSDP2 update of ``trainer.distributed.rank`` on two real gloo ranks (two processes on this
CPU, rendezvous through ``env://``) equals the single-process update on the same kept batch:
unequal tokens per rank, two mini-batches, grad-norm clipping engaged, the algorithm's
per-sample loss weights, and the per-prompt statistics an algorithm's ``after_update`` reads;
then a second step with a KL in the loss and in the reward against the ranks' sharded frozen
reference; then, on the same two processes, a LoRA policy's step, merged weights, sharded
checkpoint and export against the one-process LoRA policy's.
No Ray, no engine: the ranks are the plain class a GPU check runs under torchrun."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

from trainer.config import TrainConfig
from trainer.distributed.rank import token_balanced
from trainer.types import PROMPT_STATS
from trainer.update import UpdateBatch

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kept_batch(tokenizer: Any) -> UpdateBatch:
    """Four prompts of two responses each, lengths 1 to 9 tokens (the ranks' parts differ in
    tokens), advantages of both signs, loss weights of the algorithm's, the per-prompt
    statistics asked for."""
    from trainer.model import encode_prompt
    from trainer.tasks import arithmetic_prompts

    prompts = arithmetic_prompts(4, max_digits=2, seed=5)
    gen = torch.Generator().manual_seed(0)
    lengths = [9, 1, 2, 7, 3, 3, 8, 1]
    ub = UpdateBatch([], [], [], [], [], [], weights=[1.0, 0.5, 2.0, 1.0, 1.0, 1.5, 0.25, 1.0],
                     prompt_stats=True, num_prompts=4)
    for k, n in enumerate(lengths):
        ub.prompt_ids.append(encode_prompt(tokenizer, prompts[k // 2]))
        ub.response_ids.append(torch.randint(3, 12, (n,), generator=gen).tolist())
        ub.advantages.append([0.8, -0.6, 1.1, -0.9, 0.5, -0.4, 0.7, -1.2][k])
        ub.groups.append(k // 2)
        ub.old_logprobs.append(None)
        ub.rollout_logprobs.append(None)
    return ub


def config(model_dir: Path) -> TrainConfig:
    # Two mini-batches of 2 prompts; a clip norm the gradients exceed (checked below through
    # grad_norm). lr 1e-4: AdamW's first steps move every weight by about lr x g / (|g| + eps),
    # which for the weights with gradients near eps turns float noise in the summation order
    # into differences of ~7% of lr (measured: 7e-5 at lr 1e-3, 1.4e-6 at 1e-4).
    return TrainConfig(model=str(model_dir), backend="vllm", world_size=2, device="cpu",
                       batch_size=4, ppo_mini_batch_size=2, lr=1e-4, max_grad_norm=0.05,
                       entropy_coef=1e-3)


# A second step on the same ranks with every kind of KL (issue 34 item 6): k3 with k2's gradient
# in the loss against the ranks' sharded frozen reference, and k2 in the reward.
KL = {"kl_coef": 0.05, "kl_loss_type": "k3+", "use_kl_in_reward": True, "kl_penalty": "k2"}


def _rank_main(rank: int, cfg: dict, port: int, batch: UpdateBatch, out: str) -> None:
    torch.set_num_threads(1)
    from trainer.distributed.rank import Rank, _gather_packed, full_weights

    r = Rank(cfg, rank=rank, world_size=2, master_addr="127.0.0.1", master_port=port,
             engine=False)
    metrics = r.update(batch, seed=7)
    weights = r.full_state_dict()
    # The packed gather (one collective per bucket) against one full_tensor() per entry:
    # identical bits, with one tensor per bucket and with everything in one.
    one_by_one = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                  for k, v in r.model.state_dict().items()}
    packed_exact = all(torch.equal(one_by_one[k], v) for k, v in weights.items())
    packed_exact &= all(torch.equal(one_by_one[k], v) for k, v in full_weights(r.model, 1))
    # Rows that do not split evenly (5 over 2 ranks; 1 row: rank 1 holds none), mixed dtypes.
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = next(iter(r.model.state_dict().values())).device_mesh
    uneven = [torch.arange(15.0).reshape(5, 3), torch.arange(4.0).reshape(1, 4),
              torch.arange(6, dtype=torch.int64).reshape(3, 2)]
    shards = [distribute_tensor(t, mesh, [Shard(0)]) for t in uneven]
    gathered = [_gather_packed(shards[:2]), _gather_packed(shards[2:])]
    uneven_exact = all(torch.equal(a, b) for a, b in zip(uneven, gathered[0] + gathered[1],
                                                     strict=True))
    # A later run on these ranks is compared as it resolves here (issue 27: "auto" was compared
    # with the "cpu" the ranks were built with): the default device and dtype and the built-in
    # model's name for this directory are what the ranks hold; another max_new_tokens is not.
    from trainer.model import MODEL_DIR_ENV

    os.environ[MODEL_DIR_ENV] = cfg["model"]
    r.begin_run(cfg | {"device": "auto", "rollout_dtype": "auto", "model": "builtin:tiny"},
                initial_weights=False)
    refused = {}
    for change in ({"max_new_tokens": cfg["max_new_tokens"] + 1},
                   {"rollout_dtype": "bfloat16"}):
        try:
            r.begin_run(cfg | change, initial_weights=False)
        except ValueError as exc:
            refused[next(iter(change))] = str(exc)
    # The KL step: the reference is the model directory's weights, the policy has moved.
    r.begin_run(cfg | KL, initial_weights=False)
    reward_kl = r.sequence_kl(batch)
    kl_metrics = r.update(batch, seed=8)
    kl_weights = r.full_state_dict()
    lora = _lora_on_these_ranks(cfg | LORA, rank, batch, out)
    if rank == 0:
        torch.save({"metrics": metrics, "weights": weights, "packed_exact": packed_exact,
                    "uneven_exact": uneven_exact, "refused": refused, "reward_kl": reward_kl,
                    "kl_metrics": kl_metrics, "kl_weights": kl_weights, "lora": lora}, out)
    r.close()


# A LoRA policy on the same two processes (issue 33 item 3): rank 4 on every linear layer.
LORA = {"lora_rank": 4, "lora_alpha": 8.0}


def _lora_on_these_ranks(cfg: dict, rank: int, batch: UpdateBatch, out: str) -> dict:
    """A second Rank in the same process group, its policy with an adapter: one step, its
    merged weights (what ``sync_weights`` feeds the engine), a sharded checkpoint and the HF
    export, then the next step twice: on from the step and again after loading the
    checkpoint."""
    from trainer.distributed.rank import Rank

    r = Rank(cfg, rank=rank, world_size=2, engine=False)
    trainable = sum(p.numel() for p in r.model.parameters() if p.requires_grad)
    shards = {n: tuple(p.to_local().shape) for n, p in r.model.named_parameters()
              if ".lora_A." in n}
    metrics = r.update(batch, seed=7)
    moments = len(r.optimizer.state_dict()["state"])
    merged = dict(r.engine_weights(2**62))
    ckpt = Path(out).with_name("ckpt")
    r.save(ckpt)
    r.export_hf(ckpt)
    second = r.update(batch, seed=8)
    after_second = r.full_state_dict()
    r.load(ckpt)
    again = r.update(batch, seed=8)
    resumed = r.full_state_dict()
    # A new run on these ranks from the model's weights: W and a fresh adapter.
    r.begin_run(cfg, initial_weights=True)
    restarted = r.full_state_dict()
    return {"metrics": metrics, "merged": merged, "trainable": trainable, "shards": shards,
            "moments": moments, "second": second, "again": again,
            "after_second": after_second, "resumed": resumed, "restarted": restarted}


@pytest.fixture(scope="module")
def two_rank_results(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The two ranks' run (``_rank_main``), once for the module's tests."""
    from trainer.model import load_model_dir

    cfg = config(tiny_model_dir)
    batch = kept_batch(load_model_dir(tiny_model_dir, "cpu")[1])
    out = tmp_path_factory.mktemp("ranks") / "rank0.pt"
    mp.start_processes(_rank_main, args=(cfg.to_dict(), free_port(), batch, str(out)),
                       nprocs=2, start_method="spawn")
    return torch.load(out, weights_only=False) | {"dir": out.parent}


def test_two_fsdp_ranks_take_the_single_process_step(two_rank_results: dict,
                                                     tiny_model_dir: Path) -> None:
    from trainer.model import load_model_dir
    from trainer.update import make_optimizer, sequence_kl, update_policy

    cfg = config(tiny_model_dir)
    model, tokenizer = load_model_dir(tiny_model_dir, "cpu")
    batch = kept_batch(tokenizer)
    # Each mini-batch's responses split over the two ranks with unequal token counts: a
    # per-rank token mean would weigh them wrongly.
    lengths = [len(r) for r in batch.response_ids]
    for mb in ([0, 1, 2, 3], [4, 5, 6, 7]):
        parts = token_balanced(mb, lengths, 2)
        sums = [sum(lengths[i] for i in p) for p in parts]
        assert all(parts) and sums[0] != sums[1]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt, sched = make_optimizer(model, cfg)
    expected = update_policy(model, opt, sched, batch, cfg, pad_token_id=tokenizer.pad_token_id,
                             seed=7)
    assert expected["optimizer_steps"] == 2.0
    assert expected["grad_norm"] > cfg.max_grad_norm  # clipping acted
    after_first = {k: v.clone() for k, v in model.state_dict().items()}
    # The KL step in one process: the reference loaded afresh, a fresh optimiser (begin_run's).
    kl_cfg = TrainConfig.from_dict(cfg.to_dict() | KL)
    ref, _ = load_model_dir(tiny_model_dir, "cpu")
    ref.requires_grad_(False)
    expected_reward_kl = sequence_kl(model, ref, batch, "k2", pad_token_id=tokenizer.pad_token_id,
                                     temperature=kl_cfg.temperature)
    opt, sched = make_optimizer(model, kl_cfg)
    expected_kl = update_policy(model, opt, sched, batch, kl_cfg, ref_model=ref,
                                pad_token_id=tokenizer.pad_token_id, seed=8)
    assert expected_kl["kl"] > 1e-6 and (expected_reward_kl[0] > 1e-6).any()

    got = two_rank_results
    n = cfg.max_new_tokens
    assert got["refused"] == {
        "max_new_tokens": f"max_new_tokens: these ranks were built with {n}, the run asks for "
                          f"{n + 1}; start new ranks for it",
        "rollout_dtype": "rollout_dtype: these ranks were built with 'float32', the run asks "
                         "for 'bfloat16'; start new ranks for it"}
    assert got["packed_exact"], "the packed bucket gather differs from full_tensor()"
    assert got["uneven_exact"], "the packed gather mis-rebuilt an unevenly sharded tensor"
    moved = max(float((v - before[k]).abs().max()) for k, v in after_first.items())
    gap = max(float((got["weights"][k] - v).abs().max()) for k, v in after_first.items())
    assert moved > 1e-4  # the step did something
    assert gap < 1e-5, f"sharded step differs by {gap} (the step moved weights by {moved})"
    for key in ("policy_loss", "entropy", "grad_norm", "clip_frac_low", "clip_frac_high",
                "optimizer_steps", "lr"):
        assert got["metrics"][key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
    # Each prompt's statistics, its responses spread over both ranks, summed back whole.
    one, sharded = expected[PROMPT_STATS], got["metrics"][PROMPT_STATS]
    for key in ("loss", "grad_mass", "grad_share", "tokens"):
        assert getattr(sharded, key) == pytest.approx(getattr(one, key), rel=1e-4, abs=1e-7), key
    assert one.tokens.tolist() == [10, 9, 6, 9]  # every prompt, once
    assert (one.grad_mass > 0).all()
    # Each mini-batch's prompts share its gradient: two prompts each, shares summing to 1.
    assert sum(one.grad_share) == pytest.approx(2.0)
    # The KL step: every response's KL in the reward and the update against the sharded
    # reference equal the single process's.
    for one, sharded in zip(expected_reward_kl, got["reward_kl"], strict=True):
        assert sharded == pytest.approx(one, rel=1e-4, abs=1e-7)
    kl_moved = max(float((v - after_first[k]).abs().max()) for k, v in model.state_dict().items())
    kl_gap = max(float((got["kl_weights"][k] - v).abs().max())
                 for k, v in model.state_dict().items())
    assert kl_moved > 1e-4
    assert kl_gap < 1e-5, f"sharded KL step differs by {kl_gap} (it moved weights {kl_moved})"
    for key in ("policy_loss", "kl", "grad_norm", "optimizer_steps"):
        assert got["kl_metrics"][key] == pytest.approx(expected_kl[key], rel=1e-4, abs=1e-6), key



def test_two_ranks_train_a_lora_policy_as_one_process(two_rank_results: dict,
                                                     tiny_model_dir: Path,
                                                     tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    """A LoRA policy on the ranks: each holds its shard of the adapter beside its shard of the
    frozen W, the optimiser holds the adapter alone, the 2-rank step equals the one-process
    LoRA step, the weights for the engine are the merged ones (the engine's log-probs of
    merged weights are the adapted policy's: tests/trainer/test_vllm_backend.py), the sharded
    checkpoint resumes to the same bits and the export is a one-process LoRA checkpoint's
    (the adapter, and the merged model under merged/)."""
    from transformers import AutoModelForCausalLM

    from trainer.lora import MERGED_DIR, apply_lora, load_adapter, merged_state_dict
    from trainer.model import load_model_dir
    from trainer.update import make_optimizer, update_policy

    cfg = TrainConfig.from_dict(config(tiny_model_dir).to_dict() | LORA)
    plain, tokenizer = load_model_dir(tiny_model_dir, "cpu")
    batch = kept_batch(tokenizer)
    model = apply_lora(plain, cfg)
    before = merged_state_dict(model)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    opt, sched = make_optimizer(model, cfg)
    expected = update_policy(model, opt, sched, batch, cfg, pad_token_id=tokenizer.pad_token_id,
                             seed=7)
    want = merged_state_dict(model)

    got = two_rank_results["lora"]
    lora_a = {n: p.shape for n, p in model.named_parameters() if ".lora_A." in n}
    assert got["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    # Rank 0's shard of each A (r = 4 rows): half the rows.
    assert got["shards"] == {n: (2, s[1]) for n, s in lora_a.items()}
    assert got["moments"] == 2 * len(lora_a)  # AdamW state for A and B of every layer alone
    assert set(got["merged"]) == set(want)
    moved = max(float((v - before[k]).abs().max()) for k, v in want.items())
    gap = max(float((got["merged"][k] - v).abs().max()) for k, v in want.items())
    assert moved > 1e-5
    assert gap < 1e-5, f"sharded LoRA step differs by {gap} (the step moved weights by {moved})"
    for key in ("policy_loss", "entropy", "grad_norm", "optimizer_steps"):
        assert got["metrics"][key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
    # Resume: the next step replayed from the checkpoint gives the same bits.
    for key in ("policy_loss", "entropy", "grad_norm", "lr"):
        assert got["again"][key] == got["second"][key], key
    assert all(torch.equal(got["after_second"][k], v) for k, v in got["resumed"].items())
    # The export: the adapter loads into a fresh LoRA policy and gives the step's merged
    # weights; merged/ is a plain model with them.
    ckpt = two_rank_results["dir"] / "ckpt"
    fresh = apply_lora(load_model_dir(tiny_model_dir, "cpu")[0], cfg)
    load_adapter(fresh, ckpt)
    assert all(torch.equal(v, got["merged"][k]) for k, v in merged_state_dict(fresh).items())
    loaded = AutoModelForCausalLM.from_pretrained(ckpt / MERGED_DIR).state_dict()
    assert all(torch.equal(v, got["merged"][k]) for k, v in loaded.items())
    # begin_run(initial_weights=True): the model's W and the adapter a new run starts from.
    assert set(got["restarted"]) == set(initial)
    assert all(torch.equal(v, initial[k]) for k, v in got["restarted"].items())
