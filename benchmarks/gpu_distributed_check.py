"""The FSDP2 update of ``trainer.distributed.rank.Rank`` on CUDA with NCCL, under ``torchrun``:
run by ``benchmarks/gpu_distributed_check.sh`` on a GPU machine with torch and transformers (no
Ray, no vLLM, no network needed: the rank is built with ``engine=False``).

The policy is a randomly initialised Qwen2 of about 0.5B parameters (Qwen2.5-0.5B's shape,
built from a config: nothing is downloaded), trained in bf16 mixed precision (fp32 master
weights and gradient reduction: ``shard_policy`` on CUDA) with activation checkpointing. Each
rank reports, and rank 0 writes one JSON row with the slowest rank's figures:

- trained tokens/s of ``Rank.update`` (prompt + response tokens of the whole kept batch, over
  the timed updates' wall time, after one warm-up update);
- peak GPU memory of the rank (``torch.cuda.max_memory_allocated``, the largest over ranks);
- the bucketed full gather of every parameter (``Rank.sync_weights`` without an engine: each
  ``full_tensor()`` a collective, ``fsdp_bucket_mb`` at a time), seconds.

    python benchmarks/gpu_distributed_check.py --make-model DIR      # once, before torchrun
    torchrun --standalone --nproc_per_node=2 benchmarks/gpu_distributed_check.py \\
        --model DIR --out row.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Qwen2.5-0.5B's shape (about 494M parameters with tied embeddings).
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                 num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 max_position_embeddings=4096, tie_word_embeddings=True)


def make_model(path: Path, layers: int) -> int:
    """A random Qwen2 (0.5B's shape, ``layers`` decoder layers) with the built-in character
    tokenizer saved beside it: a model directory ``Rank`` loads like any other. Returns the
    parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.tokenizer import build_tokenizer

    torch.manual_seed(0)
    cfg = Qwen2Config(**{**QWEN2_05B, "num_hidden_layers": layers}, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0)
    model = Qwen2ForCausalLM(cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    build_tokenizer().save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def kept_batch(responses: int, prompt_len: int, response_len: int, vocab: int, seed: int):
    """``responses`` random kept responses, two per prompt, advantages of both signs; response
    lengths spread over [response_len / 2, response_len] so the ranks' parts differ in tokens."""
    import torch

    from trainer.update import UpdateBatch

    gen = torch.Generator().manual_seed(seed)
    batch = UpdateBatch([], [], [], [], [], [])
    for i in range(responses):
        n = int(torch.randint(response_len // 2, response_len + 1, (1,), generator=gen))
        batch.prompt_ids.append(torch.randint(3, vocab, (prompt_len,), generator=gen).tolist())
        batch.response_ids.append(torch.randint(3, vocab, (n,), generator=gen).tolist())
        batch.advantages.append(1.0 if i % 2 else -1.0)
        batch.groups.append(i // 2)
        batch.old_logprobs.append(None)
        batch.rollout_logprobs.append(None)
    return batch


def run(args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist

    from trainer.config import TrainConfig
    from trainer.distributed.rank import Rank

    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = args.device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()
    prompts = args.responses // 2
    config = TrainConfig(model=str(args.model), backend="vllm", device=args.device,
                         world_size=world, batch_size=prompts,
                         ppo_mini_batch_size=max(1, prompts // args.mini_batches),
                         ppo_micro_batch_size=args.micro_batch, lr=1e-6, entropy_coef=0.0,
                         activation_checkpointing=True, vllm_sleep_mode=False,
                         fsdp_bucket_mb=args.bucket_mb)
    t0 = time.perf_counter()
    rank = Rank(config.to_dict(), engine=False)
    build_s = time.perf_counter() - t0
    batch = kept_batch(args.responses, args.prompt_len, args.response_len, QWEN2_05B["vocab_size"],
                       seed=0)
    tokens = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids,
                                                 strict=True))
    rank.update(batch, seed=0)                 # warm-up: NCCL communicators, kernels
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    update_s, finite = [], True
    for step in range(1, args.updates + 1):
        dist.barrier()
        t0 = time.perf_counter()
        metrics = rank.update(batch, seed=step)
        sync()
        update_s.append(time.perf_counter() - t0)
        finite &= all(math.isfinite(v) for v in metrics.values())
    gather_s = []
    for _ in range(args.gathers):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        rank.sync_weights()
        sync()
        gather_s.append(time.perf_counter() - t0)
    # On CPU (a smoke test of this script) the process's peak resident memory instead.
    peak = (torch.cuda.max_memory_allocated() if cuda else
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**30
    # The slowest rank's figures: the step waits for it.
    worst = torch.tensor([max(update_s), min(gather_s), peak, build_s], device=rank.device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    ok = torch.tensor([1.0 if finite else 0.0], device=rank.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    # A sharded parameter (DTensor) counts its full size.
    params = sum(p.numel() for p in rank.model.parameters())
    row = {"ranks": world, "gpu": torch.cuda.get_device_name(rank.device) if cuda else "cpu",
           "params": params, "tokens_per_update": tokens,
           "update_s": float(worst[0]), "tokens_per_s": tokens / float(worst[0]),
           "full_gather_s": float(worst[1]), "bucket_mb": args.bucket_mb,
           "peak_gib": float(worst[2]), "rank_build_s": float(worst[3]),
           "grad_norm": float(metrics["grad_norm"]), "finite": bool(ok.item())}
    rank.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-model", type=Path, metavar="DIR",
                    help="write the random 0.5B-shaped model directory and exit")
    ap.add_argument("--model", type=Path, help="the model directory --make-model wrote")
    ap.add_argument("--layers", type=int, default=QWEN2_05B["num_hidden_layers"])
    ap.add_argument("--responses", type=int, default=64, help="kept responses per update")
    ap.add_argument("--prompt-len", type=int, default=256, help="prompt tokens")
    ap.add_argument("--response-len", type=int, default=1024,
                    help="longest response in tokens (the shortest is half)")
    ap.add_argument("--mini-batches", type=int, default=4, help="optimiser steps per update")
    ap.add_argument("--micro-batch", type=int, default=4, help="responses per forward/backward")
    ap.add_argument("--bucket-mb", type=int, default=64, help="full-gather bucket, MiB")
    ap.add_argument("--updates", type=int, default=3, help="timed updates after one warm-up")
    ap.add_argument("--gathers", type=int, default=3, help="timed full gathers (the best)")
    ap.add_argument("--out", type=Path, help="rank 0 writes its JSON row here")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cuda (NCCL); cpu (gloo) only to smoke-test this script with small "
                    "sizes")
    args = ap.parse_args()
    if args.make_model is not None:
        n = make_model(args.make_model, args.layers)
        print(f"gpu_distributed_check: {n / 1e6:.0f}M parameters in {args.make_model}",
              file=sys.stderr)
        return
    if args.model is None:
        ap.error("--model DIR (write it first with --make-model DIR)")
    row = run(args)
    if int(os.environ.get("RANK", "0")) == 0:
        text = json.dumps(row)
        if args.out:
            args.out.write_text(text)
        print(text)


if __name__ == "__main__":
    main()
