"""Names that must be told apart: prompt sets are chosen by name from a drop-down, so two sets
whose names look alike are one choice shown twice. A name's ``name_key`` is the hash of its
confusable skeleton (Unicode TR39, section 4): NFKC (a no-break space is a space, a fullwidth
"ａ" an "a"), invisible characters dropped (a zero-width space adds nothing to the eye),
spaces collapsed, then every character replaced by the prototype of its confusable class (a
Cyrillic "а" is an "a", "1" and "I" are "l", "m" is "rn"). Two names with the same key are
the same name; ``PromptSet.name_key`` is unique.

The confusable classes are Unicode's (confusables.txt), as the ``confusable-homoglyphs``
package ships them (``confusables.json``: each prototype with the characters that look like
it, each such character with its prototype). Where the data pairs two single characters and
does not say which one is the prototype, both map to the smaller one: the classes stay
Unicode's, only their representative differs.

The platform's own prompt sets carry "(built-in)" in their names (``manage.py demo``); a
name whose skeleton holds "built-in", "builtin" or "built in" is reserved for sets the
platform makes (``reserved_name``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

from trainer.visible import BIDI_CONTROLS

# Drawn as nothing: dropped from the skeleton (Default_Ignorable_Code_Point, and the format
# characters the visible-text rule lets through: the joiners).
_IGNORABLE_RANGES = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
                     (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
                     (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
                     (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
# The data wraps right-to-left characters in LEFT-TO-RIGHT MARKs for display.
_MARKS = str.maketrans("", "", "\u200e\u200f")


def _ignorable(ch: str) -> bool:
    code = ord(ch)
    return ch in BIDI_CONTROLS or any(lo <= code <= hi for lo, hi in _IGNORABLE_RANGES)


@lru_cache(maxsize=1)
def prototypes() -> dict[str, str]:
    """Each confusable character -> the prototype of its class (a character or a sequence)."""
    from confusable_homoglyphs import utils

    data = utils.load("confusables.json")
    out: dict[str, str] = {}
    for key, entries in data.items():
        if len(key) != 1:
            continue  # a sequence ("rn") is a prototype, never a source
        targets = [e["c"].translate(_MARKS) for e in entries]
        if len(targets) != 1:
            continue  # a prototype: the characters listed look like it
        target = targets[0]
        back = [e["c"].translate(_MARKS) for e in data.get(target, [])]
        if len(target) == 1 and back == [key]:
            # A class of two single characters: either could be the prototype.
            target = min(key, target)
        if target != key:
            out[key] = target
    return out


def _map(text: str) -> str:
    table = prototypes()
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFD", "".join(table.get(ch, ch) for ch in decomposed))


def _cleaned(name: str) -> str:
    text = unicodedata.normalize("NFKC", name)
    return " ".join("".join(ch for ch in text if not _ignorable(ch)).split())


def skeleton(name: str) -> str:
    """The name as the eye reads it (not for display: a hodgepodge of scripts). Case is
    kept, as TR39 keeps it: "Arithmetic" and "arithmetic" read differently."""
    return _map(_cleaned(name))


def name_key(name: str) -> str:
    """What ``PromptSet.name_key`` holds: the skeleton's SHA-256 (a skeleton can be several
    times longer than its name; the hash fits an index)."""
    return hashlib.sha256(skeleton(name).encode("utf-8")).hexdigest()


@lru_cache(maxsize=1)
def _reserved_pattern() -> re.Pattern[str]:
    built, in_ = (re.escape(_map(w)) for w in ("built", "in"))
    return re.compile(rf"(?<![^\W_]){built}[\W_]*{in_}(?![^\W_])")


RESERVED_WORDS = "built-in"


def reserved_name(name: str) -> bool:
    """Whether ``name`` reads as one of the platform's own sets' ("... (built-in)"), in any
    spelling: "Built-In", "builtin", "bui1t‐in" with a Cyrillic "і"."""
    text = _cleaned(name)
    # Case folded before and after the mapping: a capital I is an l to the eye ("BUILT-IN").
    forms = (_map(text.casefold()), _map(_map(text).casefold()))
    return any(_reserved_pattern().search(form) for form in forms)
