"""Supervised warm start of the built-in tiny model on the arithmetic task (or its long-answer
variant, ``--task arithmetic-long``).

RL from a random policy gets no reward at all. The warm start trains by teacher forcing (cross
entropy on the answer tokens and EOS) just long enough that per-prompt pass rates are spread
between 0 and 1: easy 1-2 digit sums mostly solved, 3-digit sums rarely. That is the regime where
GRPO's fixed groups collapse to all-correct or all-wrong and Reinforce-Ada's adaptive sampling
matters. The report written next to the checkpoint (``warmstart_report.json``) is the pass-rate
histogram at temperature 1 on held-out prompts.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainer.filelock import file_lock

REPORT_NAME = "warmstart_report.json"
DEFAULT_STEPS = 1500
DEFAULT_BATCH_SIZE = 128
DEFAULT_LR = 3e-3
DEFAULT_TARGET = 0.6
DEFAULT_MAX_SECONDS = 540.0
# The long variant's CLI defaults: its transition came at step ~1450-1700 of batch 64 (435 s on
# 2 threads, docs/benchmarks.md); batch 64 learns more per second than 128 on this CPU.
LONG_MODEL_DIR_NAME = "tiny-long"
LONG_DEFAULTS = {"steps": 2500, "batch_size": 64, "max_seconds": 960.0}
# Held-out 2-digit prompts that decide when to stop; the report uses other prompts, so the
# histogram is not measured on the prompts that picked the stopping step.
_STOP_CHECK_SEED = 2000
TASKS = ("arithmetic", "arithmetic-long")
# The long variant's stop check is the mean over prompts of every length (2-8 operands of 1-3
# digits): 2-operand sums are solved long before 8-operand chains, so a mean of 0.3 leaves the
# long chains mostly unsolved, the spread RL needs (measured in docs/benchmarks.md).
DEFAULT_LONG_TARGET = 0.3
# Generation limit of the checks: the longest right answer plus room to be wrong.
_CHECK_TOKENS = {"arithmetic": 8, "arithmetic-long": 40}


def warmstart(out: str | Path, *, steps: int = DEFAULT_STEPS, batch_size: int = DEFAULT_BATCH_SIZE,
              lr: float = DEFAULT_LR, seed: int = 0, min_digits: int = 1, max_digits: int = 3,
              target_pass_rate: float = DEFAULT_TARGET, check_every: int = 50,
              max_seconds: float = DEFAULT_MAX_SECONDS, report_prompts: int = 64,
              report_samples: int = 32, progress: bool = True, threads: int | None = None,
              task: str = "arithmetic", init: str | Path | None = None) -> dict[str, Any]:
    """Build, train and save the tiny model into ``out``; return the report (also saved there).

    Trains until the mean pass rate at temperature 1 on held-out 2-digit prompts reaches
    ``target_pass_rate`` (checked every ``check_every`` steps on 32 prompts x 8 samples), or for
    ``steps`` steps, or ``max_seconds``, whichever comes first; ``target_pass_rate=0`` trains all
    ``steps``. Why a target and not a fixed step count: learning the digit alignment is a sudden
    transition (loss 1.0 -> 0.3 within ~150 steps) whose timing moves with the seed and machine;
    a 2-digit mean of about 0.6 leaves 3-digit sums mostly unsolved, the spread RL needs.

    AdamW at constant ``lr`` after a short linear warm-up, no gradient clipping (clipping at 1.0
    slowed the early phase in a 300-step comparison). ``report_prompts=0`` skips the histogram.
    ``threads`` overrides torch's CPU thread count (see ``model.configure_threads``).

    ``task="arithmetic-long"`` trains on ``builtin:arithmetic-long`` problems (2-8 operands,
    every running sum), checks the mean pass rate on 32 held-out problems of that task, and
    reports pass rates per operand count. ``init`` starts from a saved checkpoint (e.g. the
    built-in warm start) instead of random weights.
    """
    # trainer.model before torch: it sets OMP_WAIT_POLICY, which torch reads when it loads.
    from trainer.model import configure_threads, save_checkpoint  # isort: skip
    import torch

    from trainer.tokenizer import build_tokenizer

    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    configure_threads(threads)
    tokenizer = build_tokenizer()
    model = _initial_model(tokenizer, init, seed)
    started = time.perf_counter()
    done, loss_value, checks, stop_reason = _train(
        model, tokenizer, task=task, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
        digits=(min_digits, max_digits), target_pass_rate=target_pass_rate,
        check_every=check_every, max_seconds=max_seconds, progress=progress)
    train_seconds = time.perf_counter() - started
    model.eval()
    out = save_checkpoint(model, tokenizer, out)
    report: dict[str, Any] = {
        "task": task, "init": str(init) if init is not None else None,
        "steps": done, "max_steps": steps, "stop_reason": stop_reason,
        "target_pass_rate": target_pass_rate, "batch_size": batch_size, "lr": lr, "seed": seed,
        "min_digits": min_digits, "max_digits": max_digits,
        "train_seconds": round(train_seconds, 1), "final_loss": round(loss_value, 4),
        "threads": torch.get_num_threads(), "checks": checks,
    }
    if report_prompts:
        report["pass_rates"] = (
            pass_rate_report(model, tokenizer, report_prompts, report_samples, seed=seed,
                             progress=progress) if task == "arithmetic" else
            long_pass_rate_report(model, tokenizer, report_prompts, report_samples, seed=seed,
                                  progress=progress))
    # Last, so that a directory with the report is a finished one.
    (out / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _initial_model(tokenizer: Any, init: str | Path | None, seed: int) -> Any:
    """The model to train: the checkpoint ``init``, else a new tiny model of ``seed``."""
    from trainer.model import build_tiny_model, load_model_dir

    if init is None:
        return build_tiny_model(tokenizer, seed=seed)
    # The warm start trains on the built-in tokenizer's ids; a checkpoint to continue from
    # must share its vocabulary (checked here).
    model, _ = load_model_dir(Path(init), "cpu")
    if model.config.vocab_size != len(tokenizer):
        raise ValueError(f"--init {init}: vocabulary of {model.config.vocab_size} tokens, "
                         f"not the built-in tokenizer's {len(tokenizer)}")
    return model


Problem = Callable[[random.Random], tuple[str, str]]


def _task_problems(task: str, min_digits: int, max_digits: int) -> tuple[list[Any], Problem]:
    """The held-out prompts of the stop check, and how a training problem (prompt, answer) is
    drawn, for ``task``."""
    from trainer import tasks

    if task == "arithmetic":
        def problem(rng: random.Random) -> tuple[str, str]:
            a, b = tasks.sample_operands(rng, min_digits, max_digits)
            return tasks.format_prompt(a, b), tasks.reversed_sum(a, b)

        return tasks.arithmetic_prompts(32, seed=_STOP_CHECK_SEED, exact_digits=2), problem

    def long_problem(rng: random.Random) -> tuple[str, str]:
        operands = tasks.sample_long_operands(rng, min_digits, max_digits)
        return tasks.format_long_prompt(operands), tasks.running_sums_answer(operands)

    return tasks.arithmetic_long_prompts(32, min_digits, max_digits,
                                         seed=_STOP_CHECK_SEED), long_problem


def _train(model: Any, tokenizer: Any, *, task: str, steps: int, batch_size: int, lr: float,
           seed: int, digits: tuple[int, int], target_pass_rate: float, check_every: int,
           max_seconds: float, progress: bool) -> tuple[int, float, list[dict[str, float]], str]:
    """Teacher-force ``model`` on the task's problems until the stop check's pass rate reaches
    ``target_pass_rate`` (0: never checked), ``steps`` or ``max_seconds``; return (steps done,
    the last loss, the checks, why it stopped)."""
    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01,
                                  betas=(0.9, 0.95))
    warmup = max(1, min(50, steps // 10))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup))
    stop_prompts, problem = _task_problems(task, *digits)
    rng = random.Random(seed)
    bar = _Progress(task, steps, target_pass_rate, check_every, max_seconds, progress)
    loss_value = float("nan")
    checks: list[dict[str, float]] = []
    stop_reason = "max steps"
    done = 0
    for step in bar.steps:
        loss_value = _supervised_step(model, tokenizer, optimizer,
                                      [problem(rng) for _ in range(batch_size)])
        scheduler.step()
        done = step + 1
        if target_pass_rate > 0 and done % check_every == 0:
            model.eval()
            rate = _mean_pass_rate(model, tokenizer, stop_prompts, samples=8, seed=seed + done,
                                   max_new_tokens=_CHECK_TOKENS[task])
            model.train()
            checks.append({"step": done, ("pass_rate_2_digit" if task == "arithmetic"
                                          else "pass_rate"): round(rate, 4)})
            if rate >= target_pass_rate:
                stop_reason = "target reached"
                bar.reached(loss_value, rate)
                break
            bar.checked(rate)
            bar.show(done, loss_value)
        elif done % 10 == 0 or done == 1:
            bar.show(done, loss_value)
        if bar.elapsed() > max_seconds:
            stop_reason = "time limit"
            break
    bar.close(done, stop_reason)
    return done, loss_value, checks, stop_reason


def _supervised_step(model: Any, tokenizer: Any, optimizer: Any,
                     problems: list[tuple[str, str]]) -> float:
    """One optimiser step of cross entropy on the answers' tokens and EOS; the loss."""
    from trainer.policy import response_logprobs

    prompt_ids = [tokenizer(text)["input_ids"] for text, _ in problems]
    # Answer digits come from the tokenizer's vocabulary, one token per character.
    answer_ids = [tokenizer(answer, add_special_tokens=False)["input_ids"]
                  + [tokenizer.eos_token_id] for _, answer in problems]
    logprobs, _, mask = response_logprobs(model, prompt_ids, answer_ids, tokenizer.pad_token_id)
    loss = -(logprobs * mask).sum() / mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


