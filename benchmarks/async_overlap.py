"""Synchronous (max_policy_lag 0) against asynchronous training (k = 1) with the engine thread
generating while the update trains, on the tiny model (hf backend), in one process: wall time
per step and each side's idle share, measured as interleaved repetitions (sync at
``--threads`` and at 1 thread, async with the engine thread, and the async schedule run
serially, one after the other per repetition) so that the machine's load falls on all of them
alike.

    python benchmarks/async_overlap.py [--model DIR] [--algorithms grpo,ada-balance]
        [--prompts builtin:arithmetic,builtin:arithmetic-long] [--pairs 3] [--steps 3]
        [--batch-size 8] [--threads 2] [--backend hf|vllm]

Each run trains ``--steps`` steps after one warm-up step (not counted) from the same weights.
Idle shares: the engine's is the share of the step's wall time it neither generated nor took
weights, 1 - (time_generation + time_sync) / time_step, the trainer's 1 - (time_update +
time_sync) / time_step: for the asynchronous runs these are the recorded
``time_engine_idle_share`` / ``time_trainer_idle_share``, for the synchronous run the same
formula over its metrics. Prints a markdown table (medians over the pairs) and, with
``--json``, every run's per-step figures. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name -> (max_policy_lag, engine_thread, torch threads: None for --threads). The synchronous
# run at 1 thread separates what the overlap buys from what one thread per side does on a
# loaded machine (asynchronously each side runs at half the threads while they overlap).
MODES = {"sync k=0": (0, True, None), "sync k=0 1 thread": (0, True, 1),
         "async k=1 engine thread": (1, True, None), "async k=1 serial": (1, False, None)}


def run_once(args: argparse.Namespace, algorithm: str, prompts_name: str, mode: str
             ) -> dict[str, Any]:
    import torch

    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.model import configure_threads
    from trainer.recorders import ListRecorder

    k, threaded, threads = MODES[mode]
    extra: dict[str, Any] = {"tis_cap": 2.0} if k else {}
    if args.backend == "vllm":
        extra |= {"vllm_kv_cache_gib": 0.25, "rollout_dtype": "float32"}
    config = TrainConfig(model=args.model, backend=args.backend, device="cpu",
                         algorithm=algorithm, prompts=prompts_name, batch_size=args.batch_size,
                         total_steps=args.steps + 1, lr=2e-4, save_every=0, eval_every=0,
                         seed=args.seed, max_policy_lag=k, task_num_prompts=256,
                         **extra).validate()
    prompts, _ = resolve_prompts(config)
    # Explicitly: loading a model otherwise sets as many threads as the machine has cores.
    configure_threads(threads or args.threads)
    backend = make_backend(config, prompts)
    assert torch.get_num_threads() == (threads or args.threads)
    rec = ListRecorder()
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as out:
            train(config, prompts, backend, rec, out_dir=out, engine_thread=threaded)
    finally:
        backend.close()
    wall = time.perf_counter() - t0
    steps = rec.steps[1:]
    rows = []
    for s in steps:
        m = s.metrics
        step = m["time_step"]
        rows.append({"time_step": step, "time_generation": m["time_generation"],
                     "time_update": m["time_update"], "time_sync": m["time_sync"],
                     "time_overlap": m.get("time_overlap", 0.0),
                     "engine_idle": 1 - (m["time_generation"] + m["time_sync"]) / step,
                     "trainer_idle": 1 - (m["time_update"] + m["time_sync"]) / step,
                     "samples": m["samples"], "policy_lag_mean": m.get("policy_lag_mean", 0.0)})
    return {"algorithm": algorithm, "prompts": prompts_name, "mode": mode, "wall": wall,
            "steps": rows}


def mean(rows: list[dict[str, float]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--backend", default="hf", choices=("hf", "vllm"))
    ap.add_argument("--algorithms", default="grpo,ada-balance")
    ap.add_argument("--prompts", default="builtin:arithmetic,builtin:arithmetic-long")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", type=Path, help="write every run's per-step figures here")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    runs: list[dict[str, Any]] = []
    for prompts_name in [p for p in args.prompts.split(",") if p]:
        for algorithm in [a for a in args.algorithms.split(",") if a]:
            for rep in range(args.pairs):
                for mode in modes:  # interleaved: one of each per repetition
                    r = run_once(args, algorithm, prompts_name, mode)
                    r["rep"] = rep
                    runs.append(r)
                    print(f"{prompts_name} {algorithm} {mode} rep {rep}: "
                          f"{mean(r['steps'], 'time_step'):.3f} s/step", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    print(f"backend {args.backend}, B = {args.batch_size}, {args.threads} torch threads, "
          f"{args.steps} steps after a warm-up, median over {args.pairs} interleaved repetitions "
          f"of the per-run step means\n")
    print("| prompts | algorithm | mode | s / step | vs sync | engine idle | trainer idle | "
          "both busy (s / step) | generation (s) | update (s) | weight transfer (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    keys = sorted({(r["prompts"], r["algorithm"]) for r in runs}, key=lambda x: (
        args.prompts.split(",").index(x[0]), args.algorithms.split(",").index(x[1])))
    for prompts_name, algorithm in keys:
        base = None
        for mode in modes:
            rs = [r for r in runs if (r["prompts"], r["algorithm"], r["mode"])
                  == (prompts_name, algorithm, mode)]

            def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
                return statistics.median(mean(r["steps"], key) for r in rs)

            step = med("time_step")
            base = step if base is None else base
            print(f"| {prompts_name} | {algorithm} | {mode} | {step:.3f} | {step / base:.2f} | "
                  f"{med('engine_idle'):.0%} | {med('trainer_idle'):.0%} | "
                  f"{med('time_overlap'):.3f} | {med('time_generation'):.3f} | "
                  f"{med('time_update'):.3f} | {med('time_sync'):.4f} |")


if __name__ == "__main__":
    main()
