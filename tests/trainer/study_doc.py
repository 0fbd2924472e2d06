"""docs/study-algorithms.md read as data: its tables (every "mean ± half-width" cell), its prose
split into sentences, and the rules its claims must keep (issue 34 item 2). The runs' raw
per-seed numbers are not kept in the repository (re-running the studies takes hours on the
shared machine), so the doc's own tables are the numbers its sentences are checked against.

The rules, per "## Study" section:

- traceable: every interval a sentence cites ("+0.104 ± 0.059") is a cell of one of the
  section's tables;
- consistent: a paired difference's mean is the difference of the two arms' means (within the
  rounding of three printed figures, 0.0015), and "samples A / B" the ratio of their samples;
  where a table prints every seed, the paired table computed from it is the printed one;
- a claim of a difference (a sentence with a word of ``DIFFERENCE``) cites a paired interval
  that excludes 0, or two intervals of the same column that do not overlap (then the paired
  one excludes 0 too: the paired half-width is at most the sum of the two);
- a sentence saying there is no difference (a phrase of ``NO_DIFFERENCE``) cites no paired
  interval that excludes 0;
- every headline interval (greedy accuracy, avg@k) that excludes 0 is cited in the section's
  prose;
- "N of the M headline intervals exclude zero" counts right.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "study-algorithms.md"

NUMBER = r"[+\-−]?\d*\.\d+|[+\-−]?\d+"
INTERVAL = re.compile(rf"({NUMBER})\s*±\s*(\d*\.\d+|\d+)")
# Words that claim a difference between arms (or against step 0).
DIFFERENCE = re.compile(r"\b(wins?|beats?|loses|better|worse|higher|lower|ahead|narrower|wider|"
                        r"narrows?|widens?|outperforms?|highest|lowest)\b", re.I)
# Phrases that say there is none.
NO_DIFFERENCE = re.compile(r"within noise|no win|no loss|no difference|not better|did not depend|"
                           r"do not separate|does not separate|contains? zero|the same as|"
                           r"changes? little|no such difference|about even", re.I)
# Sentences that state the standard itself, or ask: no claim to check.
DEFINITION = re.compile(r"a win needs|counts as a win|not called a win|one standard|\?\**$",
                        re.I)
HEADLINE = re.compile(r"^(greedy|avg@\d+)$")
# t(0.975, 2): the studies' three seeds.
T3 = 4.303


def number(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


@dataclass(frozen=True)
class Cell:
    mean: float
    half: float
    text: str

    @property
    def excludes_zero(self) -> bool:
        return abs(self.mean) > self.half

    def overlaps(self, other: Cell) -> bool:
        return abs(self.mean - other.mean) <= self.half + other.half


@dataclass
class Table:
    section: int
    subsection: str
    header: list[str]
    rows: list[list[str]]
    paired: bool = False

    def cells(self) -> list[tuple[str, str, Cell]]:
        """(row label, column, cell) of every interval cell."""
        out = []
        for row in self.rows:
            label = _label(self, row)
            for column, text in zip(self.header, row, strict=False):
                cell = parse_cell(text)
                if cell is not None:
                    out.append((label, column, cell))
        return out


@dataclass
class Section:
    index: int
    title: str
    tables: list[Table] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    # Every section of the page (this one included), for sentences that cite another study.
    page: list[Section] = field(default_factory=list, repr=False)

    def cells(self, paired: bool | None = None) -> list[tuple[Table, str, str, Cell]]:
        if not hasattr(self, "_cells"):
            self._cells = [(t, label, column, cell) for t in self.tables
                           for label, column, cell in t.cells()]
        return [(t, label, column, cell) for t, label, column, cell in self._cells
                if paired is None or _is_paired(t, label) == paired]


def parse_cell(text: str) -> Cell | None:
    m = re.fullmatch(rf"\**({NUMBER})\s*±\s*(\d*\.\d+|\d+)\**", text.strip())
    if m is None:
        return None
    return Cell(number(m.group(1)), number(m.group(2)), text.strip().strip("*"))


def _label(table: Table, row: list[str]) -> str:
    """A row's name: its first cell, with the regime where a table lists regimes in a column."""
    first = row[0].strip("* ")
    if table.header[0] == "regime" and len(row) > 1:
        return f"{first}: {row[1].strip('* ')}"
    return first


def _is_paired(table: Table, label: str) -> bool:
    return table.paired or " - " in label.split(": ")[-1]


