"""The pages under the Content-Security-Policy header (issue 19), in headless Chromium: the run
page's plotly.js charts render, the launch form's scripts (now a static file) still work, and
no page reports a CSP violation, neither as a ``securitypolicyviolation`` event nor on the
console."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Runs before any page script: records every violation the page raises.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " +
                    (e.sourceFile || "") + ":" + e.lineNumber);
});
"""

# A string predicate is evaluated with eval, which the policy refuses: a function it is.
ALL_LOADED = ("() => [...document.querySelectorAll('[data-chart-url]')]"
              ".every(d => d.dataset.loaded === '1')")


def test_pages_and_charts_work_under_the_policy(live_server: Any, page: Any) -> None:
    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    ps = make_prompt_set("csp-set", size=12)
    run = record_run(make_run(owner, ps, name="under csp", total_steps=3))
    other = record_run(make_run(owner, ps, name="grpo", algorithm="grpo", total_steps=3))
    console: list[str] = []
    page.on("console", lambda msg: console.append(msg.text))
    page.add_init_script(RECORD_VIOLATIONS)
    sign_in(page, base)

    def violations() -> list[str]:
        return page.evaluate("window.__csp") + [
            m for m in console if "Content Security Policy" in m or "Content-Security" in m]

    response = page.goto(base + f"/runs/{run.pk}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    charts = page.locator("[data-chart-url]").count()
    assert charts >= 3
    # Every chart drawn by plotly.js: its SVG is there, with a title.
    page.wait_for_function(ALL_LOADED)
    assert page.locator("[data-chart-url] .main-svg").count() >= charts
    assert page.locator("#chart-rewards .gtitle").count() == 1
    assert violations() == []

    # The compare page's WebGL scatter needs eval (its policy allows it; docs/reliability.md).
    page.goto(base + f"/compare/?runs={run.pk}&runs={other.pk}")
    page.wait_for_function(ALL_LOADED)
    assert page.locator("#chart-scatter .main-svg").count() >= 1
    assert violations() == []

    # The launch form's helpers came from an inline script; they run from launch.js now.
    page.goto(base + "/runs/new/")
    page.fill("#id_batch_size", "32")
    page.fill("#id_ppo_mini_batch_size", "8")
    page.fill("#id_ppo_epochs", "2")
    assert page.text_content("#optimizer-steps-value").strip() == "8"
    assert violations() == []

    for url in ("/", "/prompt-sets/", f"/prompt-sets/{ps.pk}/", "/account/"):
        page.goto(base + url)
        page.wait_for_load_state("load")
        assert violations() == [], url
