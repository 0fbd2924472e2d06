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


# --- the long-answer variant (``builtin:arithmetic-long``) ---------------------------------------
# The built-in answers are 1-4 digits: a round's responses all finish within a few engine steps of
# each other, too short to show the round barrier of adaptive sampling (docs/schedulers.md). This
# variant chains k operands, k drawn per prompt, and asks for every running sum, so an answer's
# length grows with k: a few tokens for k = 2 (where it is the built-in task itself) to about 35
# for k = 8 three-digit operands. Sums are separated by a space: the character tokenizer has no
# comma, and a new character would change the vocabulary of every saved checkpoint.
LONG_ANSWER_FORMAT = ("the running sums after each '+', each with its digits reversed, separated "
                      "by spaces")
LONG_MIN_OPERANDS = 2
LONG_MAX_OPERANDS = 8
# Operands of at most 4 digits: 8 of them, their 7 sums and the separators stay within the tiny
# model's 128 positions (a 5-digit k = 8 problem needs 48 + 1 + 48 + 1 = 98, 4 digits 86; the cap
# leaves room for a wrong answer that runs on).
LONG_MAX_DIGITS = 4


def running_sums_answer(operands: list[int]) -> str:
    """The long variant's answer: ``12+345+6=`` -> ``753 363`` (357 and 363, digits reversed)."""
    sums, total = [], operands[0]
    for x in operands[1:]:
        total += x
        sums.append(str(total)[::-1])
    return " ".join(sums)


def format_long_prompt(operands: list[int]) -> str:
    return "+".join(str(x) for x in operands) + "="


def sample_long_operands(rng: random.Random, min_digits: int, max_digits: int,
                         min_operands: int = LONG_MIN_OPERANDS,
                         max_operands: int = LONG_MAX_OPERANDS) -> list[int]:
    """k uniform in [min_operands, max_operands], then each operand as ``sample_operands`` draws
    one (digit count uniform, then the value)."""
    k = rng.randint(min_operands, max_operands)
    return [_operand(rng, rng.randint(min_digits, max_digits)) for _ in range(k)]


def arithmetic_long_prompts(n: int, min_digits: int = 1, max_digits: int = 3, seed: int = 0,
                            exclude: Collection[str] = (), min_operands: int = LONG_MIN_OPERANDS,
                            max_operands: int = LONG_MAX_OPERANDS) -> list[Prompt]:
    """``n`` distinct long-answer prompts (``a+b+...=``, answer ``running_sums_answer``), the
    same for the same arguments. ``exclude`` holds prompt texts to avoid (held-out sets)."""
    if not 1 <= min_digits <= max_digits <= LONG_MAX_DIGITS:
        raise ValueError(f"need 1 <= min_digits <= max_digits <= {LONG_MAX_DIGITS} for the "
                         "long-answer task")
    if not 2 <= min_operands <= max_operands <= LONG_MAX_OPERANDS:
        raise ValueError(f"need 2 <= min_operands <= max_operands <= {LONG_MAX_OPERANDS}")
    per = 10**max_digits - (10 ** (min_digits - 1) if min_digits > 1 else 0)
    capacity = sum(per**k for k in range(min_operands, max_operands + 1))
    if n > capacity - len(exclude):
        raise ValueError(f"cannot draw {n} distinct prompts with {min_operands}-{max_operands} "
                         f"operands of {min_digits}-{max_digits} digits")
    rng = random.Random(seed)
    excluded = set(exclude)
    seen: set[str] = set()
    out: list[Prompt] = []
    while len(out) < n:
        operands = sample_long_operands(rng, min_digits, max_digits, min_operands, max_operands)
        text = format_long_prompt(operands)
        if text in seen or text in excluded:
            continue
        seen.add(text)
        answer = running_sums_answer(operands)
        out.append(Prompt(
            id=f"arithl-{text[:-1]}", text=text, answer=answer,
            metadata={"task": "arithmetic-long", "operands": len(operands),
                      "digits": max(len(str(x)) for x in operands),
                      "answer_chars": len(answer)},
        ))
    return out