class _Progress:
    """The warm start's bar. It usually stops long before ``steps``: at the target (a user read
    "0/1500" with an ETA of 14-22 min, and it stopped at step 600 after 3.5 min) or at the time
    limit. So the bar names the target and the latest check, and gives a bound, not a
    forecast: "at most 5:20 more", the sooner of the steps left and the time limit."""

    def __init__(self, task: str, steps: int, target: float, check_every: int,
                 max_seconds: float, enabled: bool) -> None:
        from tqdm import tqdm

        self.format_interval = tqdm.format_interval
        self.started = time.perf_counter()
        self.total, self.target, self.max_seconds, self.enabled = (steps, target, max_seconds,
                                                                   enabled)
        self.what = "2-digit pass rate" if task == "arithmetic" else "pass rate"
        self.steps = tqdm(range(steps), disable=not enabled, file=sys.stderr,
                          desc=f"warm start until the {self.what} reaches {target:.2f}"
                          if target > 0 else "warm start",
                          bar_format="{desc}: step {n_fmt} of at most {total_fmt} "
                                     "[{elapsed}{postfix}]")
        self.latest = (f"{self.what} not checked yet (every {check_every} steps)"
                       if target > 0 else "")

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def show(self, done: int, loss: float) -> None:
        elapsed = self.elapsed()
        left = min(elapsed / done * (self.total - done), max(self.max_seconds - elapsed, 0.0))
        self.steps.set_postfix_str(", ".join(
            p for p in (f"loss {loss:.3f}", self.latest,
                        f"at most {self.format_interval(left)} more") if p))

    def checked(self, rate: float) -> None:
        self.latest = f"{self.what} {rate:.2f} -> target {self.target:.2f}"

    def reached(self, loss: float, rate: float) -> None:
        self.steps.set_postfix_str(f"loss {loss:.3f}, {self.what} {rate:.2f}: target "
                                   f"{self.target:.2f} reached")

    def close(self, done: int, stop_reason: str) -> None:
        self.steps.close()
        if self.enabled:
            from trainer.formatting import count

            print(f"warm start stopped after {count(done, 'step')}: {stop_reason}",
                  file=sys.stderr)


