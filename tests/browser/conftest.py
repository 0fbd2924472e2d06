"""Headless Chromium (Debian's ``chromium``) driven by Playwright, against pytest-django's
``live_server`` on a transactional test database.

``scripts/ensure_chromium.sh`` installs the browser where it can; where it is still missing the
browser tests are skipped with that reason (on CI, ``CI`` set, they fail instead: they must run).

The pages are served under the Content-Security-Policy (``webapp/security.py``), which refuses
eval: ``page.wait_for_function`` takes a function (``"() => ..."``), not a bare expression
string, which Playwright would evaluate with eval.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        reason = ("Chromium is not installed and scripts/ensure_chromium.sh could not install "
                  "it (apt-get missing, not root, or offline)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs its own event loop; Django refuses ORM calls from a thread
    # that has a running loop unless told this is intended (the ORM calls here are tests').
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()


# SAVE_SCREENSHOTS=1 writes the pictures of docs/dashboard.md (and makes the test's runs larger,
# for charts worth looking at); otherwise they go to the test's temporary folder, so a plain test
# run leaves the work tree untouched.
SAVE_SCREENSHOTS = os.environ.get("SAVE_SCREENSHOTS") == "1"
# A run-page chart has drawn (``page.wait_for_function(CHART_LOADED.format(name))``).
CHART_LOADED = "() => document.getElementById('chart-{0}') && " \
    "document.getElementById('chart-{0}').dataset.loaded === '1'"


@pytest.fixture
def screenshot(page: Any, tmp_path: Path) -> Callable[..., None]:
    folder = SCREENSHOTS if SAVE_SCREENSHOTS else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)

    def shot(name: str, full_page: bool = True, element: str | None = None) -> None:
        """The page (whole or the viewport), or the element matching the CSS selector
        ``element`` (whole, however tall)."""
        path = str(folder / f"{name}.png")
        if element is None:
            page.screenshot(path=path, full_page=full_page)
            return
        from playwright.sync_api import Error

        # A live run's status card is replaced by its poll every couple of seconds: an element
        # swapped out between Playwright finding it and drawing it is found again.
        for attempt in range(5):
            try:
                page.locator(element).screenshot(path=path)
                return
            except Error as exc:
                if "not attached" not in str(exc) or attempt == 4:
                    raise

    return shot


def sign_in(page: Any, base: str, username: str = "alice",
            password: str = "alice-password-1") -> None:
    """Sign in through the login form (every page needs a signed-in user)."""
    page.goto(base + "/")
    assert "/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit].primary")
    page.wait_for_url(base + "/")


def fill_and_launch(page: Any, fields: dict[str, str]) -> Any:
    """Fill the open launch form's ``fields`` (a select by its option value, an input by its
    text), press Launch and return the run the form created (its page is open then)."""
    import re

    from experiments.models import Run

    for field, value in fields.items():
        if page.locator(f"#id_{field}").evaluate("e => e.tagName") == "SELECT":
            page.select_option(f"#id_{field}", value)
        else:
            page.fill(f"#id_{field}", value)
    page.click("#launch-button")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    return Run.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
