"""A prompt set's page in headless Chromium while its upload imports (issue 32): the progress,
polled, and the prompts once the import ends, without a reload by hand; a failed import's reason
where the user looks; a long prompt as a preview and whole on its own page. With
SAVE_SCREENSHOTS=1 the pictures go to docs/screenshots/."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from experiments import services
from experiments.models import Prompt, PromptSet

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_import_shows_its_progress_then_its_prompts(
        live_server: Any, page: Any, screenshot: Callable[..., None], settings: Any) -> None:
    base = live_server.url
    alice = User.objects.create_user("alice", password="alice-password-1")
    sign_in(page, base)
    importing = PromptSet.objects.create(
        name="olympiad-train", source="upload", owner=alice, status="importing",
        description="uploaded olympiad-train.jsonl", import_rows=412_000, import_fraction=0.41,
        import_updated_at=timezone.now())
    page.goto(f"{base}/prompt-sets/{importing.pk}/")
    progress = page.locator("#import-progress").inner_text()
    assert "412,000 prompts read so far, 41% of the file" in progress
    assert page.locator("text=Launch a run on it").count() == 0
    screenshot("prompt-set-importing", element="main")
    # The import commits (as services.prompt_import does: the prompts and the status at once);
    # the page's poll sees it and reloads with the prompts.
    Prompt.objects.bulk_create(Prompt(prompt_set=importing, index=i, text=f"{i}+{i}=",
                                      answer=str(2 * i), metadata={}) for i in range(30))
    PromptSet.objects.filter(pk=importing.pk).update(status="ready", size=30, import_rows=30,
                                                     import_fraction=1.0)
    page.wait_for_selector("table.preview", timeout=30_000)
    assert "29+29=" not in page.content() and "19+19=" in page.content()  # the first 20

    failed = PromptSet.objects.create(
        name="olympiad-test", source="upload", owner=alice, status="failed",
        description="uploaded olympiad-test.jsonl",
        import_error="olympiad-test.jsonl, line 6001: missing field 'answer'",
        import_rows=6000, import_updated_at=timezone.now())
    page.goto(f"{base}/prompt-sets/{failed.pk}/")
    assert ("Rejected, nothing imported: olympiad-test.jsonl, line 6001: missing field "
            "'answer'") in page.locator("#import-error").inner_text()
    screenshot("prompt-set-failed", element="main")
    listing = page.goto(f"{base}/prompt-sets/")
    assert listing is not None and "import failed" in page.content()


def test_a_long_prompt_is_a_preview_in_lists_and_whole_on_its_page(
        live_server: Any, page: Any, screenshot: Callable[..., None]) -> None:
    base = live_server.url
    alice = User.objects.create_user("alice", password="alice-password-1")
    sign_in(page, base)
    proof = ("Let $n$ be a positive integer. Prove that "
             + " ".join(f"a_{{{i}}} + b_{{{i}}} \\le c_{{{i}}}," for i in range(900))
             + " and find the least such $n$.")
    ps = services.import_prompt_set(owner=alice, name="long-proofs", prompts=[
        Prompt(text=proof, answer="42", metadata={"level": 5}),
        *(Prompt(text=f"What is {i} + {i}?", answer=str(2 * i), metadata={})
          for i in range(1, 6))])
    page.goto(f"{base}/prompt-sets/{ps.pk}/")
    first = page.locator("table.preview tbody tr").first.inner_text()
    assert f"… ({len(proof):,} characters)" in first
    screenshot("prompt-long-preview", element="main")
    page.locator("table.preview tbody tr").first.locator("a").click()
    page.wait_for_url(f"{base}/prompt-sets/{ps.pk}/prompts/0/")
    assert page.locator("#prompt-text").inner_text() == proof
