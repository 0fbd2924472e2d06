"""Synchronous (max_policy_lag 0) against asynchronous training (k = 1) with the engine thread
generating while the update trains, on the tiny model (hf backend), in one process: wall time
per step and each side's idle share, measured as interleaved repetitions (sync at
``--threads`` and at 1 thread, async with the engine thread, and the async schedule run
serially, one after the other per repetition) so that the machine's load falls on all of them
alike.

    python benchmarks/async_overlap.py [--model DIR] [--algorithms grpo,ada-balance]
        [--prompts builtin:arithmetic,builtin:arithmetic-long] [--pairs 3] [--steps 3]
        [--batch-size 8] [--threads 2] [--backend hf|vllm] [--split]

``--split`` measures the same in separate processes: ``world_size`` 2 with ``rollout_ranks`` 1
(a train rank, an FSDP2 shard over a group of one and the optimiser, and a rollout rank, a vLLM
CPU engine, each a Ray actor on a bundle of one CPU with one torch thread), synchronously
("split sync k=0") and with ``max_policy_lag`` 1 and ``tis_cap`` 2 ("split async k=1": the
driver's engine thread calls the rollout rank while its main thread calls the train rank;
"split async k=1 serial", on request, runs that schedule one call after the other). The
ranks run at the driver's niceness (``RAY_worker_niceness`` 0 unless set: Ray's default
starts them 15 above it, which on a shared machine leaves them the cores' leftovers).
One private Ray and one group of ranks serve every run (``RankGroup`` reuse: a run may change
what ``Rank.BUILT_WITH`` does not list; each run starts from the model's weights); their start
is timed and printed apart, never in a step. The pair's order alternates per repetition (sync
first, then async first) so that a drift of the machine's load falls on both alike.

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
# ``--split``: name -> (max_policy_lag, engine_thread), on one train rank and one rollout rank.
# The serial run (not in the default set) trains the asynchronous schedule without the
# overlap: what the schedule alone changes (Seq-balance's ticks draw larger batches).
SPLIT_MODES = {"split sync k=0": (0, True), "split async k=1": (1, True),
               "split async k=1 serial": (1, False)}
SPLIT_DEFAULT = ("split sync k=0", "split async k=1")
# The split ranks' vLLM engine: fp32 (the policy's dtype, as the tests run it) and a small KV
# cache (the tiny model needs about 2 KiB a token).
SPLIT_ENGINE = {"rollout_dtype": "float32", "vllm_kv_cache_gib": 0.25}


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
    return {"algorithm": algorithm, "prompts": prompts_name, "mode": mode, "wall": wall,
            "steps": step_rows(rec)}


def step_rows(rec: Any) -> list[dict[str, float]]:
    """Each measured step's figures (the warm-up step left out). Split runs add each rank's
    own seconds (``RankRecord``): the rollout rank's generation and engine load, the train
    rank's update and weight gather (its send included)."""
    rows = []
    for s in rec.steps[1:]:
        m = s.metrics
        step = m["time_step"]
        row = {"time_step": step, "time_generation": m["time_generation"],
               "time_update": m["time_update"], "time_sync": m["time_sync"],
               "time_overlap": m.get("time_overlap", 0.0),
               "engine_idle": 1 - (m["time_generation"] + m["time_sync"]) / step,
               "trainer_idle": 1 - (m["time_update"] + m["time_sync"]) / step,
               "samples": m["samples"], "policy_lag_mean": m.get("policy_lag_mean", 0.0)}
        if "time_engine_idle_share" in m:  # asynchronous: the recorded shares (same formula)
            row["engine_idle"] = m["time_engine_idle_share"]
            row["trainer_idle"] = m["time_trainer_idle_share"]
        for r in s.ranks or ():
            if r.role == "rollout":
                row["rank_generation"] = r.generation_s
                row["rank_engine_load"] = r.engine_load_s
            elif r.role == "train":
                row["rank_update"] = r.update_s
                row["rank_weight_gather"] = r.weight_gather_s
        rows.append(row)
    return rows


def split_config(args: argparse.Namespace, algorithm: str, prompts_name: str, k: int) -> Any:
    from trainer.config import TrainConfig

    extra: dict[str, Any] = {"tis_cap": 2.0} if k else {}
    return TrainConfig(model=args.model, backend="vllm", device="cpu", world_size=2,
                       rollout_ranks=1, algorithm=algorithm, prompts=prompts_name,
                       batch_size=args.batch_size, total_steps=args.steps + 1, lr=2e-4,
                       save_every=0, eval_every=0, seed=args.seed, max_policy_lag=k,
                       task_num_prompts=256, **SPLIT_ENGINE, **extra).validate()


def rank_threads(actor: Any) -> dict[str, Any]:
    """Run inside a rank's actor (``__ray_call__``): its torch thread count as set in
    ``RankActor.start`` (the bundle's CPUs), the ``OMP_NUM_THREADS`` Ray set in its process, the
    cores it may run on and its niceness (Ray starts workers 15 above the raylet's unless
    ``RAY_worker_niceness`` says otherwise: on a shared machine that decides their share)."""
    import os

    import torch

    return {"torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
            "cores_allowed": len(os.sched_getaffinity(0)), "nice": os.nice(0)}


