"""Numbers in words, one way everywhere: the trainer's error messages, the dashboard's pages and
charts, the API's errors. Integers carry thousands separators ("26,688"); a count names its unit
in the right number ("1 prompt", "2,048 prompts").

Light: the web process imports it.
"""

from __future__ import annotations

# Nouns whose plural is not the noun + "s".
IRREGULAR = {"batch": "batches", "entry": "entries", "this": "these"}


def number(x: float | int) -> str:
    """An integer with thousands separators ("32,768"); a float as short as it reads exactly
    ("0.5", "1e-06", "2,048" for 2048.0)."""
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}"


def plural(noun: str, n: float | int) -> str:
    """``noun`` in the number ``n`` calls for ("prompt", "prompts")."""
    if n == 1:
        return noun
    if noun in IRREGULAR:
        return IRREGULAR[noun]
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def count(n: float | int, noun: str) -> str:
    """ "1 prompt", "2,048 prompts", "0 runs"."""
    return f"{number(n)} {plural(noun, n)}"