def _mean_pass_rate(model: Any, tokenizer: Any, prompts: Sequence[Any], samples: int,
                    seed: int, max_new_tokens: int = 8) -> float:
    from trainer.backends.hf import HFBackend
    from trainer.verifiers import exact_verifier, score_responses

    backend = HFBackend(model, tokenizer, temperature=1.0, max_new_tokens=max_new_tokens,
                        record_logprobs=False)
    total = 0.0
    for prompt, group in zip(prompts, backend.generate(prompts, [samples] * len(prompts),
                                                       seed=seed), strict=True):
        rewards, _ = score_responses(exact_verifier, [g.text for g in group], prompt.answer)
        total += sum(rewards) / len(rewards)
    return total / len(prompts)


def pass_rate_report(model: Any, tokenizer: Any, n_prompts: int = 64, samples: int = 32,
                     seed: int = 0, digits: Sequence[int] = (2, 3), progress: bool = False
                     ) -> dict[str, Any]:
    """Per-prompt pass rates at temperature 1 on held-out prompts whose larger operand has each
    of ``digits`` digits: mean, never / always solved, and a 10-bin histogram."""
    from trainer.backends.hf import HFBackend
    from trainer.data import BUILTIN_TRAIN_SEED
    from trainer.tasks import arithmetic_prompts
    from trainer.verifiers import exact_verifier, score_responses

    # Held out from the RL training set that builtin:arithmetic uses (default size).
    train = {p.text for p in arithmetic_prompts(2048, 1, 3, seed=BUILTIN_TRAIN_SEED)}
    backend = HFBackend(model, tokenizer, temperature=1.0, max_new_tokens=8,
                        record_logprobs=False)
    result: dict[str, Any] = {"samples_per_prompt": samples, "temperature": 1.0}
    for d in digits:
        prompts = arithmetic_prompts(n_prompts, seed=1000 + d, exact_digits=d, exclude=train)
        gens = backend.generate(prompts, [samples] * len(prompts), seed=seed)
        rates = []
        for prompt, group in zip(prompts, gens, strict=True):
            rewards, _ = score_responses(exact_verifier, [g.text for g in group], prompt.answer)
            rates.append(sum(rewards) / len(rewards))
        result[f"{d}_digit"] = summarize_pass_rates(rates)
        if progress:
            s = result[f"{d}_digit"]
            print(f"{d}-digit prompts: mean pass rate {s['mean']:.2f}, never solved "
                  f"{s['never']}/{s['prompts']}, always solved {s['always']}/{s['prompts']}, "
                  f"histogram {s['histogram']}", file=sys.stderr)
    return result