def read(path: Path = DOC) -> list[Section]:
    """The doc's "## Study" sections, each with its tables and the sentences of its prose."""
    sections: list[Section] = []
    subsection = ""
    in_code = False
    block: list[str] = []
    lines = path.read_text().splitlines()

    def flush() -> None:
        if block and sections:
            sections[-1].sentences += split_sentences(" ".join(block))
        block.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            in_code = not in_code
        elif in_code:
            pass
        elif line.startswith("## "):
            flush()
            sections.append(Section(len(sections), line[3:]))
            subsection = ""
        elif line.startswith("### "):
            flush()
            subsection = line[4:]
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            header, body = rows[0], [r for r in rows[2:]]
            if sections:
                sections[-1].tables.append(Table(sections[-1].index, subsection, header, body,
                                                 paired=header[0] == "A - B"))
            continue
        elif not line.strip() or line.startswith("- ") or line.startswith("!["):
            flush()
            if line.startswith("- "):
                block.append(line[2:])
        else:
            block.append(line.strip())
        i += 1
    flush()
    for section in sections:
        section.page = sections
    return sections


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph or bullet: a full stop (or colon-free "?"/"!") followed by a
    space and a capital, a backtick, a parenthesis or a bold mark; not after "e.g." or "i.e."."""
    text = re.sub(r"\s+", " ", text).strip()
    parts = re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])(?:\*\*)?\s+(?=[A-Z0-9`(*])", text)
    return [p for p in parts if p]


def cited(sentence: str) -> list[tuple[str, str]]:
    """The intervals a sentence cites, as (mean text, half text)."""
    return INTERVAL.findall(sentence)


# A sentence that cites another study of the page says so ("the study below", "the Est study
# above"): its intervals are looked up in every section.
ELSEWHERE = re.compile(r"stud(y|ies) (below|above)", re.I)


def find(section: Section, mean: str, half: str, sentence: str = ""
         ) -> list[tuple[Table, str, str, Cell]]:
    """The section's cells printed as this interval (sign and the minus sign's glyph aside);
    for a sentence that names another study of the page, every section's."""
    m, h = number(mean), number(half)
    sections = [section]
    if ELSEWHERE.search(sentence):
        sections += [s for s in section.page if s.index != section.index]
    return [(t, label, column, cell) for sec in sections for t, label, column, cell in sec.cells()
            if math.isclose(cell.mean, m, abs_tol=1e-9) and math.isclose(cell.half, h,
                                                                          abs_tol=1e-9)]


def t_interval(values: list[float]) -> tuple[float, float]:
    """Mean and 95% t half-width of three values (the studies' seeds)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, T3 * sd / math.sqrt(n)


# --- the rules ---------------------------------------------------------------------------------

def untraceable(section: Section) -> list[str]:
    return [f"{mean} ± {half}: {s}" for s in section.sentences for mean, half in cited(s)
            if not find(section, mean, half, s)]


def _evidence(section: Section, sentence: str) -> tuple[bool, bool]:
    """(whether it cites a paired interval that excludes 0, or two same-column intervals that
    do not overlap; whether it cites a paired interval that excludes 0)."""
    paired_excluding = False
    unpaired: dict[str, list[Cell]] = {}
    for mean, half in cited(sentence):
        for t, label, column, cell in find(section, mean, half, sentence):
            if _is_paired(t, label):
                paired_excluding |= cell.excludes_zero
            else:
                unpaired.setdefault(column, []).append(cell)
    apart = any(not a.overlaps(b) for cells in unpaired.values() for a in cells for b in cells)
    return paired_excluding or apart, paired_excluding


def unsupported_differences(section: Section) -> list[str]:
    return [s for s in section.sentences if claims_difference(s) and not _evidence(section, s)[0]]


def claims_difference(sentence: str) -> bool:
    """A word of ``DIFFERENCE`` outside the phrases that deny one ("no win, no loss"), in a
    sentence that is not the standard's own definition. A sentence that both claims and denies
    is held to both rules."""
    return not DEFINITION.search(sentence) and \
        DIFFERENCE.search(NO_DIFFERENCE.sub(" ", sentence)) is not None


def no_difference_beside_a_difference(section: Section) -> list[str]:
    return [s for s in section.sentences if NO_DIFFERENCE.search(s) and _evidence(section, s)[1]]


def headline_cells(section: Section) -> list[tuple[Table, str, str, Cell]]:
    return [(t, label, column, cell) for t, label, column, cell in section.cells(paired=True)
            if HEADLINE.match(column)]


def unreported(section: Section) -> list[str]:
    """Headline paired intervals that exclude 0 and no sentence of the section cites."""
    said = {(number(m), number(h)) for s in section.sentences for m, h in cited(s)}
    return [f"{label}, {t.subsection}, {column}: {cell.text}"
            for t, label, column, cell in headline_cells(section)
            if cell.excludes_zero and (cell.mean, cell.half) not in said
            and (-cell.mean, cell.half) not in said]


def miscounted(section: Section) -> list[str]:
    """Sentences "N of the M headline intervals exclude zero" whose figures are not the
    section's (the headline columns of its paired tables)."""
    cells = headline_cells(section)
    total, excluding = len(cells), sum(c.excludes_zero for *_, c in cells)
    out = []
    for s in section.sentences:
        for n, m in re.findall(r"(\d+) of (?:the|these|its) (\d+) headline intervals exclude", s):
            if (int(n), int(m)) != (excluding, total):
                out.append(f"says {n} of {m}, the tables hold {excluding} of {total}: {s}")
    return out


