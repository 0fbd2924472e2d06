"""Every action behind a confirmation names a stable key (``data-confirm-key``), by which
``static/dashboard/confirm.js`` finds it again when the user answers after a poll replaced it
(issue 27, item 1; the browser side: tests/browser/test_confirm_browser.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# An opening tag that carries data-confirm= (the question), across lines.
CONFIRM_TAG = re.compile(r"<(?:button|form|a|input)\b[^>]*\sdata-confirm=[^>]*>", re.S)


def test_every_confirmed_action_has_a_key_unique_to_what_it_acts_on() -> None:
    tags = [(path.relative_to(ROOT), tag) for path in (ROOT / "templates").rglob("*.html")
            for tag in CONFIRM_TAG.findall(path.read_text())]
    assert len(tags) >= 3, tags  # cancel, cancel-all, delete at least: the scan sees them
    for path, tag in tags:
        key = re.search(r'data-confirm-key="([^"]*)"', tag)
        assert key, f"{path}: a data-confirm element without data-confirm-key: {tag[:120]}"
        # The key names the object (a run's or sweep's pk), so that a page listing several
        # never re-resolves an answer to another one's button.
        assert "{{" in key.group(1), f"{path}: data-confirm-key {key.group(1)!r} names no object"
