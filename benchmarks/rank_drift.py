"""Where runs of one config on different layouts part: per step, how many samples differ from
the first layout's, the samples each drew, and the largest difference between the policies'
weights after the step.

Every run is ``trainer.train`` on the ``vllm`` backend (fp32 engines on this CPU) with a
checkpoint after every step: ``single`` is the one-process backend (``world_size = 1``),
``ranks-N`` the distributed path (N gloo FSDP2 ranks on a private local Ray, one engine each).
The weights compared are each checkpoint's Hugging Face export (``model.safetensors``).

    .venv/bin/python benchmarks/rank_drift.py --model var/test-cache/tiny-<hash> --steps 20

Measures, never asserts; prints a Markdown table per layout for docs/benchmarks.md.
Deterministic given the seeds, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def train_layout(config: Any, layout: str, out: Path) -> Any:
    from trainer.backends import make_backend
    from trainer.data import resolve_prompts
    from trainer.distributed.backend import DistributedBackend
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    ranks = 1 if layout == "single" else int(layout.split("-")[1])
    run_config = dataclasses.replace(config, world_size=ranks)
    prompts, _ = resolve_prompts(run_config)
    # ranks-1 is the distributed path with one rank (make_backend takes it for world_size > 1).
    backend = (make_backend(run_config, prompts) if layout == "single"
               else DistributedBackend(run_config))
    rec = ListRecorder()
    try:
        train(run_config, prompts, backend, rec, out_dir=out)
    finally:
        backend.close()
    return rec


def samples_of(step: Any) -> dict[tuple, tuple]:
    """A step's samples by (prompt, round, index): what was drawn and what became of it."""
    return {(s.prompt_id, s.round, s.index): (s.response, s.reward, s.kept, s.advantage)
            for s in step.samples}


def differing(a: dict[tuple, tuple], b: dict[tuple, tuple]) -> int:
    """Samples of either step that the other lacks or drew differently."""
    return sum(1 for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def weight_gap(a: Path, b: Path) -> tuple[float, float]:
    """Largest absolute difference between two exports' tensors, and the largest relative to
    the tensor's own largest entry."""
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    absolute = relative = 0.0
    for name, ta in wa.items():
        d = float((ta - wb[name]).abs().max())
        absolute = max(absolute, d)
        relative = max(relative, d / max(float(ta.abs().max()), 1e-30))
    return absolute, relative


def main() -> None:
    from trainer.config import BUILTIN_MODEL_LR, TrainConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--algorithm", default="ada-balance")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=BUILTIN_MODEL_LR,
                        help="the launch form's for the tiny model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rollout-dtype", default="auto", help="the engines' (auto: float32 "
                        "on CPU)")
    parser.add_argument("--layouts", nargs="+", default=["single", "ranks-2"],
                        help="the first is the one the others are compared with")
    parser.add_argument("--save", type=Path, help="pickle every run's step records here")
    args = parser.parse_args()
    config = TrainConfig(model=args.model, backend="vllm", device="cpu", algorithm=args.algorithm,
                         total_steps=args.steps, lr=args.lr, save_every=1, eval_every=0,
                         seed=args.seed, rollout_dtype=args.rollout_dtype,
                         vllm_kv_cache_gib=0.25).validate()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {layout: train_layout(config, layout, Path(tmp) / layout)
                for layout in args.layouts}
        if args.save:
            args.save.write_bytes(pickle.dumps({k: r.steps for k, r in runs.items()}))
        base = args.layouts[0]
        print(f"{args.algorithm}, B={config.batch_size}, lr={args.lr:g}, seed {args.seed}, "
              f"{args.steps} steps, rollout_dtype {args.rollout_dtype}")
        for layout in args.layouts[1:]:
            print(f"\n{layout} against {base}:\n")
            print(f"| step | samples that differ | samples ({base}) | samples ({layout}) | "
                  "max weight difference after the step | relative to the tensor's largest |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: |")
            totals = [0, 0]
            for one, two in zip(runs[base].steps, runs[layout].steps, strict=True):
                name = f"step-{one.step:06d}"
                absolute, relative = weight_gap(Path(tmp) / base / "checkpoints" / name,
                                                Path(tmp) / layout / "checkpoints" / name)
                totals[0] += len(one.samples)
                totals[1] += len(two.samples)
                print(f"| {one.step} | {differing(samples_of(one), samples_of(two)):,} | "
                      f"{len(one.samples):,} | {len(two.samples):,} | {absolute:.2g} | "
                      f"{relative:.2g} |", flush=True)
            print(f"\nsamples over {args.steps} steps: {base} {totals[0]:,}, {layout} "
                  f"{totals[1]:,}")


if __name__ == "__main__":
    main()
