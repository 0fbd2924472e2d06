"""DAPO's further batches drawn early, on the simulated backend at the paper's 1.5B scale:
generation seconds (simulated) of one DAPO step with further batches drawn batch after batch
(round, per-prompt off), as soon as certain, and speculated (0.5 and 1.0 of the engine's batch
limit), with the tokens pooled and discarded.

    python benchmarks/dapo_early_batches.py --batch-size 64    # one engine's share of 8
    python benchmarks/dapo_early_batches.py --batch-size 512   # one engine for the batch

Pass rates from Beta(0.5, 0.5) (as ``simulate-time``), n = 4, responses up to 2048 tokens,
further batches of B from a pool of 20 B prompts, up to 10 batches. Generation only (the
update is the same for every mode: B kept groups)."""

from __future__ import annotations

import argparse

import numpy as np

from trainer.backends.simulated import SimulatedBackend
from trainer.config import TrainConfig
from trainer.enginetime import LengthModel
from trainer.loop import make_scorer, sample_step
from trainer.steptime import MODELS, engine_time_for
from trainer.types import Prompt

MODES = (("round", "off", 0.5), ("per-prompt", "off", 0.5), ("per-prompt", "certain", 0.5),
         ("per-prompt", "speculative", 0.5), ("per-prompt", "speculative", 1.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=64, help="B")
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    B = args.batch_size
    rates = np.random.default_rng(0).beta(0.5, 0.5, 20 * B * args.steps)
    pool = [Prompt(str(i), f"p{i}", "1", {"pass_rate": float(r)}) for i, r in enumerate(rates)]
    engine = engine_time_for(MODELS["1.5b"], None)
    print("| step | scheduler | early_rounds | capacity | batches | generation (s) | "
          "tokens pooled (M) | tokens discarded (M) | early batches started / discarded |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for step in range(1, args.steps + 1):
        base = (step - 1) * 20 * B
        for scheduler, early, cap in MODES:
            cfg = TrainConfig(algorithm="dapo", backend="simulated", verifier="exact",
                              group_size=4, batch_size=B, max_new_tokens=2048, seed=step,
                              scheduler=scheduler, early_rounds=early,
                              speculative_capacity=cap, max_num_gen_batches=10)
            backend = SimulatedBackend(cfg, lengths=LengthModel(max_tokens=2048),
                                       engine_time=engine)
            s = sample_step(cfg, pool[base:base + B], backend, make_scorer(cfg), step,
                            more_prompts=lambda k, b=base: pool[b + B * k:b + B * (k + 1)])
            o = s.outcome
            pooled = sum(len(g.response_token_ids) for gs in o.generations for g in gs)
            print(f"| {step} | {scheduler} | {early} | {cap} | {int(s.result.exit_round.max())}"
                  f" | {backend.sim_seconds:.1f} | {pooled / 1e6:.2f} | "
                  f"{o.tokens_discarded / 1e6:.2f} | {o.early_rounds_started} / "
                  f"{o.early_rounds_discarded} |", flush=True)


if __name__ == "__main__":
    main()