def _arm_rows(section: Section, table: Table) -> dict[str, dict[str, Cell]]:
    """Arm name -> column -> cell, for the unpaired rows that ``table``'s paired rows compare:
    its own where it lists regimes in a column (issue 13's), else those of the other tables of
    its subsection."""
    arms: dict[str, dict[str, Cell]] = {}
    for t in section.tables:
        if t.paired or (t is not table if table.header[0] == "regime"
                        else t.subsection != table.subsection):
            continue
        for row in t.rows:
            label = _label(t, row)
            if _is_paired(t, label):
                continue
            for column, text in zip(t.header, row, strict=False):
                cell = parse_cell(text)
                if cell is not None:
                    arms.setdefault(label, {})[column] = cell
    return arms


# How a paired row names its arms where the arm column names them otherwise (issue 13's table).
ALIASES = {"n8": "GRPO n=8", "Est": "Est"}


def inconsistent(section: Section) -> tuple[list[str], int]:
    """Paired means that are not the difference of the arms' means (within rounding), and
    sample ratios that are not the arms' samples' ratio; and how many figures were checked."""
    out = []
    checked = 0
    for t in section.tables:
        arms = _arm_rows(section, t)
        for row in t.rows:
            label = _label(t, row)
            if not _is_paired(t, label):
                continue
            regime, _, pair = label.rpartition(": ")
            a, b = (x.strip() for x in pair.split(" - "))
            a, b = (f"{regime}: {ALIASES.get(x, x)}" if regime else x for x in (a, b))
            if a not in arms or b not in arms:
                continue  # an arm whose rows the section does not print
            for column, text in zip(t.header, row, strict=False):
                cell = parse_cell(text)
                if column == "samples A / B" and "samples total" in arms[a]:
                    ratio = arms[a]["samples total"].mean / arms[b]["samples total"].mean
                    checked += 1
                    # The column is the mean of the seeds' ratios: within 0.01 of the ratio of
                    # the mean samples at these spreads (a few percent between seeds).
                    if abs(number(text) - ratio) > 0.01:
                        out.append(f"{label}: samples A / B {text}, the arms' {ratio:.3f}")
                if cell is None or column not in arms[a] or column not in arms[b]:
                    continue
                diff = arms[a][column].mean - arms[b][column].mean
                checked += 1
                if abs(cell.mean - diff) > 0.0015 + 1e-9:
                    out.append(f"{label}, {t.subsection}, {column}: {cell.text}; the arms' "
                               f"means differ by {diff:+.4f}")
    return out, checked


def per_seed_pairs(section: Section) -> tuple[list[str], int]:
    """Where a table prints every seed's figures ("seed | arm | arm ...", cells "a / b / c"
    under a header naming the figures), the paired intervals computed from them must be the
    printed paired table of the same subsection (header "A - B" and those figures)."""
    out = []
    checked = 0
    for t in section.tables:
        if t.header[0] != "seed":
            continue
        per_seed = {row[0]: {arm: [number(v) for v in cell.split("/")]
                             for arm, cell in zip(t.header[1:], row[1:], strict=True)}
                    for row in t.rows}
        for p in section.tables:
            if not p.paired or p.subsection != t.subsection:
                continue
            for row in p.rows:
                a, b = (x.strip() for x in row[0].split(" - "))
                for k, text in enumerate(row[1:]):
                    mean, half = t_interval([s[a][k] - s[b][k] for s in per_seed.values()])
                    printed = parse_cell(text)
                    checked += 1
                    if printed is None or abs(printed.mean - mean) > 5e-4 + 1e-9 \
                            or abs(printed.half - half) > 5e-4 + 1e-9:
                        out.append(f"{row[0]}, {p.header[k + 1]}: printed {text}, the seeds "
                                   f"give {mean:+.3f} ± {half:.3f}")
    return out, checked