def long_pass_rate_report(model: Any, tokenizer: Any, n_prompts: int = 64, samples: int = 32,
                          seed: int = 0, operands: Sequence[int] = (2, 4, 6, 8),
                          progress: bool = False) -> dict[str, Any]:
    """The long variant's report: per-prompt pass rates at temperature 1 on held-out
    ``builtin:arithmetic-long`` prompts (1-3 digit operands) with each of ``operands`` operands,
    and the mean response length in tokens (what the schedulers' benchmark needs to vary)."""
    from trainer.backends.hf import HFBackend
    from trainer.data import BUILTIN_TRAIN_SEED
    from trainer.tasks import arithmetic_long_prompts
    from trainer.verifiers import exact_verifier, score_responses

    train = {p.text for p in arithmetic_long_prompts(2048, 1, 3, seed=BUILTIN_TRAIN_SEED)}
    backend = HFBackend(model, tokenizer, temperature=1.0,
                        max_new_tokens=_CHECK_TOKENS["arithmetic-long"], record_logprobs=False)
    result: dict[str, Any] = {"samples_per_prompt": samples, "temperature": 1.0}
    for k in operands:
        prompts = arithmetic_long_prompts(n_prompts, 1, 3, seed=3000 + k, exclude=train,
                                          min_operands=k, max_operands=k)
        gens = backend.generate(prompts, [samples] * len(prompts), seed=seed)
        rates, lengths = [], []
        for prompt, group in zip(prompts, gens, strict=True):
            rewards, _ = score_responses(exact_verifier, [g.text for g in group], prompt.answer)
            rates.append(sum(rewards) / len(rewards))
            lengths += [len(g.response_token_ids) for g in group]
        summary = summarize_pass_rates(rates)
        summary["mean_response_tokens"] = round(sum(lengths) / len(lengths), 2)
        result[f"{k}_operands"] = summary
        if progress:
            print(f"{k} operands: mean pass rate {summary['mean']:.2f}, never solved "
                  f"{summary['never']}/{summary['prompts']}, always solved "
                  f"{summary['always']}/{summary['prompts']}, histogram {summary['histogram']}, "
                  f"mean response {summary['mean_response_tokens']} tokens", file=sys.stderr)
    return result


def summarize_pass_rates(rates: Sequence[float], bins: int = 10) -> dict[str, Any]:
    """Histogram over [0, 1] in ``bins`` equal bins (1.0 falls in the last), plus the counts at
    exactly 0 and 1: those prompts give GRPO zero gradient."""
    hist = [0] * bins
    for r in rates:
        hist[min(int(r * bins), bins - 1)] += 1
    n = len(rates)
    return {
        "prompts": n,
        "mean": round(sum(rates) / n, 4) if n else 0.0,
        "never": sum(1 for r in rates if r == 0.0),
        "always": sum(1 for r in rates if r == 1.0),
        "bin_edges": [round(i / bins, 2) for i in range(bins + 1)],
        "histogram": hist,
    }


