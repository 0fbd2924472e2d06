"""LoRA against full fine-tuning on the tiny model (issue 33): the update's time and memory per
step, held-out accuracy after the same steps over several seeds, and the step-time simulator's
per-rank memory for the paper's 1.5B and 7B.

    python benchmarks/lora_vs_full.py --model DIR [--steps 20] [--seeds 0,1,2] [--lora-rank 8]
        [--lora-alpha 16] [--full-lr 2e-4] [--lora-lr 2e-3]

Each (variant, seed) runs in a fresh process (``--one``): GRPO on the hf backend, B = 8, n = 4,
``--steps`` steps, greedy accuracy on 100 held-out prompts before the first step and after the
last (``eval_every = steps``). Per step after the first: the update's CPU seconds (one torch
thread, ``time.thread_time`` around the learner's update: the work, whatever else loads the
machine) and its wall seconds (``time_update``, as the run records it); the two variants of a
seed run at once, so that a loaded machine slows both alike. Memory: the training state after
the last step, counted from the tensors (the policy's weights, the trained parameters' gradients
and AdamW's moments), and the process's peak resident memory (``ru_maxrss``: the libraries'
hundreds of MiB included, so only its difference says something). LoRA trains at its own
learning rate (adapters start at B = 0 and want a larger one: ``--lora-lr``). Prints Markdown
tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2**20


def one(variant: str, seed: int, args: argparse.Namespace) -> dict[str, float]:
    """One run in this process; the figures as a dict."""
    import time

    import torch

    from trainer.model import configure_threads

    # One thread: the update's compute all runs in this thread, so its CPU seconds
    # (time.thread_time) are the update's work whatever else shares the cores.
    configure_threads(1)
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.learner import make_learner
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    lora = {"lora_rank": args.lora_rank, "lora_alpha": args.lora_alpha, "lr": args.lora_lr} \
        if variant == "lora" else {"lr": args.full_lr}
    config = TrainConfig(algorithm="grpo", model=args.model, backend="hf", device="cpu",
                         batch_size=8, group_size=4, total_steps=args.steps, save_every=0,
                         eval_every=args.steps, eval_num_prompts=100, eval_k=1,
                         max_new_tokens=6, task_max_digits=2, seed=seed, **lora).validate()
    prompts, eval_prompts = resolve_prompts(config)
    backend = make_backend(config, prompts)
    rec = ListRecorder()
    learner = {}

    cpu: list[float] = []

    def keep(config_: TrainConfig, backend_: object) -> object:
        it = learner["it"] = make_learner(config_, backend_)
        update = it.update

        def timed(*a: object, **kw: object) -> object:
            t0 = time.thread_time()
            try:
                return update(*a, **kw)
            finally:
                cpu.append(time.thread_time() - t0)

        it.update = timed
        return it

    import trainer.learner

    real = trainer.learner.make_learner
    trainer.learner.make_learner = keep  # to read the optimiser's state after the run
    try:
        with tempfile.TemporaryDirectory() as out:
            train(config, prompts, backend, rec, out_dir=out, eval_prompts=eval_prompts)
    finally:
        trainer.learner.make_learner = real
    opt = learner["it"].optimizer
    trained = [p for g in opt.param_groups for p in g["params"]]
    weights = sum(p.numel() * p.element_size() for p in backend.model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in trained if p.grad is not None)
    moments = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                  if isinstance(t, torch.Tensor))
    evals = {e.step: e.metrics["greedy_accuracy"] for e in rec.of_type("eval")}
    return {"update_s": statistics.mean(s.metrics["time_update"] for s in rec.steps[1:]),
            "update_cpu_s": statistics.mean(cpu[1:]),
            "trained_params": sum(p.numel() for p in trained),
            "state_mib": (weights + grads + moments) / MIB,
            "grads_adam_mib": (grads + moments) / MIB,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "acc_before": evals[0], "acc_after": evals[args.steps]}


def simulator_table(rank: int) -> str:
    from trainer.clustertime import MODELS, memory_table, rank_memory

    rows = [rank_memory(MODELS[m], g, lora_rank=r)
            for m in ("1.5b", "7b") for g in (1, 8) for r in (0, rank)]
    return memory_table(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a Hugging Face model directory (tiny)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--full-lr", type=float, default=2e-4)
    ap.add_argument("--lora-lr", type=float, default=2e-3)
    ap.add_argument("--simulator-rank", type=int, default=32,
                    help="LoRA rank of the simulator's table (default 32)")
    ap.add_argument("--one", nargs=2, metavar=("VARIANT", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: dict[str, list[dict[str, float]]] = {"full": [], "lora": []}
    for seed in seeds:
        # Both variants of a seed at once: whatever else loads the machine loads both alike.
        procs = {v: subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--one", v,
                                      str(seed)], stdout=subprocess.PIPE, text=True)
                 for v in rows}
        for variant, proc in procs.items():
            out, _ = proc.communicate()
            if proc.returncode:
                raise SystemExit(f"{variant} seed {seed} failed ({proc.returncode})")
            rows[variant].append(json.loads(out.strip().splitlines()[-1]))
            print(f"{variant} seed {seed}: {rows[variant][-1]}", file=sys.stderr)

    def mean(v: str, k: str) -> float:
        return statistics.mean(r[k] for r in rows[v])

    print(f"Tiny model, GRPO, B = 8, n = 4, {args.steps} steps, seeds {args.seeds}; LoRA rank "
          f"{args.lora_rank}, alpha {args.lora_alpha:g} on all-linear at lr {args.lora_lr:g}, "
          f"full fine-tuning at lr {args.full_lr:g}; means over the seeds.\n")
    print("| variant | trained parameters | update per step, CPU (s) | update per step, wall "
          "(s) | weights + grads + AdamW (MiB) | of which grads + AdamW (MiB) | process peak "
          "RSS (MiB) | greedy accuracy before | after (each seed) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for v, label in (("full", "full fine-tuning"), ("lora", f"LoRA r={args.lora_rank}")):
        each = ", ".join(f"{r['acc_after']:.2f}" for r in rows[v])
        print(f"| {label} | {int(mean(v, 'trained_params')):,} | "
              f"{mean(v, 'update_cpu_s'):.3f} | {mean(v, 'update_s'):.3f} | "
              f"{mean(v, 'state_mib'):.1f} | {mean(v, 'grads_adam_mib'):.2f} | "
              f"{mean(v, 'peak_rss_mib'):.0f} | {mean(v, 'acc_before'):.3f} | "
              f"{mean(v, 'acc_after'):.3f} ({each}) |")
    print(f"\nThe simulator's memory per rank (GiB), full fine-tuning against LoRA r="
          f"{args.simulator_rank} (`simulate-time --lora-rank {args.simulator_rank}`):\n")
    print(simulator_table(args.simulator_rank))


if __name__ == "__main__":
    main()
