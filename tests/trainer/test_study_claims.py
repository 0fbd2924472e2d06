"""docs/study-algorithms.md says no more than its intervals (issue 34 item 2): every interval a
sentence cites is in the section's tables, paired means agree with the arms' means, a claimed
difference cites a paired interval that excludes 0 (or two that do not overlap), no "no
difference" sentence cites one that does, every headline interval that excludes 0 is reported,
and the count of them is right (``tests/trainer/study_doc.py`` has the rules). The second test
runs each rule on a page written with the problems the review found, so each is shown to fire."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer import study_doc as sd

RULES = ("untraceable", "unsupported_differences", "no_difference_beside_a_difference",
         "unreported", "miscounted")


def test_the_study_page_says_no_more_than_its_intervals() -> None:
    sections = sd.read()
    assert len(sections) == 5
    for section in sections:
        for rule in RULES:
            assert getattr(sd, rule)(section) == [], (section.title, rule)
        problems, checked = sd.inconsistent(section)
        assert problems == [] and checked >= 20, section.title
    # The headline intervals each study's text counts (greedy and avg@k of its paired tables).
    counts = [(len(c), sum(x.excludes_zero for *_, x in c))
              for c in map(sd.headline_cells, sections)]
    # Newest first: the async study (issue 29), the family at one budget (issue 31), the DAPO
    # re-run (issue 21), paper fidelity (issue 9), the first study.
    assert counts[:4] == [(24, 3), (48, 6), (44, 11), (28, 4)]
    # The first study's paired table is the one its per-seed table gives.
    problems, checked = sd.per_seed_pairs(sections[4])
    assert problems == [] and checked == 9


PAGE = """## Study: a review's findings

### Results: hard regime

| arm | samples total | greedy | avg@32 | pass@32 |
| --- | ---: | ---: | ---: | ---: |
| warm start (step 0) | | 0.310 ± 0.000 | 0.204 ± 0.017 | 0.957 ± 0.029 |
| grpo | 5120 ± 0 | 0.370 ± 0.025 | 0.269 ± 0.040 | 0.877 ± 0.094 |
| dapo | 16683 ± 486 | 0.403 ± 0.127 | 0.334 ± 0.065 | 0.893 ± 0.050 |
| dapo-any | 16341 ± 1117 | 0.447 ± 0.063 | 0.349 ± 0.060 | 0.920 ± 0.040 |

| A - B | samples A / B | greedy | avg@32 | pass@32 |
| --- | ---: | ---: | ---: | ---: |
| dapo - dapo-any | 1.02 | -0.043 ± 0.180 | -0.015 ± 0.078 | -0.027 ± 0.014 |
| dapo-any - grpo | 3.19 | 0.077 ± 0.076 | 0.080 ± 0.096 | 0.043 ± 0.030 |
| dapo - grpo | 2.00 | 0.033 ± 0.137 | 0.090 ± 0.097 | 0.016 ± 0.025 |

The held-out figures did not depend on revisits (-0.015 ± 0.078, pass@32 -0.027 ± 0.014).
Per sample, GRPO is better here.
Every arm narrows pass@32 (0.877 ± 0.094 against 0.957 ± 0.029).
DAPO wins on avg@32 (+0.104 ± 0.059).
2 of the 6 headline intervals exclude zero.
"""


def test_each_rule_fires_on_the_problems_the_review_found(tmp_path: Path) -> None:
    path = tmp_path / "study.md"
    path.write_text(PAGE)
    section, = sd.read(path)
    # "did not depend" beside an interval that excludes 0.
    assert sd.no_difference_beside_a_difference(section) == [
        "The held-out figures did not depend on revisits (-0.015 ± 0.078, pass@32 -0.027 ± "
        "0.014)."]
    unsupported = sd.unsupported_differences(section)
    assert "Per sample, GRPO is better here." in unsupported  # no interval at all
    assert any(s.startswith("Every arm narrows") for s in unsupported)  # overlapping, unpaired
    assert sd.untraceable(section) == [
        "+0.104 ± 0.059: DAPO wins on avg@32 (+0.104 ± 0.059)."]  # not in the tables
    assert sd.unreported(section) == [
        "dapo-any - grpo, Results: hard regime, greedy: 0.077 ± 0.076"]
    assert sd.miscounted(section) == ["says 2 of 6, the tables hold 1 of 6: 2 of the 6 "
                                      "headline intervals exclude zero."]
    problems, _ = sd.inconsistent(section)
    # 0.403 - 0.370 = 0.033 (right); 0.334 - 0.269 = 0.065, printed 0.090; 16683 / 5120 = 3.26.
    assert problems == [
        "dapo - grpo: samples A / B 2.00, the arms' 3.258",
        "dapo - grpo, Results: hard regime, avg@32: 0.090 ± 0.097; the arms' means differ by "
        "+0.0650"]


@pytest.mark.parametrize(("sentence", "claims"), [
    ("no win, no loss on the held-out measures.", False),
    ("Est beats GRPO n = 8 on greedy accuracy.", True),
    ("A difference counts as a win only when its paired interval excludes zero.", False),
    ("Does Est beat budget-matched GRPO here?", False)])
def test_what_counts_as_claiming_a_difference(sentence: str, claims: bool) -> None:
    assert sd.claims_difference(sentence) is claims
