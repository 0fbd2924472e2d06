"""Sampler and advantage bookkeeping cost per step: 512 prompts x up to 32 samples.

    python benchmarks/bench_sampler.py [--prompts 512] [--repeats 50]

Rewards are drawn beforehand (not timed); timed per step: the rounds' ``observe_many`` and
``end_round`` calls, ``finalize`` (down-sampling + advantages) and the zero-advantage statistic
the loop records. Target: under 5 ms per step. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.advantages import zero_advantage_groups  # noqa: E402
from trainer.sampler import AdaptiveSampler  # noqa: E402


def one_step(rule: str, rates: np.ndarray, rng: np.random.Generator, n: int, m: int,
             rounds: int) -> tuple[float, int]:
    P = len(rates)
    draws = (rng.random((rounds, P, m)) < rates[None, :, None]).astype(np.float64)
    t0 = time.perf_counter()
    s = AdaptiveSampler(P, algorithm=rule, group_size=n, samples_per_round=m, max_rounds=rounds,
                        seed=0)
    while not s.done:
        active = np.flatnonzero(s._active)
        s.observe_many(np.repeat(active, s.samples_per_round),
                       draws[s.round - 1, active, :s.samples_per_round].ravel())
        s.end_round()
    res = s.finalize()
    zero_advantage_groups(res.advantages, res.sample_prompt, res.kept, P)
    return time.perf_counter() - t0, int(res.samples.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = {
        # every prompt unresolved: all 4 rounds x 8 = 32 samples each (the worst case)
        "ada-balance, pass rate 0 (32 samples/prompt)": ("ada-balance", np.zeros(args.prompts)),
        "ada-balance, pass rates U(0,1)": ("ada-balance", rng.random(args.prompts)),
        "ada-pos, pass rates U(0,1)": ("ada-pos", rng.random(args.prompts)),
        "grpo (4 samples/prompt)": ("grpo", rng.random(args.prompts)),
    }
    print(f"| case ({args.prompts} prompts, n=4, M=8, N=4) | samples/step | median ms/step "
          "| p90 ms/step |")
    print("| --- | ---: | ---: | ---: |")
    for name, (rule, rates) in cases.items():
        one_step(rule, rates, rng, 4, 8, 4)  # warm-up
        times, samples = [], 0
        for _ in range(args.repeats):
            t, samples = one_step(rule, rates, rng, 4, 8, 4)
            times.append(t * 1e3)
        times.sort()
        print(f"| {name} | {samples} | {statistics.median(times):.2f} | "
              f"{times[int(0.9 * (len(times) - 1))]:.2f} |")


if __name__ == "__main__":
    main()
