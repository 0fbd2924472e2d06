"""Every record a run emits, for every registered algorithm, dumped to files: what a refactoring
that must not change any run is diffed on (``diff -r before/ after/``).

    python benchmarks/dump_records.py OUT_DIR [--backend simulated|hf|all]
        [--model DIR] [--only NAME,...]
    python benchmarks/dump_records.py --compare BEFORE_DIR AFTER_DIR

Each case trains through ``trainer.train`` with the JSONL recorder (the CLI's) and writes
``OUT_DIR/<backend>/<case>.jsonl``: every event (rounds, steps with their prompt and sample
records, checkpoints, evaluations) with the wall-clock metrics (``time_*``) removed and the
run's folder written as ``RUN``, so that two dumps of the same code are equal byte for byte.

The simulated cases cover every scheduler and early-rounds mode an algorithm accepts, passive
filtering and dropping unresolved prompts, overlong reward shaping, DAPO's generation batches and
further-prompt orders, asynchronous training (``max_policy_lag`` 2, every algorithm),
a run over several epochs (the visit counts) and a resume from a checkpoint. The hf cases train
the tiny model (``--model``: a warm-started model directory; default one of the test suite's
cache, which holds one per version of the warm start: give both dumps of a comparison the same
``--model``) with several mini-batches (clipping acts), every ``loss_agg_mode``,
micro-batches, the KL penalty, the KL in the reward, an evaluation and asynchronous training one
step behind with each ``off_policy_correction``. ``--compare`` says which dumps of two folders
differ, a sample's ``weight`` of 1 (the key issue 28 added: every built-in's) aside, so that a
dump taken before it compares with one taken after. It measures nothing and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIM_PROMPTS = 24
HF_PROMPTS = 12


def sim_prompts() -> list[Any]:
    from trainer.types import Prompt

    rates = [0.0, 1.0, 0.05, 0.95, 0.5, 0.3, 0.7, 0.15, 0.85, 0.4, 0.6, 0.2]
    return [Prompt(id=str(i), text=f"simulated prompt {i}", answer="1",
                   metadata={"pass_rate": rates[i % len(rates)]}) for i in range(SIM_PROMPTS)]


def sim_cases(names: list[str]) -> dict[str, dict[str, Any]]:
    """case name -> config overrides, for every algorithm of ``names``."""
    from trainer.algorithms import get_algorithm

    base = {"backend": "simulated", "verifier": "exact", "batch_size": 8, "total_steps": 7,
            "save_every": 0, "eval_every": 0, "seed": 3}
    cases: dict[str, dict[str, Any]] = {}
    for name in names:
        record = get_algorithm(name)
        a = {**base, "algorithm": name}
        cases[f"{name}-round"] = a
        cases[f"{name}-passive"] = {**a, "passive_filtering": True, "drop_unresolved": True,
                                    "seed": 5}
        for scheduler in ("per-prompt", "streaming"):
            if record.schedulers is not None and scheduler not in record.schedulers:
                continue
            for early in ("off", "certain", "speculative"):
                cases[f"{name}-{scheduler}-{early}"] = {**a, "scheduler": scheduler,
                                                        "early_rounds": early}
        if record.draws_batches:
            cases[f"{name}-gen-batches"] = {**a, "dapo_gen_batch_size": 12,
                                            "max_num_gen_batches": 3}
            cases[f"{name}-any"] = {**a, "dapo_further_prompts": "any"}
            cases[f"{name}-gen-batches-early"] = {**a, "dapo_gen_batch_size": 12,
                                                  "scheduler": "per-prompt",
                                                  "early_rounds": "speculative"}
        # DAPO's overlong shaping on (every algorithm may use it): long responses lose reward,
        # so what DAPO filters on and what counts as a positive matter (issue 34 item 4).
        cases[f"{name}-overlong"] = {**a, "max_new_tokens": 64, "overlong_buffer_len": 48,
                                     "overlong_penalty_factor": 1.0}
        if record.eliminates:
            cases[f"{name}-counts"] = {**a, "K_pos": 2, "K_neg": 1, "samples_per_round": 4,
                                       "max_rounds": 3}
        if record.allocates:
            cases[f"{name}-options"] = {**a, "budget_per_prompt": 6, "est_weight": "inv",
                                        "est_residual_weight": False, "est_lambda": 0.5}
        # Asynchronous training (issue 29): the producer's admissions, ticks and versions.
        cases[f"{name}-async"] = {**a, "max_policy_lag": 2}
    return cases


def hf_cases(names: list[str]) -> dict[str, dict[str, Any]]:
    base = {"backend": "hf", "verifier": "exact", "batch_size": 4, "total_steps": 2,
            "group_size": 4, "samples_per_round": 4, "max_rounds": 2, "max_new_tokens": 6,
            "save_every": 0, "eval_every": 0, "seed": 1, "lr": 2e-4,
            "prompts": "builtin:arithmetic",
            "task_num_prompts": HF_PROMPTS, "task_max_digits": 2, "budget_per_prompt": 4,
            "est_max_samples": 8, "ppo_mini_batch_size": 2}
    cases: dict[str, dict[str, Any]] = {}
    modes = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
             "seq-mean-token-sum-norm")
    for k, name in enumerate(names):
        a = {**base, "algorithm": name}
        cases[f"{name}"] = {**a, "loss_agg_mode": modes[k % len(modes)]}
    first = names[0]
    cases[f"{first}-micro-kl-epochs"] = {**base, "algorithm": first, "ppo_micro_batch_size": 3,
                                         "kl_coef": 0.1, "ppo_epochs": 2, "eval_every": 2,
                                         "eval_num_prompts": 4, "eval_k": 2}
    # Every KL option (issue 34 item 6): the KL in the reward with the adaptive controller, k1
    # with k2's gradient in the loss.
    cases[f"{first}-kl-reward"] = {**base, "algorithm": first, "use_kl_in_reward": True,
                                   "kl_ctrl_type": "adaptive", "kl_ctrl_coef": 0.1,
                                   "kl_ctrl_target": 0.01, "kl_ctrl_horizon": 100,
                                   "kl_coef": 0.05, "kl_loss_type": "k1+"}
    # Asynchronous, one step behind, each correction (issue 29).
    for correction in ("tis", "decoupled", "vcpo"):
        cases[f"{first}-async-{correction}"] = {**base, "algorithm": first, "total_steps": 3,
                                                "max_policy_lag": 1, "tis_cap": 2.0,
                                                "off_policy_correction": correction}
    return cases


def clean(obj: Any, run_dir: str) -> Any:
    if isinstance(obj, dict):
        return {k: clean(v, run_dir) for k, v in obj.items() if not k.startswith("time_")}
    if isinstance(obj, list):
        return [clean(v, run_dir) for v in obj]
    if isinstance(obj, str):
        return obj.replace(run_dir, "RUN")
    return obj


def run_case(config: dict[str, Any], prompts: list[Any] | None, out: Path, work: Path,
             resume_at: int | None = None) -> None:
    from trainer import train
    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.recorders import JsonlRecorder, read_events

    cfg = TrainConfig.from_dict(config)
    eval_prompts = None
    if prompts is None:
        prompts, eval_prompts = resolve_prompts(cfg)
    run_dir = work / out.stem
    shutil.rmtree(run_dir, ignore_errors=True)
    events = run_dir / "events.jsonl"
    backend = make_backend(cfg, prompts)
    try:
        with JsonlRecorder(events) as rec:
            if resume_at is None:
                train(cfg, prompts, backend, rec, out_dir=run_dir, eval_prompts=eval_prompts)
            else:
                # Stop after step ``resume_at`` (its checkpoint), then resume to the end.
                first = TrainConfig.from_dict({**config, "total_steps": resume_at,
                                               "save_every": 1})
                train(first, prompts, backend, rec, out_dir=run_dir, eval_prompts=eval_prompts)
        if resume_at is not None:
            from trainer.checkpoint import latest_checkpoint

            backend.close()
            backend = make_backend(cfg, prompts)
            with JsonlRecorder(events, resume_step=resume_at) as rec:
                train(cfg, prompts, backend, rec, out_dir=run_dir, eval_prompts=eval_prompts,
                      resume_from=latest_checkpoint(run_dir))
    finally:
        backend.close()
    lines = [json.dumps(clean(e, str(run_dir)), sort_keys=True) for e in read_events(events)]
    out.write_text("\n".join(lines) + "\n")


def _without_unit_weights(path: Path) -> str | None:
    """A dump's text with every sample's ``weight`` of 1 left out; None where there is none."""
    if not path.exists():
        return None
    lines = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        for sample in event["samples"] if event["type"] == "step" else []:
            if sample.get("weight") == 1.0:
                del sample["weight"]
        lines.append(json.dumps(event, sort_keys=True))
    return "\n".join(lines) + "\n"


def compare(before: Path, after: Path) -> int:
    """Print each dump of ``before`` that ``after`` lacks or holds otherwise (both read without
    the weights of 1, so that a dump from before the key existed compares with one from after,
    and two from after with each other); 1 if any."""
    differ = files = 0
    for old in sorted(before.rglob("*.jsonl")):
        new = after / old.relative_to(before)
        files += 1
        if not new.exists() or _without_unit_weights(old) != _without_unit_weights(new):
            print(f"differs: {old.relative_to(before)}")
            differ += 1
    print(f"{files} dumps compared, {differ} differ")
    return int(differ > 0)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--compare"]:
        return compare(Path(argv[1]), Path(argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--backend", default="all", choices=("simulated", "hf", "all"))
    parser.add_argument("--model", type=Path, help="a warm-started model directory (hf)")
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args(argv)

    import torch

    from trainer.algorithms import algorithms, get_algorithm

    torch.set_num_threads(1)
    names = [a.name for a in algorithms()]
    only = {n for n in args.only.split(",") if n}
    work = Path(tempfile.mkdtemp(prefix="dump-records-"))
    try:
        if args.backend in ("simulated", "all"):
            out = args.out / "simulated"
            out.mkdir(parents=True, exist_ok=True)
            cases = sim_cases(names)
            # The resume of an algorithm with persistent state (Est's estimator), the last
            # such built-in: a new algorithm registered later leaves this case as it was.
            stateful = [n for n in names if get_algorithm(n).make_state is not None]
            cases["resume"] = {**cases[f"{(stateful or names)[-1]}-round"]}
            for case, config in cases.items():
                if only and case not in only:
                    continue
                run_case(config, sim_prompts(), out / f"{case}.jsonl", work,
                         resume_at=3 if case == "resume" else None)
                print(f"simulated/{case}", file=sys.stderr)
        if args.backend in ("hf", "all"):
            model = args.model
            if model is None:
                model = next((ROOT / "var" / "test-cache").glob("tiny-*"))
            out = args.out / "hf"
            out.mkdir(parents=True, exist_ok=True)
            for case, config in hf_cases(names).items():
                if only and case not in only:
                    continue
                run_case({**config, "model": str(model)}, None, out / f"{case}.jsonl", work)
                print(f"hf/{case}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
