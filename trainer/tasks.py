"""The built-in task: ``a+b=`` with the sum's digits written least significant first.

Reversed answers let a left-to-right model produce each digit from the two operand digits and a
carry it has just seen, which a tiny model learns in minutes (forward order learns much slower).
Difficulty is the operands' digit count: after the warm start 1-2 digit sums are mostly solved
and 3-digit sums rarely, which puts many prompts at pass rates near 0 and 1, where GRPO's groups
collapse and Reinforce-Ada helps.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from trainer.types import Prompt

# How the built-in task's answers are written, for pages that show them.
ANSWER_FORMAT = "the sum's digits reversed (least significant first)"


def reversed_sum(a: int, b: int) -> str:
    """The answer the model must write: ``a + b``, digits reversed (``57+68`` -> ``521``)."""
    return str(a + b)[::-1]


def format_prompt(a: int, b: int) -> str:
    return f"{a}+{b}="


def carries(a: int, b: int) -> int:
    """Column carries of ``a + b``: a finer difficulty measure than digit counts."""
    count = carry = 0
    while a or b:
        carry = 1 if (a % 10 + b % 10 + carry) >= 10 else 0
        count += carry
        a, b = a // 10, b // 10
    return count


def _operand(rng: random.Random, digits: int) -> int:
    # Uniform over numbers with exactly `digits` digits (one digit includes 0).
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def sample_operands(rng: random.Random, min_digits: int, max_digits: int) -> tuple[int, int]:
    """Digit counts uniform in [min_digits, max_digits] per operand, then uniform values: without
    the first step almost every operand would have ``max_digits`` digits."""
    a = _operand(rng, rng.randint(min_digits, max_digits))
    b = _operand(rng, rng.randint(min_digits, max_digits))
    return a, b


def arithmetic_prompts(n: int, min_digits: int = 1, max_digits: int = 3, seed: int = 0,
                       exclude: Collection[str] = (), exact_digits: int | None = None
                       ) -> list[Prompt]:
    """``n`` distinct addition prompts. ``exact_digits`` fixes the larger operand's digit count
    (for per-difficulty evaluation); ``exclude`` holds prompt texts to avoid, so that a held-out
    set is disjoint from the training set. Ids are content-based (``arith-12+345``): the same
    problem has the same id in every set and run.
    """
    if not 1 <= min_digits <= max_digits <= 9:
        raise ValueError("need 1 <= min_digits <= max_digits <= 9")
    lo, hi = (exact_digits, exact_digits) if exact_digits else (min_digits, max_digits)
    capacity = _capacity(min_digits if not exact_digits else 1, hi, exact_digits)
    if n > capacity - len(exclude):
        raise ValueError(f"cannot draw {n} distinct prompts with {lo}-{hi} digit operands")
    rng = random.Random(seed)
    excluded = set(exclude)
    seen: set[str] = set()
    out: list[Prompt] = []
    while len(out) < n:
        if exact_digits:
            # One operand has exactly `exact_digits` digits, the other at most as many.
            a = _operand(rng, exact_digits)
            b = _operand(rng, rng.randint(1, exact_digits))
            if rng.random() < 0.5:
                a, b = b, a
        else:
            a, b = sample_operands(rng, min_digits, max_digits)
        text = format_prompt(a, b)
        if text in seen or text in excluded:
            continue
        seen.add(text)
        out.append(Prompt(
            id=f"arith-{a}+{b}", text=text, answer=reversed_sum(a, b),
            metadata={"task": "arithmetic", "digits": max(len(str(a)), len(str(b))),
                      "carries": carries(a, b)},
        ))
    return out


def _capacity(min_digits: int, max_digits: int, exact: int | None) -> int:
    per = 10**max_digits - (10 ** (min_digits - 1) if min_digits > 1 else 0)
    if exact:
        # Pairs whose larger operand has exactly `exact` digits.
        below = 10 ** (exact - 1) if exact > 1 else 0
        return per * per - below * below
    return per * per
