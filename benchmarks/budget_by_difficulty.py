"""Where each algorithm spends its sampling budget, by prompt difficulty, on the simulated backend.

    python benchmarks/budget_by_difficulty.py [--prompts 256] [--steps 30] [--burn-in 10]
        [--seed 0] [--regime moderate|hard|both]

Every prompt has a fixed pass rate drawn once from the regime's Beta distribution ("moderate":
Beta(1, 1), about 11% of prompts all wrong in 8 samples; "hard": Beta(0.5, 1.5), about 37%, the
paper's regime where a third of the batch is all wrong). Each algorithm samples every prompt
in every step with ``python -m trainer simulate``'s machinery (``trainer.cli.simulate``, several
steps, pass rates held fixed); Est's estimator carries over between steps, so the figures are
means over the steps after ``--burn-in``. Reported per algorithm: samples per prompt and step,
overall and by true pass-rate bucket, the share of samples spent on prompts with p < 0.2, and the
fraction of prompts whose update group has no gradient (all advantages zero).

No timing: the simulated backend draws Bernoulli rewards, so this is about allocation only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.cli import simulate  # noqa: E402

REGIMES = {"moderate": (1.0, 1.0), "hard": (0.5, 1.5)}
BUCKETS = ((0.0, 0.05), (0.05, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1.0001))
# (label, algorithm, overrides): GRPO at n = 8 has Est's default budget of 8 samples per prompt.
ALGORITHMS: list[tuple[str, str, dict[str, Any]]] = [
    ("GRPO n=4", "grpo", {}),
    ("GRPO n=8", "grpo", {"group_size": 8}),
    ("Seq-pos (ada-pos)", "ada-pos", {}),
    ("Seq-balance (ada-balance)", "ada-balance", {}),
    ("Est, w = 1/sqrt(p)", "ada-est", {}),
    ("Est, w = 1/p", "ada-est", {"est_weight": "inv"}),
]


def measure(rates: list[float], algorithm: str, overrides: dict[str, Any], steps: int,
            burn_in: int, seed: int) -> dict[str, Any]:
    out = simulate(algorithm, rates, steps=steps, seed=seed,
                   group_size=overrides.pop("group_size", 4), overrides=overrides)
    per_step = out["steps"][burn_in:]
    samples = np.array([[p["samples"] for p in s["prompts"]] for s in per_step], dtype=float)
    zero = np.array([[all(abs(a) < 1e-12 for a in p["advantages"]) for p in s["prompts"]]
                     for s in per_step], dtype=float)
    r = np.asarray(rates)
    per_prompt = samples.mean(axis=0)
    by_bucket = [float(per_prompt[(r >= lo) & (r < hi)].mean()) if ((r >= lo) & (r < hi)).any()
                 else float("nan") for lo, hi in BUCKETS]
    return {"per_prompt": float(samples.mean()), "by_bucket": by_bucket,
            "hard_share": float(per_prompt[r < 0.2].sum() / per_prompt.sum()),
            "zero_adv": float(zero.mean())}


def render(regime: str, rates: list[float], rows: dict[str, dict[str, Any]]) -> str:
    r = np.asarray(rates)
    counts = [int(((r >= lo) & (r < hi)).sum()) for lo, hi in BUCKETS]
    all_wrong_8 = float(np.mean((1 - r) ** 8))
    head = " | ".join(f"p in [{lo:.2f}, {min(hi, 1):.2f}{']' if hi > 1 else ')'} ({n})"
                      for (lo, hi), n in zip(BUCKETS, counts, strict=True))
    out = [f"Regime {regime}: Beta{REGIMES[regime]} pass rates, {len(rates)} prompts, "
           f"expected share all wrong in 8 samples {all_wrong_8:.2f}.", "",
           f"| algorithm | samples / prompt / step | {head} | share of samples on p < 0.2 "
           f"| zero-advantage groups |",
           "| --- | ---: |" + " ---: |" * len(BUCKETS) + " ---: | ---: |"]
    for label, m in rows.items():
        cells = " | ".join(f"{v:.1f}" for v in m["by_bucket"])
        out.append(f"| {label} | {m['per_prompt']:.1f} | {cells} | {m['hard_share']:.2f} | "
                   f"{m['zero_adv']:.2f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--burn-in", type=int, default=10,
                    help="steps left out of the means while Est's estimator settles")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--regime", choices=(*REGIMES, "both"), default="both")
    args = ap.parse_args()
    if not 0 <= args.burn_in < args.steps:
        ap.error("--burn-in must be within [0, --steps)")
    regimes = list(REGIMES) if args.regime == "both" else [args.regime]
    for regime in regimes:
        a, b = REGIMES[regime]
        rates = np.random.default_rng([args.seed, 11]).beta(a, b, size=args.prompts)
        rates = [round(float(x), 4) for x in rates]
        rows = {label: measure(rates, algo, dict(over), args.steps, args.burn_in, args.seed)
                for label, algo, over in ALGORITHMS}
        print(render(regime, rates, rows) + "\n")


if __name__ == "__main__":
    main()
