"""Evaluation on held-out prompts: greedy accuracy, avg@k and pass@k.

``avg@k`` is the mean reward of k samples per prompt (the expected single-sample accuracy at the
sampling temperature); ``pass@k`` the fraction of prompts with at least one correct sample among
k. With exactly k samples drawn, the unbiased estimator ``1 - C(n-c, k)/C(n, k)`` (Chen et al.,
2021) reduces to that indicator.

The same k samples also give the curves of the paper's Fig. 2 for every j <= k, from the unbiased
estimators over the n = k drawn: ``pass@j`` and ``all_correct@j = C(c, j)/C(n, j)``, the
probability that j responses are all correct (the prompt gives GRPO with group size j no signal
from positives alone).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from trainer.types import GenerationBackend, Prompt, StopRequested
from trainer.verifiers import Verifier, score_responses


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct."""
    if n < k:
        raise ValueError(f"need at least k={k} samples, got {n}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def all_correct_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that ``k`` of ``n`` samples (``c`` correct) are all correct:
    ``C(c, k) / C(n, k)``."""
    if n < k:
        raise ValueError(f"need at least k={k} samples, got {n}")
    return math.comb(c, k) / math.comb(n, k)


def evaluate(backend: GenerationBackend, prompts: Sequence[Prompt], verifier: Verifier,
             k: int = 8, seed: int = 0, batch_prompts: int = 64, progress: bool = False,
             should_stop: Callable[[], bool] | None = None, positive_threshold: float = 0.5
             ) -> dict[str, Any]:
    """Greedy accuracy (one deterministic response per prompt) and avg@k / pass@k from ``k``
    samples per prompt at the backend's temperature, with ``pass@j`` and ``all_correct@j`` for
    every j <= k from the same samples. Prompts go in chunks of ``batch_prompts`` to bound memory
    and drive the progress bar. ``should_stop`` is polled before each generation call: when it
    says stop, ``StopRequested`` is raised (evaluation changes no weights: always clean). A
    response is correct when its reward exceeds ``positive_threshold``, the run's own (what the
    sampler calls positive), so training and evaluation count the same responses right."""
    from tqdm import tqdm

    if k < 1:
        raise ValueError("k must be >= 1")
    greedy_correct = 0.0
    avg_sum = 0.0
    pass_sums = [0.0] * (k + 1)  # index j: pass@j summed over prompts
    all_correct_sums = [0.0] * (k + 1)
    errors = 0
    bar = tqdm(total=len(prompts), desc="eval", unit="prompt", disable=not progress,
               file=sys.stderr)
    for start in range(0, len(prompts), batch_prompts):
        chunk = list(prompts[start:start + batch_prompts])
        _check_stop(should_stop)
        greedy = backend.generate(chunk, [1] * len(chunk), seed=seed, greedy=True)
        _check_stop(should_stop)
        sampled = backend.generate(chunk, [k] * len(chunk), seed=seed + start)
        for prompt, g_group, s_group in zip(chunk, greedy, sampled, strict=True):
            g_rewards, g_errors = score_responses(verifier, [g.text for g in g_group],
                                                  prompt.answer)
            rewards, s_errors = score_responses(verifier, [g.text for g in s_group],
                                                prompt.answer)
            errors += sum(e is not None for e in g_errors + s_errors)
            greedy_correct += g_rewards[0] > positive_threshold
            avg_sum += sum(rewards) / k
            correct = sum(r > positive_threshold for r in rewards)
            for j in range(1, k + 1):
                pass_sums[j] += pass_at_k(k, correct, j)
                all_correct_sums[j] += all_correct_at_k(k, correct, j)
        bar.update(len(chunk))
    bar.close()
    n = max(len(prompts), 1)
    return {
        "prompts": len(prompts),
        "k": k,
        "greedy_accuracy": greedy_correct / n,
        f"avg@{k}": avg_sum / n,
        **{f"pass@{j}": pass_sums[j] / n for j in range(1, k + 1)},
        **{f"all_correct@{j}": all_correct_sums[j] / n for j in range(1, k + 1)},
        "verifier_errors": errors,
    }


def _check_stop(should_stop: Callable[[], bool] | None) -> None:
    if should_stop is not None and should_stop():
        raise StopRequested("evaluation", clean=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="builtin:tiny",
                        help="builtin:tiny or a local Hugging Face model directory")
    parser.add_argument("--prompts", default="builtin:arithmetic",
                        help="a JSONL/Parquet prompt file, or builtin:arithmetic / "
                             "builtin:arithmetic-long (its held-out eval set)")
    parser.add_argument("--num-prompts", type=int, default=200,
                        help="built-in task: held-out prompts (default 200)")
    parser.add_argument("-k", "--k", type=int, default=8,
                        help="samples per prompt for avg@k and pass@k (default 8)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--verifier", default="auto", choices=("auto", "exact", "math"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--seed", type=int, default=0)


def run_cli(args: argparse.Namespace) -> int:
    """Print the metrics as one JSON object on stdout."""
    # trainer.model before torch (hf imports it): it sets OMP_WAIT_POLICY, read when torch loads.
    from trainer.model import ModelNotFoundError, load_policy  # isort: skip
    from trainer.backends.hf import HFBackend
    from trainer.config import BUILTIN_TASKS, ConfigError, TrainConfig
    from trainer.data import DataError, resolve_prompts
    from trainer.verifiers import make_verifier

    try:
        config = TrainConfig(model=args.model, device=args.device, temperature=args.temperature,
                             top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                             verifier=args.verifier, eval_k=args.k, seed=args.seed,
                             eval_num_prompts=args.num_prompts, prompts=args.prompts,
                             eval_prompts=args.prompts if args.prompts not in BUILTIN_TASKS else "")
        config.validate()
        _, prompts = resolve_prompts(config)
        model, tokenizer = load_policy(config)
    except (ConfigError, DataError, ModelNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    backend = HFBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p,
                        max_new_tokens=config.max_new_tokens, record_logprobs=False)
    metrics = evaluate(backend, prompts, make_verifier(config), k=args.k, seed=args.seed,
                       progress=True, positive_threshold=config.positive_threshold)
    print(json.dumps(metrics))
    return 0
