"""Headless Chromium (Debian's ``chromium``) driven by Playwright, against pytest-django's
``live_server`` on a transactional test database.

``scripts/ensure_chromium.sh`` installs the browser where it can; where it is still missing the
browser tests are skipped with that reason (on CI, ``CI`` set, they fail instead: they must run).
"""

from __future__ import annotations

import os
import shutil
import threading
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


@pytest.fixture
def screenshot(page: Any) -> Callable[[str], None]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def shot(name: str, full_page: bool = True) -> None:
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)

    return shot


def _celery_worker_available() -> bool:
    try:
        import workers.celery_app  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def run_executor(request: pytest.FixtureRequest) -> Callable[[], Any]:
    """Start whatever executes queued runs: the platform's real Celery worker process (from
    tests/fixtures/services.py) where it exists; otherwise a stand-in thread that trains queued
    runs with ``trainer.train`` on the simulated backend and records them as the worker would."""
    if _celery_worker_available():
        start_worker = request.getfixturevalue("start_worker")
        return lambda: start_worker(queues="cpu")
    return lambda: _StandInExecutor(request).start()


class _StandInExecutor:
    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        request.addfinalizer(self._close)

    def start(self) -> _StandInExecutor:
        self.thread.start()
        return self

    def _close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def _loop(self) -> None:
        import tempfile
        import time

        from django.db import connection
        from django.utils import timezone
        from experiments.models import Prompt, Run

        from tests.platform.dashboard_fixtures import write_step
        from trainer import train
        from trainer.backends.simulated import SimulatedBackend
        from trainer.config import TrainConfig
        from trainer.types import Prompt as TrainerPrompt

        try:
            while not self.stop.is_set():
                run = Run.objects.filter(status=Run.Status.QUEUED).order_by("pk").first()
                if run is None:
                    time.sleep(0.2)
                    continue
                Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING,
                                                     started_at=timezone.now())
                cfg = TrainConfig.from_dict({**run.config, "prompts": "builtin:arithmetic",
                                             "eval_prompts": "", "eval_every": 0,
                                             "save_every": 0})
                prompts = [TrainerPrompt(id=str(p.pk), text=p.text, answer=p.answer,
                                         metadata=p.metadata) for p in
                           Prompt.objects.filter(prompt_set=run.prompt_set).order_by("index")]

                class Rec:
                    def __init__(self, run: Run) -> None:
                        self.run = run

                    def on_round(self, step: int, stat: Any) -> None:
                        Run.objects.filter(pk=self.run.pk).update(current_round=stat.round)

                    def on_step(self, record: Any) -> None:
                        write_step(self.run, record, wall_seconds=record.step * 0.5)
                        time.sleep(0.3)  # a human-visible pace for the live page

                    def on_checkpoint(self, record: Any) -> None:
                        pass

                    def on_eval(self, record: Any) -> None:
                        pass

                with tempfile.TemporaryDirectory() as tmp:
                    train(cfg, prompts, SimulatedBackend(cfg), Rec(run), out_dir=tmp)
                Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED,
                                                     finished_at=timezone.now())
        finally:
            connection.close()


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    """No ``collectstatic`` in tests: plain static storage (the live server serves the finders)."""
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
