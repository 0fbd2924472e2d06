"""The researcher's path through the dashboard in headless Chromium: sign in, upload a prompt set,
generate the built-in arithmetic set, launch a run of the built-in tiny model (hf backend, a real
Celery worker), watch it train without reloading, open a prompt's history from the heatmap, clone
the run as GRPO and compare the two. With SAVE_SCREENSHOTS=1 the screenshots of every page go to
docs/screenshots/."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import PromptSet, Run

from .conftest import SAVE_SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Small enough for 2 busy CPU cores (8 prompts a step, answers of at most 3 digits plus EOS);
# the documentation's screenshots come from larger runs.
STEPS, BATCH, MAX_NEW_TOKENS = (20, 16, 16) if SAVE_SCREENSHOTS else (12, 8, 6)


def _prompt_file(tmp_path: Path, n: int = 48) -> Path:
    # Two-digit sums, answers reversed as in the built-in task: the upload and its preview.
    path = tmp_path / "sums.jsonl"
    with path.open("w") as fh:
        for i in range(n):
            a, b = 10 + i, 3 * i % 90 + 10
            fh.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)[::-1],
                                 "metadata": {"pass_rate": round((i + 0.5) / n, 3)}}) + "\n")
    return path


def _sign_in(page: Any, base: str) -> None:
    page.goto(base + "/")
    assert "/login/" in page.url  # every page needs a signed-in user
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password-1")
    page.click("button[type=submit].primary")
    page.wait_for_url(base + "/")


def _launch(page: Any, base: str, name: str, prompt_set: PromptSet, **fields: str) -> Run:
    page.fill("#id_name", name)
    page.select_option("#id_prompt_set", str(prompt_set.pk))
    page.fill("#id_model", "builtin:tiny")
    page.select_option("#id_backend", "hf")
    page.select_option("#id_device", "cpu")
    page.fill("#id_lr", "0.0002")  # the tiny model's learning rate (DESIGN.md section 3)
    page.fill("#id_total_steps", str(STEPS))
    page.fill("#id_batch_size", str(BATCH))
    page.fill("#id_max_new_tokens", str(MAX_NEW_TOKENS))
    page.fill("#id_save_every", "0")
    # Evaluation (built-in held-out set) only for the documentation's pictures: it costs time.
    page.fill("#id_eval_every", "10" if SAVE_SCREENSHOTS else "0")
    if SAVE_SCREENSHOTS:
        page.select_option("#id_eval_set", label="sums-48")
    page.fill("#id_eval_num_prompts", "50")
    page.fill("#id_eval_k", "4")
    for selector, value in fields.items():
        if page.locator(f"#id_{selector}").evaluate("e => e.tagName") == "SELECT":
            page.select_option(f"#id_{selector}", value)
        else:
            page.fill(f"#id_{selector}", value)
    page.click("#launch-button")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    return Run.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))


def test_researcher_path(live_server: Any, page: Any, screenshot: Callable[..., None],
                         start_worker: Callable[..., Any], tiny_model_dir: Path,
                         tmp_path: Path) -> None:
    from trainer.model import MODEL_DIR_ENV

    base = live_server.url
    User.objects.create_user("alice", password="alice-password-1")
    _sign_in(page, base)

    # Upload: a bad file is rejected with its line, a good one imported and previewed.
    page.goto(base + "/prompt-sets/")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2="}\n')
    page.fill("#id_upload-name", "bad-set")
    page.set_input_files("#id_upload-file", str(bad))
    page.click("#upload-form button[type=submit]")
    assert "line 2" in page.locator("#field-file .field-error").inner_text()
    assert not PromptSet.objects.filter(name="bad-set").exists()
    page.fill("#id_upload-name", "sums-48")
    page.set_input_files("#id_upload-file", str(_prompt_file(tmp_path)))
    screenshot("prompt-sets")
    page.click("#upload-form button[type=submit]")
    page.wait_for_url(re.compile(r"/prompt-sets/\d+/$"))
    assert "10+10=" in page.content()
    screenshot("prompt-set-preview")
    assert PromptSet.objects.get(name="sums-48").size == 48

    # The built-in arithmetic set (the tiny model's task: answers' digits reversed).
    page.goto(base + "/prompt-sets/")
    page.fill("#id_builtin-name", "arith-64")
    page.fill("#id_builtin-num_prompts", "64")
    page.fill("#id_builtin-max_digits", "2")
    page.click("#builtin-form button[type=submit]")
    page.wait_for_url(re.compile(r"/prompt-sets/\d+/$"))
    prompt_set = PromptSet.objects.get(name="arith-64")
    assert prompt_set.size == 64

    # Launch from the form: an invalid value is reported next to its field first.
    page.goto(base + "/runs/new/")
    page.fill("#id_samples_per_round", "2")
    run = None
    page.fill("#id_name", "balance-tiny")
    page.select_option("#id_prompt_set", str(prompt_set.pk))
    page.click("#launch-button")
    assert "must be >= group_size" in page.locator("#field-samples_per_round").inner_text()
    screenshot("launch-form-error")
    page.fill("#id_samples_per_round", "8")
    run = _launch(page, base, "balance-tiny", prompt_set, algorithm="ada-balance")
    assert run.status == Run.Status.QUEUED

    # The run page updates itself: mark the window, start the worker, and watch the step
    # counter advance while the mark (and so the page) survives.
    page.evaluate("window.__notReloaded = true")
    assert page.locator("#step-counter").inner_text() == "0"
    start_worker(queues="cpu", env={MODEL_DIR_ENV: str(tiny_model_dir)})
    page.wait_for_function("Number(document.querySelector('#step-counter').textContent) > 0",
                           timeout=120_000)
    page.wait_for_function(
        f"document.querySelector('#run-status').dataset.status === 'succeeded'"
        f" && Number(document.querySelector('#step-counter').textContent) === {STEPS}",
        timeout=400_000)
    assert page.evaluate("window.__notReloaded") is True
    # Charts follow the status card: the reward chart has every step once the run is done.
    page.wait_for_function(
        f"(() => {{ const d = document.getElementById('chart-rewards');"
        f" return d.data && d.data[0].x.length === {STEPS}; }})()", timeout=30_000)
    page.wait_for_function("document.getElementById('chart-heatmap').dataset.loaded === '1'")
    screenshot("run-page")

    # Click a heatmap cell that has data: the prompt's history opens.
    page.locator("#chart-heatmap").scroll_into_view_if_needed()
    target = page.evaluate("""() => {
        const gd = document.getElementById('chart-heatmap');
        const t = gd.data[0], L = gd._fullLayout, box = gd.getBoundingClientRect();
        for (let r = 0; r < t.z.length; r++) for (let c = 0; c < t.z[r].length; c++) {
            if (t.z[r][c] !== null) {
                return {x: box.left + L._size.l + L.xaxis.d2p(t.x[c]),
                        y: box.top + L._size.t + L.yaxis.d2p(t.y[r]),
                        prompt: gd._promptIds[r]};
            }
        }
        return null; }""")
    assert target is not None
    page.mouse.click(target["x"], target["y"])
    page.wait_for_url(re.compile(rf"/runs/{run.pk}/prompts/{target['prompt']}/$"))
    assert page.locator(".step-block").count() >= 1
    assert page.locator("table.responses tbody tr").count() >= 1
    page.wait_for_function("document.getElementById('chart-passrate').dataset.loaded === '1'")
    # A prompt's page holds every response of its latest steps: the top of it is the picture.
    screenshot("prompt-history", full_page=False)

    # Clone as GRPO: the differences are shown before launch.
    page.goto(base + f"/runs/new/?clone={run.pk}")
    page.fill("#id_name", "grpo-tiny")
    page.select_option("#id_algorithm", "grpo")
    page.click("#launch-button")
    diff = page.locator("#clone-diff").inner_text()
    assert "algorithm" in diff and "grpo" in diff
    screenshot("clone-differences")
    page.click("#launch-button")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    grpo = Run.objects.get(name="grpo-tiny")
    assert grpo.cloned_from_id == run.pk and grpo.algorithm == "grpo"
    page.wait_for_function("document.querySelector('#run-status').dataset.status === 'succeeded'",
                           timeout=400_000)

    # Runs list: select both and compare.
    page.goto(base + "/")
    screenshot("runs-list")
    page.check(f"#cmp-{run.pk}")
    page.check(f"#cmp-{grpo.pk}")
    page.click("#compare-button")
    page.wait_for_url(re.compile(r"/compare/\?"))
    page.wait_for_function("document.getElementById('chart-compare').dataset.loaded === '1'")
    page.wait_for_function("document.getElementById('chart-scatter').dataset.loaded === '1'")
    names = page.evaluate("document.getElementById('chart-compare').data.map(t => t.name)")
    assert any("balance-tiny" in n for n in names) and any("grpo-tiny" in n for n in names)
    # Switch the x axis to cumulative samples: the chart is re-plotted in place.
    page.select_option("form[data-chart-controls=chart-compare] select[name=x]", "samples")
    page.wait_for_function("document.getElementById('chart-compare').layout.xaxis.title.text"
                           " === 'cumulative samples'")
    assert "algorithm" in page.locator("#config-diff").inner_text()
    screenshot("compare")
