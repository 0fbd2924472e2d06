"""Actions behind a confirmation survive the page's polls (issue 27, item 1): the run page's
"Cancel run", the runs list's "Cancel all" of a sweep and the run page's "Delete", each
confirmed only after the element it belongs to was swapped out several times while its dialog
was open. Before the fix a poll's swap left the confirmed request with an element no longer in
the page, and htmx dropped it without a word.

The polls are shortened (``DASHBOARD_POLL_SECONDS``, ``RUN_LIST_POLL_SECONDS``: the live server
runs in this process, so pytest-django's ``settings`` reach it) so that several swaps happen
within a second or two. Each test checks that the element it clicked has left the page, and
counts the swaps, before it answers, so it would fail if no poll ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from experiments.models import Run, Sweep

from tests.platform.dashboard_fixtures import make_prompt_set, make_run

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL = 0.3  # seconds between polls in these tests
SWAPS = 3   # polls swapped in while the dialog is open, at least


@pytest.fixture
def fast_polls(settings: Any) -> None:
    settings.DASHBOARD_POLL_SECONDS = POLL
    settings.RUN_LIST_POLL_SECONDS = POLL


def _running(run: Run) -> None:
    """As a worker leaves it between heartbeats (no worker here: nothing moves it on)."""
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=timezone.now(),
                                         heartbeat_at=timezone.now(), current_step=1)


def _count_swaps(page: Any) -> None:
    page.evaluate("""() => {
        window.__swaps = 0;
        document.body.addEventListener('htmx:afterSwap', () => { window.__swaps += 1; });
    }""")


def _open_and_outlast_polls(page: Any, selector: str) -> None:
    """Click ``selector``, which asks in the dialog, and keep the dialog open until the clicked
    element has left the page and SWAPS polls were swapped in."""
    page.evaluate(f"""() => {{
        window.__clicked = document.querySelector({selector!r});
        window.__swaps = 0;
    }}""")
    page.click(selector)
    assert page.locator("#confirm-dialog").is_visible()
    page.wait_for_function(
        f"() => !window.__clicked.isConnected && window.__swaps >= {SWAPS}", timeout=20_000)
    assert page.locator("#confirm-dialog").is_visible()  # still deciding


def test_a_cancel_confirmed_after_several_polls_reaches_the_run(
        live_server: Any, page: Any, fast_polls: None) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    prompt_set = make_prompt_set("confirm-set", size=8)
    run = make_run(owner, prompt_set, name="to-cancel")
    _running(run)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    base = live_server.url
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    page.wait_for_selector("#run-cancel-button")
    _count_swaps(page)

    _open_and_outlast_polls(page, "#run-cancel-button")
    assert not Run.objects.get(pk=run.pk).cancel_requested
    page.click("#confirm-dialog [data-confirm-answer=yes]")
    page.wait_for_function(
        "() => document.querySelector('#run-status').textContent.includes('cancel requested')")
    assert Run.objects.get(pk=run.pk).cancel_requested

    # The run finished while the dialog was open: its fresh card has no Cancel, and a "yes"
    # says that nothing was sent instead of saying nothing.
    other = make_run(owner, prompt_set, name="finishes-meanwhile")
    _running(other)
    page.goto(base + f"/runs/{other.pk}/")
    page.wait_for_selector("#run-cancel-button")
    _count_swaps(page)
    page.evaluate("() => { window.__clicked = document.querySelector('#run-cancel-button'); }")
    page.click("#run-cancel-button")
    Run.objects.filter(pk=other.pk).update(status=Run.Status.SUCCEEDED,
                                           finished_at=timezone.now(), current_step=6)
    page.wait_for_function(
        "() => document.querySelector('#run-status').dataset.status === 'succeeded'")
    assert page.locator("#run-cancel-button").count() == 0
    page.click("#confirm-dialog [data-confirm-answer=yes]")
    dialog = page.locator("#confirm-dialog")
    page.wait_for_function("() => document.getElementById('confirm-dialog').open")
    assert "Nothing was sent: the run finished" in dialog.inner_text()
    assert dialog.locator("button:visible").all_inner_texts() == ["OK"]
    page.click("#confirm-dialog [data-confirm-answer=yes]")
    assert not dialog.is_visible()
    assert not Run.objects.get(pk=other.pk).cancel_requested
    errors = [m for m in console if m.startswith(("error", "pageerror"))]
    assert errors == [], errors


def test_cancel_all_confirmed_after_several_polls_stops_the_sweep(
        live_server: Any, page: Any, fast_polls: None) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    prompt_set = make_prompt_set("sweep-set", size=8)
    sweep = Sweep.objects.create(owner=owner, name="study",
                                 grid=[{"field": "seed", "values": [0, 1]}],
                                 base_config={"algorithm": "ada-balance"})
    runs = [make_run(owner, prompt_set, name=f"study[seed={s}]", seed=s) for s in (0, 1)]
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(sweep=sweep)
    _running(runs[0])  # runs[1] stays queued
    base = live_server.url
    sign_in(page, base)
    page.goto(base + f"/?sweep={sweep.pk}")
    button = f"#sweep-{sweep.pk} button.danger"
    page.wait_for_selector(button)
    _count_swaps(page)

    _open_and_outlast_polls(page, button)
    assert not Run.objects.filter(sweep=sweep, cancel_requested=True).exists()
    with page.expect_navigation():  # the answer asks for a reload (HX-Refresh)
        page.click("#confirm-dialog [data-confirm-answer=yes]")
    statuses = dict(Run.objects.filter(sweep=sweep).values_list("pk", "status"))
    assert statuses == {runs[0].pk: "running", runs[1].pk: "cancelled"}
    assert all(Run.objects.filter(sweep=sweep).values_list("cancel_requested", flat=True))
    assert "cancel requested for 2 unfinished runs" in page.locator(".messages").inner_text()


def test_a_delete_confirmed_after_its_form_was_swapped_deletes_the_run(
        live_server: Any, page: Any, tmp_path: Path) -> None:
    """A finished run's page does not poll, so nothing replaces its Delete form today; the
    form is swapped here by the same fragment a poll brings (the run page's live part), so
    that a form action behind a confirmation is held to the same rule."""
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = make_run(owner, make_prompt_set("delete-set", size=8), name="to-delete")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    base = live_server.url
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    page.wait_for_selector("#run-delete-button")
    _count_swaps(page)
    page.evaluate("() => { window.__clicked = document.querySelector('#run-delete-button'); }")
    page.click("#run-delete-button")
    assert page.locator("#confirm-dialog").is_visible()
    for _ in range(SWAPS):
        page.evaluate(f"""() => htmx.ajax('GET', '/runs/{run.pk}/status/',
                                          {{target: '#run-live', swap: 'outerHTML'}})""")
    page.wait_for_function(f"() => !window.__clicked.isConnected && window.__swaps >= {SWAPS}")
    assert Run.objects.filter(pk=run.pk).exists()
    with page.expect_navigation():
        page.click("#confirm-dialog [data-confirm-answer=yes]")
    assert not Run.objects.filter(pk=run.pk).exists()
    assert "Run to-delete deleted." in page.locator(".messages").inner_text()
