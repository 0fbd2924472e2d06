"""A sweep in headless Chromium: launched from the form's "sweep over" field, executed by a real
Celery worker, grouped in the runs list with its aggregate status, and reported: every figure
drawn, a figure downloaded as PNG and SVG and a table as CSV.

The test's runs use the simulated backend (no model: the path under test is the platform's);
with SAVE_SCREENSHOTS=1 they train the built-in tiny model instead, for the pictures of
docs/screenshots/ (sweep-list.png, report.png)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dashboard import reports
from dashboard.selectors import algorithm_label
from django.contrib.auth.models import User
from experiments.models import Run, Sweep

from tests.fixtures.services import wait_for

from .conftest import SAVE_SCREENSHOTS, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ALGORITHMS = [algorithm_label("grpo", 4), algorithm_label("ada-pos"),
              algorithm_label("ada-balance")]
# Small for the suite; the pictures want curves.
STEPS, BATCH, SEEDS, EVAL_K = (30, 16, [0, 1, 2], 32) if SAVE_SCREENSHOTS else (8, 8, [0, 1], 16)


def test_sweep_from_the_form_to_its_report(live_server: Any, page: Any,
                                           screenshot: Callable[..., None],
                                           start_worker: Callable[..., Any],
                                           request: pytest.FixtureRequest) -> None:
    from experiments.services import create_builtin_prompt_set, import_prompt_set

    from tests.fixtures.services import make_prompts

    base = live_server.url
    user = User.objects.create_user("alice", password="alice-password-1")
    train = create_builtin_prompt_set(user, "arith-64", n=64, max_digits=2)
    # Held-out prompts with pass rates spread over (0, 1), for the simulated backend's draws.
    prompts = make_prompts(40)
    for i, p in enumerate(prompts):
        p.metadata["pass_rate"] = (i + 0.5) / len(prompts)
    held_out = import_prompt_set(owner=user, name="held-out", prompts=prompts)
    sign_in(page, base)

    page.goto(base + "/runs/new/")
    page.fill("#id_name", "study")
    page.select_option("#id_prompt_set", str(train.pk))
    page.select_option("#id_eval_set", str(held_out.pk))
    if SAVE_SCREENSHOTS:
        page.select_option("#id_backend", "hf")
        page.select_option("#id_device", "cpu")
        page.fill("#id_lr", "0.0002")
        page.fill("#id_max_new_tokens", "6")
    else:
        page.select_option("#id_backend", "simulated")
    page.fill("#id_total_steps", str(STEPS))
    page.fill("#id_batch_size", str(BATCH))
    page.fill("#id_save_every", "0")
    page.fill("#id_eval_every", str(STEPS // 2))
    page.fill("#id_eval_k", str(EVAL_K))
    # A typo first: the error names the field on the sweep input, and nothing is launched.
    page.fill("#id_sweep", "algorithm=grpo,ada-pos,ada-balance; sed=0,1")
    page.click("#launch-button")
    assert "did you mean 'seed'" in page.locator("#field-sweep").inner_text()
    assert not Run.objects.exists()
    page.fill("#id_sweep", "algorithm=grpo,ada-pos,ada-balance; seed="
              + ",".join(map(str, SEEDS)))
    page.click("#launch-button")
    page.wait_for_url(re.compile(r"/\?sweep=\d+$"))
    sweep = Sweep.objects.get()
    runs = list(Run.objects.filter(sweep=sweep).order_by("pk"))
    assert [(r.algorithm, r.seed) for r in runs] == [
        (a, s) for a in ("grpo", "ada-pos", "ada-balance") for s in SEEDS]
    head = page.locator(f"#sweep-{sweep.pk}")
    assert f"{len(runs)} queued" in head.inner_text()

    env = {}
    if SAVE_SCREENSHOTS:
        from trainer.model import MODEL_DIR_ENV

        env[MODEL_DIR_ENV] = str(request.getfixturevalue("tiny_model_dir"))
    start_worker(queues="cpu", env=env)
    # The list follows the sweep live (htmx): the aggregate status counts a run in progress.
    page.wait_for_function(
        f"() => document.querySelector('#sweep-{sweep.pk} .sweep-summary').textContent"
        f".includes('succeeded')", timeout=300_000)
    screenshot("sweep-list", full_page=False)
    wait_for(lambda: not Run.objects.filter(sweep=sweep).exclude(status="succeeded").exists(),
             timeout=900 if SAVE_SCREENSHOTS else 300, what="the sweep's runs to succeed")
    failed = list(Run.objects.filter(sweep=sweep, status="failed").values_list("error"))
    assert not failed, failed

    page.reload()
    assert f"{len(runs)} succeeded" in page.locator(f"#sweep-{sweep.pk}").inner_text()
    page.click(f"#sweep-{sweep.pk} a:text('Report')")
    page.wait_for_url(re.compile(rf"/report/\?sweep={sweep.pk}$"))
    for name in reports.FIGURES:
        page.wait_for_function(
            f"() => document.getElementById('fig-{name}').dataset.loaded === '1'")
        legend = page.evaluate(f"document.getElementById('fig-{name}').data"
                               ".filter(t => t.showlegend !== false).map(t => t.name)")
        assert set(ALGORITHMS) <= set(legend), (name, legend)
    ks = page.evaluate("document.getElementById('fig-pass-at-k').data.at(-1).x")
    assert ks == list(range(1, EVAL_K + 1))
    assert len(page.locator("#table-eval tbody tr").all()) == 3
    assert "±" in page.locator("#table-cost").inner_text()
    screenshot("report")

    # Downloads: PNG and SVG drawn by plotly in the browser, the numbers as CSV.
    for fmt, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<svg")):
        with page.expect_download() as info:
            page.click(f"[data-download-chart=fig-reward][data-format={fmt}]")
        download = info.value
        assert download.suggested_filename == f"report-sweep-{sweep.pk}-reward.{fmt}"
        assert Path(download.path()).read_bytes().startswith(magic)
    with page.expect_download() as info:
        page.click("#section-table-cost a:text('CSV')")
    rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
    assert [r["group"] for r in rows] == ALGORITHMS
    assert float(rows[0]["samples_vs_grpo"]) == 1.0