def start_split_ranks(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """One private Ray (2 CPUs) and the two split ranks, for every run; what their start cost
    and how many threads each rank runs."""
    import os

    import ray

    from trainer.distributed.launcher import RankGroup

    # The ranks at the driver's niceness (Ray starts workers 15 above it by default): on a
    # shared machine the driver and its ranks then get the same share of the cores.
    os.environ.setdefault("RAY_worker_niceness", "0")
    first = [p for p in args.prompts.split(",") if p][0]
    algorithm = [a for a in args.algorithms.split(",") if a][0]
    t0 = time.perf_counter()
    group = RankGroup(split_config(args, algorithm, first, 0))
    start = {"start_s": time.perf_counter() - t0, **group.seconds, "roles": group.roles,
             "threads": ray.get([a.__ray_call__.remote(rank_threads) for a in group.actors])}
    return group, start


def run_split(args: argparse.Namespace, group: Any, algorithm: str, prompts_name: str,
              mode: str) -> dict[str, Any]:
    from trainer.data import resolve_prompts
    from trainer.distributed.backend import DistributedBackend
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    k, threaded = SPLIT_MODES[mode]
    config = split_config(args, algorithm, prompts_name, k)
    prompts, _ = resolve_prompts(config)
    rec = ListRecorder()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        # The group outlives the run (``train`` never closes its backend; main stops the
        # group); the run's prepare puts the ranks back on the model's weights and pushes them.
        train(config, prompts, DistributedBackend(config, group=group), rec, out_dir=out,
              engine_thread=threaded)
    wall = time.perf_counter() - t0
    return {"algorithm": algorithm, "prompts": prompts_name, "mode": mode, "wall": wall,
            "steps": step_rows(rec)}


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
    ap.add_argument("--modes", help=f"default: {','.join(MODES)}; with --split: "
                    f"{','.join(SPLIT_DEFAULT)} (or 'split async k=1 serial')")
    ap.add_argument("--split", action="store_true",
                    help="the engine and the update in separate processes: one rollout rank "
                    "and one train rank on a private Ray (vllm backend; --threads unused: "
                    "each rank has one CPU and one torch thread)")
    ap.add_argument("--json", type=Path, help="write every run's per-step figures here")
    args = ap.parse_args()
    known = SPLIT_MODES if args.split else MODES
    modes = [m for m in (args.modes or ",".join(SPLIT_DEFAULT if args.split else MODES))
             .split(",") if m]
    if unknown := [m for m in modes if m not in known]:
        ap.error(f"unknown modes {unknown}; known: {list(known)}")
    runs: list[dict[str, Any]] = []
    group, start = start_split_ranks(args) if args.split else (None, None)
    if start is not None:
        print(f"split ranks started in {start['start_s']:.1f} s (not in any step): "
              f"{start}", file=sys.stderr)
    try:
        for prompts_name in [p for p in args.prompts.split(",") if p]:
            for algorithm in [a for a in args.algorithms.split(",") if a]:
                for rep in range(args.pairs):
                    # Interleaved: one of each per repetition (split: the order alternating).
                    order = modes[::-1] if args.split and rep % 2 else modes
                    for mode in order:
                        r = (run_split(args, group, algorithm, prompts_name, mode) if args.split
                             else run_once(args, algorithm, prompts_name, mode))
                        r["rep"] = rep
                        runs.append(r)
                        print(f"{prompts_name} {algorithm} {mode} rep {rep}: "
                              f"{mean(r['steps'], 'time_step'):.3f} s/step", file=sys.stderr)
    finally:
        if group is not None:
            group.stop()
    if args.json:
        args.json.write_text(json.dumps({"start": start, "runs": runs} if args.split else runs,
                                        indent=1))
    if args.split:
        threads = ", ".join(f"{role} rank {t['torch_threads']} torch thread(s), OMP_NUM_THREADS "
                            f"{t['omp_num_threads']}, nice {t['nice']}"
                            for role, t in zip(start["roles"], start["threads"], strict=True))
        print(f"split: one train rank + one rollout rank (vllm fp32 engine), a bundle of 1 CPU "
              f"each ({threads}), B = "
              f"{args.batch_size}, {args.steps} steps after a warm-up, median over "
              f"{args.pairs} interleaved repetitions of the per-run step means; the ranks' "
              f"start ({start['start_s']:.1f} s) in no step\n")
    else:
        print(f"backend {args.backend}, B = {args.batch_size}, {args.threads} torch threads, "
              f"{args.steps} steps after a warm-up, median over {args.pairs} interleaved "
              f"repetitions of the per-run step means\n")
    print("| prompts | algorithm | mode | s / step | vs sync | engine idle | trainer idle | "
          "both busy (s / step) | generation (s) | update (s) | weight transfer (s) | "
          "kept lag |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
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
                  f"{med('time_update'):.3f} | {med('time_sync'):.4f} | "
                  f"{med('policy_lag_mean'):.2f} |")
    if args.split:  # each rank's own seconds (RankRecord), medians as above
        print("\n| prompts | algorithm | mode | rollout rank: generation (s) | engine load (s) "
              "| train rank: update (s) | weight gather + send (s) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for prompts_name, algorithm in keys:
            for mode in modes:
                rs = [r for r in runs if (r["prompts"], r["algorithm"], r["mode"])
                      == (prompts_name, algorithm, mode)]
                cells = [statistics.median(mean(r["steps"], key) for r in rs) for key in
                         ("rank_generation", "rank_engine_load", "rank_update",
                          "rank_weight_gather")]
                print(f"| {prompts_name} | {algorithm} | {mode} | "
                      + " | ".join(f"{c:.3f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
