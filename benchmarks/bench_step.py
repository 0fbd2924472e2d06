"""One training step's time split (generation / scoring / update) for grpo, ada-pos,
ada-balance, ada-est and GRPO with n=8 (Est's default budget), measured in one run on the
built-in tiny model, with each ratio to grpo.

    python benchmarks/bench_step.py [--model builtin:tiny] [--steps 4] [--batch-size 32]
        [--only grpo,grpo-n8,ada-pos,ada-balance,ada-est]

Each algorithm starts from the same warm-started weights and runs ``--steps`` steps after one
warm-up step (not counted); the table shows per-step means. Run ``python -m trainer warmstart``
first when ``builtin:tiny`` is not warm-started yet. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLUMNS = ("time_generation", "time_scoring", "time_update", "time_step", "samples", "tokens")
# Row name -> (algorithm, config overrides). GRPO n=8 spends Est's default budget per prompt.
VARIANTS = {"grpo": ("grpo", {}), "grpo-n8": ("grpo", {"group_size": 8}),
            "ada-pos": ("ada-pos", {}), "ada-balance": ("ada-balance", {}),
            "ada-est": ("ada-est", {})}


def measure(variant: str, args: argparse.Namespace) -> dict[str, float]:
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    algorithm, overrides = VARIANTS[variant]
    config = TrainConfig(algorithm=algorithm, model=args.model, backend="hf", device="cpu",
                         batch_size=args.batch_size, total_steps=args.steps + 1, lr=2e-4,
                         save_every=0, eval_every=0, seed=args.seed, **overrides).validate()
    prompts, _ = resolve_prompts(config)
    backend = make_backend(config, prompts)
    rec = ListRecorder()
    with tempfile.TemporaryDirectory() as out:
        train(config, prompts, backend, rec, out_dir=out)
    steps = rec.steps[1:]
    return {c: sum(s.metrics[c] for s in steps) / len(steps) for c in COLUMNS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=",".join(VARIANTS),
                    help="comma-separated rows (default all; grpo comes first as the base)")
    args = ap.parse_args()
    names = [a.strip() for a in args.only.split(",") if a.strip()]
    for a in names:
        if a not in VARIANTS:
            ap.error(f"unknown row {a!r}; choose from {', '.join(VARIANTS)}")
    base_row = next(iter(VARIANTS))  # the first row (GRPO) is the base of the ratios
    results = {a: measure(a, args) for a in [base_row, *[a for a in names if a != base_row]]}
    base = results[base_row]
    print(f"| algorithm (B={args.batch_size}, n=4, M=8, N=4; Est: 8 per prompt) | samples/step "
          "| tokens/step | generation s | scoring s | update s | step s | step / grpo "
          "| samples / grpo |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for a, r in results.items():
        print(f"| {a} | {r['samples']:.0f} | {r['tokens']:.0f} | {r['time_generation']:.3f} | "
              f"{r['time_scoring']:.4f} | {r['time_update']:.3f} | {r['time_step']:.3f} | "
              f"{r['time_step'] / base['time_step']:.2f}x | "
              f"{r['samples'] / base['samples']:.2f}x |")


if __name__ == "__main__":
    main()
