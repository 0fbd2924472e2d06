"""Step time of the distributed path against the single-process vllm backend, on the tiny model.

For each algorithm and layout (``single``: one process, the ``vllm`` backend; ``ranks-1`` and
``ranks-2``: ``DistributedBackend`` with 1 or 2 ranks on a private local Ray) it trains a few
steps and prints, as a Markdown table for docs/benchmarks.md:

- start-up to the first step (Ray, placement, actors, engines), seconds;
- mean step time over the steps after the first, and its split: generation, update, weight
  gather + engine load (``time_sync``), and the gather's share of the step;
- peak resident memory per rank (MiB).

Measures, never asserts. Usage (a warm-started tiny model from the tests' cache or
``python -m trainer warmstart``):

    .venv/bin/python benchmarks/bench_distributed.py --model var/test-cache/tiny-<hash> \\
        --algorithms ada-balance grpo --steps 4
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.config import TrainConfig  # noqa: E402
from trainer.recorders import ListRecorder  # noqa: E402


def run(config: TrainConfig, layout: str) -> dict[str, float]:
    from trainer.backends import make_backend
    from trainer.data import resolve_prompts
    from trainer.distributed.backend import DistributedBackend
    from trainer.loop import train

    prompts, _ = resolve_prompts(config)
    t0 = time.perf_counter()
    if layout == "single":
        backend = make_backend(dataclasses.replace(config, world_size=1), prompts)
    else:
        backend = DistributedBackend(dataclasses.replace(config,
                                                         world_size=int(layout.split("-")[1])))
    startup = time.perf_counter() - t0
    rec = ListRecorder()
    try:
        with tempfile.TemporaryDirectory() as out:
            train(config if layout != "single" else dataclasses.replace(config, world_size=1),
                  prompts, backend, rec, out_dir=out)
        if layout == "single":
            memory = [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]
        else:
            memory = [m["rss_mib"] for m in backend.group.peak_memory()]
    finally:
        backend.close()
    steps = [s.metrics for s in rec.steps[1:]] or [s.metrics for s in rec.steps]

    def mean(key: str) -> float:
        return statistics.mean(m[key] for m in steps)

    return {"startup": startup, "step": mean("time_step"), "generation": mean("time_generation"),
            "update": mean("time_update"), "sync": mean("time_sync"),
            "sync_share": mean("time_sync") / mean("time_step"), "memory": max(memory)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--algorithms", nargs="+", default=["ada-balance"])
    parser.add_argument("--layouts", nargs="+", default=["single", "ranks-1", "ranks-2"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    print("| algorithm | layout | start-up (s) | step (s) | generation (s) | update (s) | "
          "gather + load (s) | gather share | peak RSS per rank (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for algorithm in args.algorithms:
        config = TrainConfig(model=args.model, backend="vllm", device="cpu",
                             rollout_dtype="float32", vllm_kv_cache_gib=0.25,
                             algorithm=algorithm, batch_size=args.batch_size,
                             total_steps=args.steps, lr=2e-4, save_every=0, eval_every=0,
                             max_new_tokens=8, task_max_digits=2).validate()
        for layout in args.layouts:
            r = run(config, layout)
            print(f"| {algorithm} | {layout} | {r['startup']:.1f} | {r['step']:.2f} | "
                  f"{r['generation']:.2f} | {r['update']:.2f} | {r['sync']:.3f} | "
                  f"{r['sync_share']:.1%} | {r['memory']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
