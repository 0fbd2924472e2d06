"""VADE's selection cost per step (trainer/algorithms/vade.py): the Thompson draws over the
whole prompt set and the top B, the step's summary of the selection (credible intervals of the
B selected), and the posterior update, after 50 warm-up updates of B prompts each.

    python benchmarks/bench_vade.py [--prompts 10000 100000] [--batch 256] [--repeats 5]

Prints a markdown table (seconds per step, the mean of ``--repeats`` steps).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.algorithms.vade import (  # noqa: E402
    BetaPosteriors,
    selection_summary,
    thompson_select,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompts", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    B = args.batch
    print("| prompts | select s | summary s | update s |")
    print("| ---: | ---: | ---: | ---: |")
    for n in args.prompts:
        ids = [f"prompt-{i}" for i in range(n)]
        post, rng = BetaPosteriors(), np.random.default_rng(0)
        for step in range(1, 51):
            chosen, scores = thompson_select(post, ids, B, (), seed=0, step=step,
                                             score="info-gain")
            selection_summary(post, ids, chosen, scores)   # imports scipy once, untimed
            post.update([ids[i] for i in chosen], rng.integers(0, 9, B), np.full(B, 8))
        t = {"select": 0.0, "summary": 0.0, "update": 0.0}
        for step in range(51, 51 + args.repeats):
            t0 = time.perf_counter()
            chosen, scores = thompson_select(post, ids, B, (), seed=0, step=step,
                                             score="info-gain")
            t1 = time.perf_counter()
            selection_summary(post, ids, chosen, scores)
            t2 = time.perf_counter()
            post.update([ids[i] for i in chosen], rng.integers(0, 9, B), np.full(B, 8))
            t3 = time.perf_counter()
            t["select"] += t1 - t0
            t["summary"] += t2 - t1
            t["update"] += t3 - t2
        r = args.repeats
        print(f"| {n:,} | {t['select'] / r:.3f} | {t['summary'] / r:.3f} | "
              f"{t['update'] / r:.4f} |")


if __name__ == "__main__":
    main()
