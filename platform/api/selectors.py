"""Reads of the API: a run's records as rows, and keyset ("cursor") pages over the two large
tables. A page walks the table's unique index from where the last page ended, so page 1,000 of
a 10M-sample run costs what page 1 costs (an OFFSET would scan every row before it)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from experiments.models import EvalResult, PromptStep, RoundStat, Run, Sample, Step
from experiments.services import LaunchError

PROMPT_STEP_FIELDS = ("step", "prompt_id", "samples", "positives", "negatives", "rounds",
                      "exit_round", "missing", "kept_positives", "kept_negatives", "baseline",
                      "tokens", "p_hat", "allocated")
SAMPLE_FIELDS = ("step", "prompt_id", "index", "round", "response", "tokens", "reward", "kept",
                 "advantage", "verifier_error", "weight", "policy_version",
                 "reward_components")
STEP_FIELDS = ("step", "real_reward", "kept_reward", "samples", "tokens", "wall_seconds",
               "metrics")
ROUND_FIELDS = ("step", "round", "active_prompts", "samples", "positives", "finished", "tokens")


def encode_cursor(*key: int) -> str:
    return base64.urlsafe_b64encode(".".join(map(str, key)).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, parts: int) -> tuple[int, ...]:
    """The key a cursor holds; a cursor this API did not hand out is a ``LaunchError`` on
    ``cursor``."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        key = tuple(int(p) for p in text.split("."))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        key = ()
    if len(key) != parts or any(k < 0 or k >= 2**63 for k in key):
        raise LaunchError("cursor", "not a cursor from this API (pass next_cursor as given)")
    return key


def step_rows(run: Run) -> list[dict[str, Any]]:
    return list(Step.objects.filter(run=run).order_by("step").values(*STEP_FIELDS))


def round_rows(run: Run, step: int | None = None) -> list[dict[str, Any]]:
    qs = RoundStat.objects.filter(run=run)
    if step is not None:
        qs = qs.filter(step=step)
    return list(qs.order_by("step", "round").values(*ROUND_FIELDS))


def eval_rows(run: Run) -> list[dict[str, Any]]:
    return list(EvalResult.objects.filter(run=run).order_by("step").values("step", "metrics"))


def prompt_step_page(run: Run, *, cursor: str | None, limit: int, step: int | None = None,
                     prompt: int | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """Prompt-steps in (step, prompt) order after ``cursor``; (rows, next cursor or None)."""
    qs = PromptStep.objects.filter(run=run)
    if step is not None:
        qs = qs.filter(step=step)
    if prompt is not None:
        qs = qs.filter(prompt_id=prompt)
    if cursor:
        after_step, after_prompt = decode_cursor(cursor, 2)
        qs = qs.filter(step__gte=after_step).exclude(step=after_step, prompt_id__lte=after_prompt)
    rows = list(qs.order_by("step", "prompt_id").values(*PROMPT_STEP_FIELDS)[:limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]["step"], rows[-1]["prompt_id"]) if more else None


def sample_page(run: Run, *, cursor: str | None, limit: int, step: int | None = None,
                prompt: int | None = None, kept: bool | None = None
                ) -> tuple[list[dict[str, Any]], str | None]:
    """Samples in primary-key order (step, prompt, index) after ``cursor``."""
    qs = Sample.objects.filter(run=run)
    if step is not None:
        qs = qs.filter(step=step)
    if prompt is not None:
        qs = qs.filter(prompt_id=prompt)
    if kept is not None:
        qs = qs.filter(kept=kept)
    if cursor:
        s, p, i = decode_cursor(cursor, 3)
        # Row comparison (step, prompt, index) > (s, p, i), spelt so the planner walks the key.
        qs = qs.filter(step__gte=s).exclude(step=s, prompt_id__lt=p).exclude(
            step=s, prompt_id=p, index__lte=i)
    rows = list(qs.order_by("step", "prompt_id", "index").values(*SAMPLE_FIELDS)[:limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows else None
    return rows, encode_cursor(last["step"], last["prompt_id"], last["index"]) if more else None
