"""Reliability on CUDA (issue 10), for the lent GPU machine (torch and transformers, no vLLM, no
network, no PostgreSQL): measures and prints; asserts nothing.

1. Cancel inside the policy update: a randomly initialised Qwen2 on the GPU, 64 epochs of
   one-prompt mini-batches (thousands of optimiser steps); ``should_stop`` turns true after
   ``--after`` seconds and the update raises ``StopRequested`` at the next mini-batch. Prints how
   long after the request the update returned, and one mini-batch's time.
2. A run process that dies on the GPU: the parent (which never initialises CUDA, as a worker)
   starts a child that initialises CUDA and SIGKILLs itself, sees the signal, then starts a
   child that trains on the GPU and exits 0: the GPU is usable after a killed CUDA process.

    PYTHONPATH=. python3 benchmarks/gpu_reliability_check.py [--after 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD_KILL = ("import os, signal, torch; x = torch.ones(1024, 1024, device='cuda') @ "
              "torch.ones(1024, 1024, device='cuda'); torch.cuda.synchronize(); "
              "os.kill(os.getpid(), signal.SIGKILL)")
CHILD_TRAIN = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
               "from benchmarks.gpu_reliability_check import update_until; "
               "print(update_until(None, epochs=2))")


def model_and_batch(device: str):  # type: ignore[no-untyped-def]
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.update import UpdateBatch

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=768,
                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=0)
    model = Qwen2ForCausalLM(cfg).to(device).eval()
    g = torch.Generator().manual_seed(1)
    prompts, responses, adv, groups = [], [], [], []
    for p in range(32):
        prompt = torch.randint(3, 512, (16,), generator=g).tolist()
        for k in range(4):
            prompts.append(prompt)
            responses.append(torch.randint(3, 512, (48,), generator=g).tolist())
            adv.append(1.0 if k % 2 else -1.0)
            groups.append(p)
    return model, UpdateBatch(prompts, responses, adv, groups, [None] * len(adv))


def update_until(after: float | None, epochs: int = 64) -> dict[str, float]:
    from trainer.config import TrainConfig
    from trainer.types import StopRequested
    from trainer.update import make_optimizer, update_policy

    model, batch = model_and_batch("cuda")
    config = TrainConfig(lr=1e-4, batch_size=32, ppo_mini_batch_size=1, ppo_epochs=epochs)
    opt, sched = make_optimizer(model, config)
    start = time.perf_counter()
    polls: list[float] = []
    asked: list[float] = []

    def should_stop() -> bool:
        now = time.perf_counter()
        polls.append(now)
        if after is not None and now - start > after:
            if not asked:
                asked.append(now)
            return True
        return False

    try:
        update_policy(model, opt, sched, batch, config, pad_token_id=0, should_stop=should_stop)
        stopped = False
    except StopRequested:
        stopped = True
    end = time.perf_counter()
    gaps = [b - a for a, b in zip(polls, polls[1:], strict=False)]
    return {"stopped": float(stopped), "mini_batches": float(len(polls) - stopped),
            "seconds": end - start,
            "mini_batch_ms": 1000 * sorted(gaps)[len(gaps) // 2] if gaps else 0.0,
            "return_after_stop_ms": 1000 * (end - asked[0]) if asked else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--after", type=float, default=2.0)
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    r = update_until(args.after)
    print(f"1. cancel in the update: stopped={bool(r['stopped'])} after "
          f"{r['mini_batches']:.0f} mini-batches ({r['seconds']:.2f} s); one mini-batch "
          f"{r['mini_batch_ms']:.1f} ms (median); returned {r['return_after_stop_ms']:.2f} ms "
          "after the stop request")
    kill = subprocess.run([sys.executable, "-c", CHILD_KILL], capture_output=True, text=True)
    train = subprocess.run([sys.executable, "-c", CHILD_TRAIN], capture_output=True, text=True,
                           cwd=ROOT)
    print(f"2. child that initialised CUDA and SIGKILLed itself: returncode {kill.returncode}; "
          f"next child training on the GPU: returncode {train.returncode} "
          f"({train.stdout.strip()[-200:] or train.stderr.strip()[-300:]})")
    print(f"   parent initialised CUDA: {torch.cuda.is_initialized()} (after test 1: expected "
          "True here; a worker never does)")


if __name__ == "__main__":
    main()
