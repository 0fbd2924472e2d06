"""The run page's cancel in headless Chromium: a confirmation whose buttons say what they do
("Stop the run" / "Keep it running": with OK/Cancel, "Cancel" kept the run), and a page that
logs no error to the console while its status card polls and swaps."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from experiments.models import Run

from tests.platform.dashboard_fixtures import make_prompt_set, make_run

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class _Slow:
    seconds = 0.0


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> _Slow:
    """Delays the status card's polls (GET) by ``seconds`` on the live server, which runs in
    this process."""
    from dashboard import views

    state = _Slow()
    original = views._status_context

    def delayed(request: Any, run: Run) -> dict[str, Any]:
        if request.method == "GET" and state.seconds:
            time.sleep(state.seconds)
        return original(request, run)

    monkeypatch.setattr(views, "_status_context", delayed)
    return state


def test_cancel_asks_in_words_and_the_console_stays_clean(live_server: Any, page: Any,
                                                          slow: _Slow) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = make_run(owner, make_prompt_set("cancel-set", size=8), name="to-cancel")
    # Running, as a worker leaves it between heartbeats (no worker here: nothing stops it).
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=timezone.now(),
                                         heartbeat_at=timezone.now(), current_step=1)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    base = live_server.url
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    page.wait_for_selector("#run-status")
    page.wait_for_timeout(2500)  # a poll of the status card, with its out-of-band actions

    page.click("#run-cancel-button")
    dialog = page.locator("#confirm-dialog")
    assert dialog.is_visible()
    assert "Stop this run?" in dialog.inner_text()
    buttons = [b.strip() for b in dialog.locator("button").all_inner_texts()]
    assert buttons == ["Keep it running", "Stop the run"]
    page.click("#confirm-dialog [data-confirm-answer=no]")
    assert not dialog.is_visible()
    page.wait_for_timeout(500)
    assert not Run.objects.get(pk=run.pk).cancel_requested  # keeping it sent nothing

    # The race behind "htmx:oobErrorNoTarget #run-actions": a poll of the status card still in
    # flight when the cancel's answer replaced the card came back to a card no longer in the
    # page, and looked for #run-actions there. The server answers polls slowly here, so that one
    # is in flight when the cancel goes out.
    slow.seconds = 1.5
    page.wait_for_timeout(2300)  # a poll is now in flight
    page.click("#run-cancel-button")
    page.click("#confirm-dialog [data-confirm-answer=yes]")
    page.wait_for_selector("#run-status .warn")  # "cancel requested"
    assert Run.objects.get(pk=run.pk).cancel_requested
    page.wait_for_timeout(2500)  # polls go on after the swap
    assert page.locator("#run-actions").count() == 1
    errors = [m for m in console if m.startswith(("error", "pageerror"))
              or "oobErrorNoTarget" in m]
    assert errors == [], errors


def test_text_typed_into_a_number_field_is_named_not_a_number(live_server: Any,
                                                              page: Any) -> None:
    User.objects.create_user("alice", password="alice-password-1")
    make_prompt_set("typed-set", size=8)
    base = live_server.url
    sign_in(page, base)
    page.goto(base + "/runs/new/")
    page.fill("#id_name", "typed")
    page.fill("#id_batch_size", "")
    page.click("#id_batch_size")
    page.keyboard.type("12e")  # an exponent without digits: text the input cannot read
    assert page.evaluate("document.getElementById('id_batch_size').validity.badInput")
    page.click("#launch-button")
    page.wait_for_selector("#form-errors")
    field = page.locator("#field-batch_size").inner_text()
    assert "not a number" in field and "This field is required" not in field
    assert not Run.objects.exists()