def warmstart_atomic(out: Path, progress: bool = True, **kwargs: Any) -> Path:
    """Warm-start into ``out`` unless a checkpoint is there; safe against concurrent callers
    (workers starting together): one trains under a file lock, into a temporary directory that is
    renamed into place, so nobody ever loads a half-written checkpoint."""
    out = Path(out)
    with file_lock(out.parent / f".{out.name}.lock"):
        if (out / "config.json").is_file():
            return out
        tmp = out.parent / f".{out.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        warmstart(tmp, progress=progress, **kwargs)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    return out


def ensure_builtin_model(progress: bool = True) -> Path:
    """The built-in model's directory, warm-started first if it is missing (``make run``)."""
    from trainer.model import builtin_model_dir

    return warmstart_atomic(builtin_model_dir(), progress=progress)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None,
                        help="checkpoint directory (default: the built-in model directory, "
                             "$TRAINER_BUILTIN_MODEL_DIR or var/models/tiny; long variant: "
                             "tiny-long next to it)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"optimizer steps at most (default {DEFAULT_STEPS}; long variant "
                             f"{LONG_DEFAULTS['steps']})")
    parser.add_argument("--task", choices=TASKS, default="arithmetic",
                        help="the built-in task (builtin:arithmetic) or its long-answer variant "
                             "(builtin:arithmetic-long); default arithmetic")
    parser.add_argument("--init", default=None,
                        help="start from this checkpoint directory instead of random weights "
                             "(e.g. var/models/tiny for the long variant)")
    parser.add_argument("--target-pass-rate", type=float, default=None,
                        help="stop once the mean pass rate at temperature 1 on held-out prompts "
                             f"(2-digit sums; long variant: every length) reaches this (default "
                             f"{DEFAULT_TARGET}, long variant {DEFAULT_LONG_TARGET}; 0: run all "
                             "steps)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help=f"stop training after this long (default {DEFAULT_MAX_SECONDS:.0f}; "
                             f"long variant {LONG_DEFAULTS['max_seconds']:.0f})")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"problems per step (default {DEFAULT_BATCH_SIZE}; long variant "
                             f"{LONG_DEFAULTS['batch_size']})")
    parser.add_argument("--lr", type=float, default=DEFAULT_LR,
                        help="AdamW learning rate, constant after a short warm-up "
                             f"(default {DEFAULT_LR})")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--report-prompts", type=int, default=64,
                        help="held-out prompts per difficulty in the pass-rate report (0: skip)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: $TRAINER_NUM_THREADS or every core "
                             "the process may use)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite an existing checkpoint in --out")


def run_cli(args: argparse.Namespace) -> int:
    from trainer.model import builtin_model_dir

    # The long variant's model lives next to the built-in one, never in its place.
    default = builtin_model_dir()
    if args.task == "arithmetic-long":
        default = default.parent / LONG_MODEL_DIR_NAME
    out = Path(args.out) if args.out else default
    if (out / "config.json").is_file() and not args.force:
        print(f"{out} already holds a checkpoint; pass --force to overwrite it", file=sys.stderr)
        return 1
    base = {"steps": DEFAULT_STEPS, "batch_size": DEFAULT_BATCH_SIZE,
            "max_seconds": DEFAULT_MAX_SECONDS}
    for name, value in (LONG_DEFAULTS if args.task == "arithmetic-long" else base).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.target_pass_rate is None:
        args.target_pass_rate = DEFAULT_TARGET if args.task == "arithmetic" else DEFAULT_LONG_TARGET
    if args.init is not None and not (Path(args.init) / "config.json").is_file():
        print(f"--init: {args.init} holds no checkpoint (no config.json)", file=sys.stderr)
        return 2
    if args.steps < 1 or args.batch_size < 1 or not 0 < args.lr < 1 \
            or not 0 <= args.target_pass_rate <= 1:
        print("--steps and --batch-size must be >= 1, --lr within (0, 1) and "
              "--target-pass-rate within [0, 1]", file=sys.stderr)
        return 2
    if args.force and out.exists():
        shutil.rmtree(out)
    warmstart_atomic(out, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                     seed=args.seed, report_prompts=args.report_prompts,
                     target_pass_rate=args.target_pass_rate, max_seconds=args.max_seconds,
                     threads=args.threads, task=args.task, init=args.init)
    report = json.loads((out / REPORT_NAME).read_text())
    print(json.dumps(report, indent=2))
    print(f"checkpoint written to {out}", file=sys.stderr)
    return 0
