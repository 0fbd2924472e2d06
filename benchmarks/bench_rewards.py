"""Scoring cost per response of a run's reward: the verifier alone against combined rewards
(``TrainConfig.rewards``: each component called under ``verifier_timeout_seconds``' timer).

    python benchmarks/bench_rewards.py [--seconds 1.0]

One prompt's 16 responses scored again and again for ``--seconds`` per setting, in this process
(its main thread: the timer is an interval timer and a signal handler per call), with the two
shipped examples registered. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["RADA_REWARDS"] = ("trainer.reward_examples.gsm8k,"
                              "format=trainer.reward_examples.think_format:format_reward")

from trainer.config import TrainConfig  # noqa: E402
from trainer.loop import make_scorer  # noqa: E402
from trainer.rewards import score_and_shape  # noqa: E402
from trainer.types import Generation, Prompt  # noqa: E402

SETTINGS = ("", "verifier", "verifier:1 format:0.1", "gsm8k:1 format:0.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    prompt = Prompt("p", "q", "42")
    gens = [Generation("p", f"<think>6 x 7</think>\n#### {i}", [], [1, 2, 3])
            for i in range(16)]
    print("| rewards | us per response |\n| --- | --- |")
    for rewards in SETTINGS:
        scorer = make_scorer(TrainConfig(verifier="exact", rewards=rewards))
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            score_and_shape(scorer, prompt, gens)
            n += len(gens)
        per = (time.perf_counter() - t0) / n * 1e6
        print(f"| `{rewards}` | {per:.1f} |" if rewards else f"| (verifier alone) | {per:.1f} |")


if __name__ == "__main__":
    main()
