"""The rollout/policy log-prob gap (``rollout_logprob_diff_mean`` / ``_max``, nats per kept token)
of a 2-step GRPO run on the ``vllm`` backend, per engine setting, on vLLM's CPU build.

Each row is the default config (B=32, n=M=4, 16 new tokens at most, the built-in arithmetic task)
with ``algorithm = "grpo"``, ``total_steps = 2`` and one setting changed. Step 1 samples with the
weights the engine was built from (no weight sync yet); step 2 after the first update and sync.

- ``rollout_dtype = auto``: what a CPU run gets by default (float32 since issue 27; before, the
  engine was handed vLLM's own "auto", which is bfloat16 for a float32 checkpoint);
- ``float32`` / ``bfloat16``: the engine's copy of the weights (the policy is float32 always);
- ``temperature = 0.7``: both sides temper alike (the engine's processed log-probs, the policy's
  logits / T), so the gap stays float noise;
- ``top_p = 0.9``: the engine's processed log-probs are of the renormalised nucleus, the policy's
  of the whole vocabulary: a gap of log(1 / nucleus mass) on every token, by design.

    .venv/bin/python benchmarks/rollout_gap.py --model var/test-cache/tiny-<hash>

Measures, never asserts; prints a Markdown table for docs/benchmarks.md. The figures are
deterministic given the seeds (the same on a busy or a quiet machine).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS: dict[str, dict[str, Any]] = {
    "rollout_dtype = auto (the default)": {},
    "rollout_dtype = float32": {"rollout_dtype": "float32"},
    "rollout_dtype = bfloat16": {"rollout_dtype": "bfloat16"},
    "float32, temperature = 0.7": {"rollout_dtype": "float32", "temperature": 0.7},
    "float32, top_p = 0.9": {"rollout_dtype": "float32", "top_p": 0.9},
}


def gap_run(model: str, seed: int, **changes: Any) -> tuple[str, list[tuple[float, float]]]:
    """The engine's dtype and (mean, max) gap of each step of a 2-step GRPO run."""
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.recorders import ListRecorder

    config = TrainConfig(**{"algorithm": "grpo", "model": model, "backend": "vllm",
                            "device": "cpu", "total_steps": 2, "save_every": 0,
                            "eval_every": 0, "seed": seed, "vllm_kv_cache_gib": 0.25,
                            **changes}).validate()
    prompts, _ = resolve_prompts(config)
    backend = make_backend(config, prompts)
    dtype = backend.dtype
    rec = ListRecorder()
    try:
        with tempfile.TemporaryDirectory() as out:
            train(config, prompts, backend, rec, out_dir=out)
    finally:
        backend.close()
    return dtype, [(s.metrics["rollout_logprob_diff_mean"], s.metrics["rollout_logprob_diff_max"])
                   for s in rec.steps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="builtin:tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    print("| engine setting | engine dtype | step 1 mean (nats) | step 1 max (nats) | "
          "step 2 mean (nats) | step 2 max (nats) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in args.variants:
        dtype, steps = gap_run(args.model, args.seed, **VARIANTS[name])
        cells = " | ".join(f"{mean:.2g} | {mx:.2g}" for mean, mx in steps)
        print(f"| {name} | {dtype} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
