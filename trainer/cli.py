"""``python -m trainer``: run, simulate, simulate-time, warmstart, eval, config-docs.

Errors in user input (config, pass-rate files) print ``error: <field>: <reason>`` to stderr and
exit with status 2, before any work is done or any output directory is created.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.config import ALGORITHMS, ConfigError, TrainConfig

# Subcommands another module implements, exposing add_arguments(parser) and run_cli(args) -> int.
DELEGATED = {
    "warmstart": ("trainer.warmstart", "Warm-start the built-in tiny model by supervised "
                  "learning on the arithmetic task."),
    "eval": ("trainer.evaluate", "Evaluate a model: greedy accuracy, avg@k and pass@k."),
    "simulate-time": ("trainer.steptime", "A training step's wall time at the paper's scale "
                      "(B=512, n=4, M=8, N=4) for the algorithms of the paper's Table 2 (or "
                      "any registered one: --algorithms) under each scheduler, on the "
                      "simulated backend's engine-time model."),
}


def _fail(field_name: str, reason: str) -> int:
    print(f"error: {field_name}: {reason}", file=sys.stderr)
    return 2


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``command`` says which delegated subcommand needs its real arguments (importing
    its module pulls in torch, which ``simulate`` and the top-level help should not pay for)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Reinforce-Ada and GRPO RL post-training (arXiv 2510.04996).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="Train from a TOML config; writes events.jsonl and "
                         "checkpoints.", description="Train from a TOML config whose top-level "
                         "keys are TrainConfig field names; writes DIR/events.jsonl and "
                         "DIR/checkpoints/.")
    run.add_argument("--config", required=True, metavar="FILE.toml", help="run configuration")
    run.add_argument("--out", required=True, metavar="DIR", help="output directory")
    run.add_argument("--resume", action="store_true",
                     help="continue from the latest checkpoint in DIR")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--mirror", action="append", default=[], metavar="KIND[:WHERE]",
                     help="also mirror the run to a tracker: mlflow:FOLDER, mlflow:URL, "
                     "wandb:FOLDER (offline), wandb:online or tensorboard:FOLDER (repeatable; "
                     "added to the config's mirror field)")

    sim = sub.add_parser("simulate", help="Sampling steps with the simulated backend; prints "
                         "JSON.", description="Run sampling steps with the simulated backend "
                         "(Bernoulli rewards from per-prompt pass rates, which stay fixed: no "
                         "policy update) and print one JSON object: total_samples and per-prompt "
                         "samples, rounds, kept counts and advantages (an algorithm that "
                         "allocates, Est: also p_hat and allocated). Each step samples the batch "
                         "the algorithm selects, of B = every pass rate unless --set "
                         "batch_size=B. With --steps K > 1 the object holds a list of K steps.")
    sim.add_argument("--algorithm", required=True, choices=ALGORITHMS)
    sim.add_argument("--pass-rates", required=True, metavar="FILE",
                     help="one pass rate in [0, 1] per line, one prompt per line")
    sim.add_argument("--group-size", type=int, default=4, help="n (default 4)")
    sim.add_argument("--samples-per-round", type=int, default=8, help="M (default 8)")
    sim.add_argument("--max-rounds", type=int, default=4, help="N (default 4)")
    sim.add_argument("--steps", type=int, default=1,
                     help="steps to simulate (default 1); an algorithm's persistent state "
                     "(Est's estimator) carries over")
    sim.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="any other TrainConfig field, e.g. --set K_pos=16 or --set "
                     "budget_per_prompt=16 (repeatable; values are TOML: 0.9, true, 'inv')")
    sim.add_argument("--seed", type=int, default=0)

    docs = sub.add_parser("config-docs", help="Print docs/config.md: every config field and "
                          "every registered algorithm's options.",
                          description="Print the run configuration reference (docs/config.md): "
                          "every TrainConfig field and every registered algorithm's own options, "
                          "with defaults, bounds, units and help.")
    docs.add_argument("--import", dest="modules", action="append", default=[],
                      metavar="MODULE", help="import MODULE first (it registers an algorithm "
                      "whose options are then documented too; repeatable). RADA_ALGORITHMS "
                      "does the same for every command.")

    sub.add_parser("rewards", help="List the rewards a config's rewards may combine: the "
                   "verifier and those RADA_REWARDS and the rada.rewards entry points register, "
                   "each with its signature's kind and docstring.")

    for name, (module, help_text) in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            mod = _import(module)
            if mod is not None:
                mod.add_arguments(p)
                p.set_defaults(_run_cli=mod.run_cli)
    return parser


def _import(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None


def cmd_rewards() -> int:
    from trainer.reward_registry import VERIFIER, rewards

    try:
        found = rewards()
    except ValueError as exc:  # a RADA_REWARDS entry that does not import
        return _fail("rewards", str(exc))
    print(f"{VERIFIER} (the config's verifier): 1 for a correct answer, else 0")
    for r in found:
        print(f"{r.name} ({r.kind}, {r.source}): {r.summary or '(no docstring)'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "simulate":
        return cmd_simulate(args)
    if args.command == "rewards":
        return cmd_rewards()
    if args.command == "config-docs":
        import importlib

        from trainer.config_docs import config_reference

        for module in args.modules:
            importlib.import_module(module)
        print(config_reference(), end="")
        return 0
    runner = getattr(args, "_run_cli", None)
    if runner is None:
        return _fail(args.command, f"not available in this install "
                     f"({DELEGATED[args.command][0]} is missing)")
    return int(runner(args))


# --- run ----------------------------------------------------------------------------------------

class _Progress:
    """Forwards to the real recorder and advances a tqdm bar per step."""

    def __init__(self, inner: Any, bar: Any) -> None:
        self.inner, self.bar = inner, bar

    def on_round(self, step: int, stat: Any) -> None:
        self.inner.on_round(step, stat)

    def on_step(self, record: Any) -> None:
        self.inner.on_step(record)
        if self.bar is not None:
            m = record.metrics
            self.bar.set_postfix(reward=f"{m['real_reward']:.3f}", samples=int(m["samples"]),
                                 zero_adv=f"{m['zero_adv_frac']:.2f}", refresh=False)
            self.bar.update(1)

    def on_checkpoint(self, record: Any) -> None:
        self.inner.on_checkpoint(record)

    def on_eval(self, record: Any) -> None:
        self.inner.on_eval(record)
        if self.bar is not None:
            self.bar.write(f"eval step {record.step}: " + ", ".join(
                f"{k}={v:.3f}" for k, v in sorted(record.metrics.items())))


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config = TrainConfig.from_toml(args.config)
        if args.mirror:
            config = dataclasses.replace(config, mirror=", ".join(
                [m for m in (config.mirror, *args.mirror) if m.strip()])).validate()
    except ConfigError as exc:
        return _fail(exc.field, exc.reason)
    out = Path(args.out)
    resume_from = None
    if args.resume:
        from trainer.checkpoint import latest_checkpoint

        resume_from = latest_checkpoint(out)
        if resume_from is None:
            return _fail("resume", f"no checkpoint under {out}")
    try:
        from trainer.data import resolve_prompts

        prompts, eval_prompts = resolve_prompts(config)
    except ValueError as exc:  # a malformed prompt file names its line or row
        return _fail(getattr(exc, "field", "prompts"), str(exc))
    if not prompts:
        return _fail("prompts", "no training prompts")

    from tqdm import tqdm

    from trainer.backends import BackendUnavailable, make_backend
    from trainer.loop import train
    from trainer.mirror import mirrored, read_cursor
    from trainer.phases import reporting_phases
    from trainer.recorders import JsonlRecorder

    def say(text: str) -> None:  # a multi-rank start takes 25-45 s before its first step
        if text and not args.no_progress:
            print(f"starting: {text}", file=sys.stderr, flush=True)

    try:
        with reporting_phases(say):
            backend = make_backend(config, prompts)
    except FileNotFoundError as exc:  # e.g. builtin:tiny not warm-started yet
        return _fail("model", str(exc))
    except BackendUnavailable as exc:  # e.g. vllm not installed here
        return _fail("backend", str(exc))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    stop = {"requested": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["requested"] = True  # cooperative: the loop stops between rounds

    previous = signal.signal(signal.SIGINT, on_signal)
    start = 0
    if resume_from is not None:
        from trainer.checkpoint import read_state

        start = int(read_state(resume_from)["step"])
    bar = None if args.no_progress else tqdm(total=config.total_steps, initial=start,
                                              unit="step", file=sys.stderr)
    try:
        with JsonlRecorder(out / "events.jsonl", resume_step=start if args.resume else None
                           ) as rec, mirrored(config.mirror, rec, out, name=out.resolve().name,
                                              params=config.to_dict(),
                                              tags={"rada.out": str(out.resolve())},
                                              resume=args.resume) as recorder:
            result = train(config, prompts, backend, _Progress(recorder, bar),
                           lambda: stop["requested"], out_dir=out, eval_prompts=eval_prompts,
                           resume_from=resume_from)
    finally:
        signal.signal(signal.SIGINT, previous)
        backend.close()
        if bar is not None:
            bar.close()
    summary: dict[str, Any] = {"status": result.status, "last_step": result.last_step,
                               "checkpoint": result.checkpoint}
    if config.mirror:
        summary["mirror"] = [{k: t[k] for k in ("target", "run_id", "link", "lost", "error")}
                             for t in read_cursor(out).values()]
    print(json.dumps(summary))
    return 130 if result.cancelled else 0


# --- simulate -----------------------------------------------------------------------------------

def read_pass_rates(path: str | Path) -> list[float]:
    """One pass rate per line; raises ConfigError naming the line."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError("pass-rates", f"cannot read {path}: {exc.strerror}") from exc
    rates = []
    for no, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            raise ConfigError("pass-rates", f"line {no} is empty (one pass rate per line)")
        try:
            rate = float(text)
        except ValueError:
            raise ConfigError("pass-rates", f"line {no}: {text!r} is not a number") from None
        if not 0.0 <= rate <= 1.0:
            raise ConfigError("pass-rates", f"line {no}: {rate} is outside [0, 1]")
        rates.append(rate)
    if not rates:
        raise ConfigError("pass-rates", f"{path} holds no pass rate")
    return rates


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` pairs; a value is read as TOML (numbers, booleans, quoted strings) and
    taken as a plain string when it is not TOML (``est_weight=inv``)."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("set", f"{item!r} is not FIELD=VALUE")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key.strip()] = value
    return out


def simulate(algorithm: str, pass_rates: Sequence[float], *, group_size: int = 4,
             samples_per_round: int = 8, max_rounds: int = 4, seed: int = 0, steps: int = 1,
             overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sampling steps on the simulated backend, as the stable ``simulate`` JSON object.

    The prompts are the pass rates, one each; their pass rates stay fixed (there is no policy to
    update), so Est's estimator converges towards them over the steps. Each step samples the
    batch the algorithm selects from them (``Algorithm.select_batch``; B = ``batch_size``,
    every prompt by default), listed in the order of ``pass_rates``. One step gives
    ``{"total_samples", "prompts": [...]}``; several give ``{"total_samples": over all steps,
    "steps": [{"step", "total_samples", "prompts"}, ...]}``. An Est prompt also carries
    ``p_hat`` (the estimate before the step's sampling) and ``allocated``. DAPO's further
    batches are fresh draws of the same pass rates (new prompt ids), listed after the first
    batch with ``batch`` (1-based) and ``index`` into ``pass_rates``; its steps carry
    ``gen_batches``.
    """
    from trainer.algorithms import choose_batch, get_algorithm
    from trainer.backends.simulated import SimulatedBackend
    from trainer.loop import make_scorer, sample_step
    from trainer.types import Prompt
    from trainer.visits import PromptVisits

    if steps < 1:
        raise ConfigError("steps", f"must be >= 1, got {steps}")
    config = TrainConfig.from_dict({
        "algorithm": algorithm, "group_size": group_size, "samples_per_round": samples_per_round,
        "max_rounds": max_rounds, "seed": seed, "backend": "simulated", "verifier": "exact",
        "batch_size": max(1, len(pass_rates)), **(overrides or {})})
    if config.batch_size > len(pass_rates):
        raise ConfigError("batch_size", f"must be <= the {len(pass_rates)} pass rates, got "
                          f"{config.batch_size}")
    if config.max_policy_lag:
        # Each step here samples on its own; the producer that runs ahead lives in a run.
        raise ConfigError("max_policy_lag", "simulate samples each step synchronously: train "
                          "asynchronously with `python -m trainer run` (backend simulated), or "
                          "time it with `simulate-time --max-policy-lag`")
    prompts = [Prompt(id=str(i), text=f"simulated prompt {i}", answer="1",
                      metadata={"pass_rate": rate}) for i, rate in enumerate(pass_rates)]
    backend, scorer = SimulatedBackend(config), make_scorer(config)
    state = get_algorithm(config.algorithm).new_state(config)
    visits = PromptVisits(len(prompts))
    out = []
    for step in range(1, steps + 1):
        def more_prompts(k: int, step: int = step) -> list[Prompt]:
            return [Prompt(id=f"{p.id}/{step}/{k}", text=p.text, answer=p.answer,
                           metadata=p.metadata) for p in prompts]

        # In the pass rates' order: a batch is which prompts, and the rows follow the file.
        chosen = sorted(choose_batch(config, prompts, step, state=state, visits=visits))
        batch = [prompts[i] for i in chosen]
        sampled = sample_step(config, batch, backend, scorer, step, state,
                              more_prompts=more_prompts, prompt_set=prompts, visits=visits,
                              batch_indices=chosen)
        visits.mark(chosen if sampled.prompt_indices is None else sampled.prompt_indices)
        out.append({"step": step, **_simulated_step(config, pass_rates, chosen, sampled)})
    if steps == 1:
        return {k: v for k, v in out[0].items() if k != "step"}
    return {"total_samples": sum(s["total_samples"] for s in out), "steps": out}


def _simulated_step(config: TrainConfig, pass_rates: Sequence[float], chosen: Sequence[int],
                    sampled: Any) -> dict[str, Any]:
    from trainer.algorithms import get_algorithm

    res, allocation = sampled.result, sampled.allocation
    batches = get_algorithm(config.algorithm).draws_batches
    out = []
    for i in range(res.num_prompts):
        # Prompts beyond the batch are DAPO's fresh copies of the pass rates, in their order.
        index = chosen[i] if i < len(chosen) else (i - len(chosen)) % len(pass_rates)
        p = res.prompt(i)
        kept = [(r > config.positive_threshold, a)
                for r, k, a in zip(p.rewards, p.kept, p.advantages, strict=True) if k]
        advantages = [a for pos, a in kept if pos] + [a for pos, a in kept if not pos]
        row = {"index": index, "pass_rate": pass_rates[index], "samples": len(p.rewards),
               "positives": p.positives, "negatives": p.negatives,
               "rounds": p.rounds_used, "resolved": p.resolved, "missing": p.missing,
               "kept_positives": p.kept_positives, "kept_negatives": p.kept_negatives,
               "advantages": advantages}
        if allocation is not None:
            row |= {"p_hat": float(allocation.p_hat[i])}
            if allocation.counts is not None:  # VADE plans no samples: its p_hat alone
                row |= {"allocated": int(allocation.counts[i])}
        if batches:
            row |= {"batch": int(res.batch[i])}
        out.append(row)
    extra = {"gen_batches": int(res.batch.max())} if batches else {}
    return {"total_samples": int(res.samples.sum()), "prompts": out, **extra}


SIMULATE_FLAGS = ("--group-size", "--samples-per-round", "--max-rounds", "--seed", "--steps")


def cmd_simulate(args: argparse.Namespace) -> int:
    try:
        rates = read_pass_rates(args.pass_rates)
        result = simulate(args.algorithm, rates, group_size=args.group_size,
                          samples_per_round=args.samples_per_round, max_rounds=args.max_rounds,
                          seed=args.seed, steps=args.steps, overrides=parse_overrides(args.set))
    except ConfigError as exc:
        # Fields with a flag of their own are named as the flag; the rest as given to --set.
        flag = exc.field.replace("_", "-")
        return _fail(flag if f"--{flag}" in SIMULATE_FLAGS else exc.field, exc.reason)
    print(json.dumps(result))
    return 0
