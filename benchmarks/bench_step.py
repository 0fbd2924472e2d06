"""One training step's time split (generation / scoring / update) for grpo, ada-pos and
ada-balance, measured in one run on the built-in tiny model, with each ratio to grpo.

    python benchmarks/bench_step.py [--model builtin:tiny] [--steps 4] [--batch-size 32]

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


def measure(algorithm: str, args: argparse.Namespace) -> dict[str, float]:
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    config = TrainConfig(algorithm=algorithm, model=args.model, backend="hf", device="cpu",
                         batch_size=args.batch_size, total_steps=args.steps + 1, lr=2e-4,
                         save_every=0, eval_every=0, seed=args.seed).validate()
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
    args = ap.parse_args()
    results = {a: measure(a, args) for a in ("grpo", "ada-pos", "ada-balance")}
    base = results["grpo"]
    print(f"| algorithm (B={args.batch_size}, n=4, M=8, N=4) | samples/step | generation s "
          "| scoring s | update s | step s | step / grpo | samples / grpo |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for a, r in results.items():
        print(f"| {a} | {r['samples']:.0f} | {r['time_generation']:.3f} | "
              f"{r['time_scoring']:.4f} | {r['time_update']:.3f} | {r['time_step']:.3f} | "
              f"{r['time_step'] / base['time_step']:.2f}x | "
              f"{r['samples'] / base['samples']:.2f}x |")


if __name__ == "__main__":
    main()
