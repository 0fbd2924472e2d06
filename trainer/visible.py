"""One rule for every user-visible line of text (run, sweep, prompt set and token names, the
model, prompt file paths): it must read as what it is. Refused, naming the character:

- control characters (Unicode category Cc: C0 such as newline, CR, BEL, ESC and so every ESC
  sequence, DEL, C1 such as U+009B, the one-byte CSI), and line or paragraph separators;
- bidirectional controls (embeddings, overrides, isolates and the marks: "invoice\\u202egnp.exe"
  displays as "invoiceexe.png");
- other invisible format characters (category Cf: a zero-width space, a BOM, a soft hyphen),
  except the zero-width joiner and non-joiner that scripts and emoji need;
- text with no visible character at all (spaces, fillers, joiners, combining marks only).

Look-alike names (a Cyrillic "а" for a Latin "a", a no-break space for a space) pass this rule:
each is visible. Where names must be told apart (prompt sets), ``trainer.lookalike`` compares
their skeletons. Standard library only: the web process and the CLI both import it.
"""

from __future__ import annotations

import unicodedata

from trainer.jsonsafe import text_problem

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")
# Format characters that writing needs: Persian, Indic scripts and emoji sequences.
JOINERS = frozenset("\u200c\u200d")
# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties) outside Cf and Cc, and blank
# glyphs: characters that draw nothing, so text of them alone shows as empty.
_BLANK_RANGES = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
                 (0x2800, 0x2800), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0),
                 (0xE0100, 0xE01EF))
NAMES = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x1b": "escape",
         "\x07": "bell", "\x7f": "delete", "\x00": "NUL"}


def _blank(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _BLANK_RANGES)


def char_name(ch: str) -> str:
    """``U+000A (line feed)``: how an error names a character."""
    name = NAMES.get(ch) or unicodedata.name(ch, "").lower()
    return f"U+{ord(ch):04X}" + (f" ({name})" if name else "")


def visible_problem(text: str) -> str | None:
    """Why ``text`` does not read as what it is (None: it does)."""
    problem = text_problem(text)
    if problem:
        return problem
    visible = False
    for ch in text:
        category = unicodedata.category(ch)
        if ch in BIDI_CONTROLS:
            return (f"contains the bidirectional control {char_name(ch)}, which makes text "
                    "display otherwise than it is written")
        if category == "Cc" or category in ("Zl", "Zp"):
            return (f"contains the control character {char_name(ch)}; text here is one line "
                    "of visible characters")
        if category == "Cf" and ch not in JOINERS:
            return (f"contains the invisible character {char_name(ch)}, which would make it "
                    "look like another text")
        if not visible and category[0] in "LNPS" and not _blank(ch):
            visible = True
    if text and not visible:
        return "has no visible character (only spaces, fillers, joiners or combining marks)"
    return None
