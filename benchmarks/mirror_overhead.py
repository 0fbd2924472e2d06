"""Tracker mirroring's overhead (trainer.mirror): a training step's time with and without each
tracker, on the built-in tiny model, measured in one run, interleaved.

    python benchmarks/mirror_overhead.py [--model builtin:tiny] [--rounds 4] [--batch-size 16]

One training run (hf backend, CPU) opens every target at once: mlflow (a folder), wandb
(offline, a folder), tensorboard (a folder), and two unavailable ones: an MLflow server that
refuses connections and a TensorBoard folder that cannot be created (a path under a file).
Step k's records go to one target only, in turn (``none`` first in each round), so each arm
sees the same model, the same load of the machine and the same stretch of training; the target
that got step k's records delivers them in its thread while step k+1 runs, so step k+1's time
is what that target costs the loop (its GIL share), and the recorder call that hands it over
is timed on its own (``hand-over``), and so is the CPU time each delivery takes in the
tracker's thread (``time.thread_time``: what the thread can take from the loop, whatever else
loads the machine). One warm-up round is not counted. Prints a markdown table: per arm, steps,
mean step time, the difference to ``none`` with a 95% interval (Welch), the mean hand-over, the
tracker thread's CPU per step, their sum as a share of a ``none`` step, and what the tracker
lost.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def arms(folder: Path) -> dict[str, str]:
    blocker = folder / "a-file"
    blocker.write_text("not a folder")
    return {"none": "", "mlflow": f"mlflow:{folder / 'mlruns'}",
            "wandb": f"wandb:{folder / 'wandb'}", "tensorboard": f"tensorboard:{folder / 'tb'}",
            "mlflow, server down": "mlflow:http://127.0.0.1:9",
            "tensorboard, folder unavailable": f"tensorboard:{blocker / 'tb'}"}


class Interleaved:
    """Hands step k's records to one arm's target only (``order[k % len(order)]``), timing the
    hand-over, and remembers which arm delivers during each step."""

    def __init__(self, mirror: Any, channels: dict[str, Any], order: list[str]) -> None:
        self.mirror, self.channels, self.order = mirror, channels, order
        self.arm_of_step: dict[int, str] = {}
        self.handover: dict[str, list[float]] = {arm: [] for arm in order}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.mirror, name)

    def on_step(self, record: Any) -> None:
        arm = self.order[(record.step - 1) % len(self.order)]
        self.arm_of_step[record.step + 1] = arm  # it delivers while the next step runs
        self.mirror.channels = [self.channels[arm]] if arm != "none" else []
        start = time.perf_counter()
        self.mirror.on_step(record)
        self.handover[arm].append(time.perf_counter() - start)


def timed_deliveries(channel: Any, spent: list[float]) -> None:
    """Wrap the channel's target so each delivery's CPU time in the tracker's thread
    (``time.thread_time``: what the thread can take from the training loop's share of the
    GIL and the cores, whatever the machine's load) is appended to ``spent``: the ``log``
    call, and before it the ``open`` a tracker that could not be opened tries again."""
    log, open_ = channel.target.log, channel.target.open
    opening = [0.0]

    def measured_open(*args: Any) -> Any:
        start = time.thread_time()
        try:
            return open_(*args)
        finally:
            opening[0] += time.thread_time() - start

    def measured(step: int, metrics: Any) -> None:
        start = time.thread_time()
        try:
            log(step, metrics)
        finally:
            spent.append(time.thread_time() - start + opening[0])
            opening[0] = 0.0

    def failed_open(*args: Any) -> Any:
        try:
            return measured_open(*args)
        except Exception:
            spent.append(opening[0])  # the event's delivery ended here
            opening[0] = 0.0
            raise

    channel.target.open = failed_open
    channel.target.log = measured


def children_cpu() -> float:
    """CPU seconds of this process's child processes so far (W&B's wandb-core service, which
    writes its offline files: its work is in no thread of ours)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of a - mean of b and the half-width of its 95% interval (normal approximation)."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return diff, 1.96 * se


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:tiny")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of one step per arm, after one warm-up round")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from trainer.backends import make_backend
    from trainer.config import TrainConfig
    from trainer.data import resolve_prompts
    from trainer.loop import train
    from trainer.mirror import mirrored
    from trainer.recorders import ListRecorder

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        targets = arms(folder)
        order = list(targets)
        steps = len(order) * (args.rounds + 1)
        config = TrainConfig(algorithm="grpo", model=args.model, backend="hf", device="cpu",
                             batch_size=args.batch_size, total_steps=steps, lr=2e-4,
                             save_every=0, eval_every=0, seed=args.seed).validate()
        prompts, _ = resolve_prompts(config)
        backend = make_backend(config, prompts)
        records = ListRecorder()
        spec = ", ".join(t for t in targets.values() if t)
        try:
            with mirrored(spec, records, folder / "out", name="bench",
                          params=config.to_dict(), stall_seconds=2.0) as mirror:
                channels = {arm: next(c for c in mirror.channels if str(c.spec) == t)
                            for arm, t in targets.items() if t}
                every = list(mirror.channels)
                cpu: dict[str, list[float]] = {arm: [] for arm in channels}
                for arm, channel in channels.items():
                    timed_deliveries(channel, cpu[arm])
                router = Interleaved(mirror, channels, order)
                service = children_cpu()
                train(config, prompts, backend, router, out_dir=folder / "out")
                service = children_cpu() - service
                mirror.channels = every
        finally:
            backend.close()
        state = {s["target"]: s for s in mirror.state()}

    counted = [r for r in records.steps if r.step > len(order) + 1]  # after the warm-up round
    times: dict[str, list[float]] = {arm: [] for arm in order}
    for r in counted:
        times[router.arm_of_step[r.step]].append(float(r.metrics["time_step"]))
    base = statistics.fmean(times["none"])
    print(f"Tiny model, hf backend on CPU, grpo, batch {args.batch_size}: "
          f"{len(counted)} steps counted ({args.rounds} rounds x {len(order)} arms, "
          "interleaved in one run).\n")
    print("| arm | steps | step time (s) | vs none (s, 95% CI) | hand-over (ms) "
          "| tracker thread CPU per step (ms) | hand-over + CPU, share of a step | lost |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arm in order:
        mean = statistics.fmean(times[arm])
        handover = statistics.fmean(router.handover[arm])
        if arm == "none":
            diff_text, spent_text, share, lost = "–", "–", "–", "–"
        else:
            diff, half = welch(times[arm], times["none"])
            diff_text = f"{diff:+.3f} ± {half:.3f}"
            # Deliveries that raised count too (a refused connection's CPU); the first is the
            # warm-up round's (W&B's first log sets its run up: a second or more).
            spent = statistics.fmean(cpu[arm][1:]) if cpu[arm][1:] else 0.0
            spent_text = f"{1000 * spent:.2f}"
            share = f"{100 * (handover + spent) / base:.2f}%"
            lost = state[targets[arm]]["lost"]
        print(f"| {arm} | {len(times[arm])} | {mean:.3f} | {diff_text} | {1000 * handover:.3f} "
              f"| {spent_text} | {share} | {lost} |")
    print(f"\nW&B's service process (wandb-core) used {service:.2f} s of CPU over the whole run "
          f"({1000 * service / max(len(times['wandb']), 1):.1f} ms per wandb step if all of it "
          "were theirs: it also idles, polls and starts); another process, so on more than "
          "one core it takes no GIL from the loop.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
