"""The researcher's path through the dashboard in headless Chromium: sign in, upload a prompt set,
generate the built-in arithmetic set, see every form error at once, estimate the sampling budget
(the preflight, sampled by a real Celery worker with the built-in tiny model), launch a run of the
tiny model (hf backend), watch it train without reloading, open a prompt's history from the
heatmap, clone the run as GRPO, compare the two and share the comparison by its URL. A second
test opens a large run's heatmap: bins, zoom, a prompt's history. With SAVE_SCREENSHOTS=1 the
screenshots of every page go to docs/screenshots/."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import PromptSet, Run

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

from .conftest import SAVE_SCREENSHOTS, fill_and_launch, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Small enough for 2 busy CPU cores (8 prompts a step, answers of at most 3 digits plus EOS;
# 6 steps: a counter that advances, a chart of several points, heatmap cells; each step of the
# two runs is suite time); the documentation's screenshots come from larger runs.
STEPS, BATCH, MAX_NEW_TOKENS = (20, 16, 16) if SAVE_SCREENSHOTS else (6, 8, 6)


def _prompt_file(tmp_path: Path, n: int = 48) -> Path:
    # Two-digit sums, answers reversed as in the built-in task: the upload and its preview.
    path = tmp_path / "sums.jsonl"
    with path.open("w") as fh:
        for i in range(n):
            a, b = 10 + i, 3 * i % 90 + 10
            fh.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)[::-1],
                                 "metadata": {"pass_rate": round((i + 0.5) / n, 3)}}) + "\n")
    return path




def _launch(page: Any, base: str, name: str, prompt_set: PromptSet, **fields: str) -> Run:
    page.fill("#id_name", name)
    page.select_option("#id_prompt_set", str(prompt_set.pk))
    page.fill("#id_model", "builtin:tiny")
    page.select_option("#id_backend", "hf")
    page.select_option("#id_device", "cpu")
    page.fill("#id_lr", "0.0002")  # the tiny model's learning rate (docs/architecture.md)
    page.fill("#id_total_steps", str(STEPS))
    page.fill("#id_batch_size", str(BATCH))
    page.fill("#id_max_new_tokens", str(MAX_NEW_TOKENS))
    page.fill("#id_save_every", "0")
    # Evaluation (built-in held-out set) only for the documentation's pictures: it costs time.
    page.fill("#id_eval_every", "10" if SAVE_SCREENSHOTS else "0")
    if SAVE_SCREENSHOTS:
        # Each set is offered as "name · owner · size".
        held_out = page.locator("#id_eval_set option", has_text="sums-48 · ")
        page.select_option("#id_eval_set", held_out.get_attribute("value"))
    page.fill("#id_eval_num_prompts", "50")
    page.fill("#id_eval_k", "4")
    return fill_and_launch(page, fields)


def test_researcher_path(live_server: Any, page: Any, screenshot: Callable[..., None],
                         start_worker: Callable[..., Any], tiny_model_dir: Path,
                         tmp_path: Path) -> None:
    from trainer.model import MODEL_DIR_ENV

    base = live_server.url
    User.objects.create_user("alice", password="alice-password-1")
    sign_in(page, base)

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

    # Launch form: five bad values are reported at once, each next to its field, in one
    # submission; the built-in model comes with its own learning rate.
    page.goto(base + "/runs/new/")
    assert float(page.input_value("#id_lr")) == 2e-4
    bad = {"samples_per_round": "2", "lr": "2", "top_p": "3", "temperature": "0"}
    for name, value in bad.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_prompt_set", str(prompt_set.pk))
    page.click("#launch-button")
    for name in (*bad, "name"):
        assert page.locator(f"#field-{name} .field-error").count() == 1, name
    assert "5 fields to fix" in page.locator("#form-errors").inner_text()
    screenshot("launch-form-error")
    for name, value in {"samples_per_round": "8", "top_p": "1", "temperature": "1"}.items():
        page.fill(f"#id_{name}", value)

    # The preflight: k responses for a subset of the set on the worker, with the tiny model,
    # then every algorithm's predicted budget. The panel updates itself (no reload) and the
    # form keeps its values.
    start_worker(queues="cpu", env={MODEL_DIR_ENV: str(tiny_model_dir)})
    page.fill("#id_lr", "0.0002")
    page.select_option("#id_backend", "hf")
    page.select_option("#id_device", "cpu")
    page.fill("#id_batch_size", str(BATCH))
    page.fill("#id_max_new_tokens", str(MAX_NEW_TOKENS))
    page.fill("#id_estimate_prompts", "32" if SAVE_SCREENSHOTS else "16")
    page.fill("#id_estimate_samples", "16" if SAVE_SCREENSHOTS else "8")
    page.click("#estimate-button")
    page.wait_for_selector("#estimate")
    page.evaluate("window.__notReloaded = true")
    assert page.locator("#estimate progress").count() == 1
    page.wait_for_function(
        "() => document.querySelector('#estimate').dataset.status === 'succeeded'",
        timeout=300_000)
    page.wait_for_function(
        "() => ['budget', 'passrates'].every(n => (document.getElementById('chart-estimate-' + n)"
        " || {dataset: {}}).dataset.loaded === '1')")
    assert page.evaluate("window.__notReloaded") is True
    table = page.locator("#estimate-table").inner_text()
    for label in ("GRPO n=4", "GRPO n=8", "GRPO n=16", "Reinforce-Ada Seq-pos",
                  "Reinforce-Ada Seq-balance", "Reinforce-Ada Est"):
        assert label in table, label
    assert page.input_value("#id_batch_size") == str(BATCH)
    screenshot("estimate", element="#preflight")

    run = _launch(page, base, "balance-tiny", prompt_set, algorithm="ada-balance")

    # The run page updates itself: mark the window and watch the step counter advance while
    # the mark (and so the page) survives; Delete appears when the run finishes, unreloaded.
    page.evaluate("window.__notReloaded = true")
    assert int(page.locator("#step-counter").inner_text()) < STEPS
    assert page.locator("#run-delete-button").count() == 0
    page.wait_for_function(
        f"() => document.querySelector('#run-status').dataset.status === 'succeeded'"
        f" && Number(document.querySelector('#step-counter').textContent) === {STEPS}",
        timeout=400_000)
    assert page.evaluate("window.__notReloaded") is True
    page.wait_for_selector("#run-delete-button")
    # Charts follow the status card: the reward chart has every step once the run is done.
    page.wait_for_function(
        f"() => (() => {{ const d = document.getElementById('chart-rewards');"
        f" return d.data && d.data[0].x.length === {STEPS}; }})()", timeout=30_000)
    page.wait_for_function("() => document.getElementById('chart-heatmap').dataset.loaded === '1'")
    screenshot("run-page")

    # Click a heatmap cell that has data: the prompt's history opens.
    target = page.evaluate(CELL, 0)
    assert target is not None
    target["prompt"] = page.evaluate("document.getElementById('chart-heatmap')._fig.prompt_ids"
                                     f"[{target['row']}]")
    page.mouse.click(target["x"], target["y"])
    page.wait_for_url(re.compile(rf"/runs/{run.pk}/prompts/{target['prompt']}/$"))
    assert page.locator(".step-block").count() >= 1
    assert page.locator("table.responses tbody tr").count() >= 1
    page.wait_for_function("() => document.getElementById('chart-passrate').dataset.loaded === '1'")
    # A prompt's page holds every response of its latest steps: the top of it is the picture.
    screenshot("prompt-history", full_page=False)

    # Clone as GRPO: the differences are shown before launch. Its name has markup, which
    # charts must show as typed.
    page.goto(base + f"/runs/new/?clone={run.pk}")
    page.fill("#id_name", "grpo <b>tiny</b>")
    page.select_option("#id_algorithm", "grpo")
    page.click("#launch-button")
    diff = page.locator("#clone-diff").inner_text()
    assert "algorithm" in diff and "grpo" in diff
    screenshot("clone-differences")
    page.click("#launch-button")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    grpo = Run.objects.get(name="grpo <b>tiny</b>")
    assert grpo.cloned_from_id == run.pk and grpo.algorithm == "grpo"
    page.wait_for_function(
        "() => document.querySelector('#run-status').dataset.status === 'succeeded'",
        timeout=400_000)
    # The clone's page says what it changed; GRPO's funnel says it eliminates nothing.
    page.wait_for_function("() => document.getElementById('chart-funnel').dataset.loaded === '1'")
    assert "algorithm" in page.locator("#source-diff").inner_text()
    assert page.evaluate("document.getElementById('chart-funnel').layout.title.text"
                         ).startswith("One round, no elimination")
    screenshot("clone-run-page", full_page=False)

    # Runs list: it fits 1,400 px (no sideways scroll); select both and compare.
    page.goto(base + "/")
    assert page.evaluate("(() => { const w = document.querySelector('.tablewrap');"
                         " return w.scrollWidth <= w.clientWidth; })()")
    screenshot("runs-list")
    page.check(f"#cmp-{run.pk}")
    page.check(f"#cmp-{grpo.pk}")
    page.click("#compare-button")
    page.wait_for_url(re.compile(r"/compare/\?"))
    page.wait_for_function("() => document.getElementById('chart-compare').dataset.loaded === '1'")
    page.wait_for_function("() => document.getElementById('chart-scatter').dataset.loaded === '1'")
    legend = page.evaluate("document.querySelector('#chart-compare .legend').textContent")
    assert "balance-tiny" in legend and "grpo <b>tiny</b>" in legend  # as typed, not bold
    # One x-axis control re-plots both charts in place and writes the choice into the URL.
    page.select_option("#compare-controls select[name=x]", "samples")
    page.select_option("#compare-controls select[name=metric]", "zero_adv_frac")
    for chart in ("chart-compare", "chart-compare-samples"):
        page.wait_for_function(f"() => document.getElementById('{chart}').layout.xaxis.title.text"
                               " === 'cumulative samples'")
    page.wait_for_function("() => document.getElementById('chart-compare').layout.yaxis.title.text"
                           ".startsWith('zero-advantage')")
    assert "algorithm" in page.locator("#config-diff").inner_text()
    screenshot("compare")
    shared = page.url
    assert "x=samples" in shared and "metric=zero_adv_frac" in shared
    # The shared URL opens the same view in a fresh page.
    other = page.context.new_page()
    other.goto(shared)
    other.wait_for_function("() => document.getElementById('chart-compare').dataset.loaded === '1'")
    assert other.evaluate("document.getElementById('chart-compare').layout.xaxis.title.text"
                          ) == "cumulative samples"
    assert other.input_value("#compare-controls select[name=metric]") == "zero_adv_frac"
    other.close()
    assert page.request.get(base + "/favicon.ico").status == 200


# A heatmap cell, scrolled into view: its row's label, and where to point the mouse.
CELL = """(row) => {
    const gd = document.getElementById('chart-heatmap'), t = gd.data[0], L = gd._fullLayout;
    for (let r = row; r < t.z.length; r++) for (let c = 0; c < t.z[r].length; c++) {
        if (t.z[r][c] === null) continue;
        const y = gd.getBoundingClientRect().top + L._size.t + L.yaxis.d2p(t.y[r]);
        window.scrollBy(0, y - window.innerHeight / 2);
        const box = gd.getBoundingClientRect();
        return {x: box.left + L._size.l + L.xaxis.d2p(t.x[c]),
                y: box.top + L._size.t + L.yaxis.d2p(t.y[r]), row: r, label: t.y[r]};
    }
    return null; }"""


def test_large_run_heatmap_bins_zoom_and_history(live_server: Any, page: Any,
                                                 screenshot: Callable[..., None]) -> None:
    """A run of more prompts than the chart has pixels: binned rows, said so; a click on a bin
    zooms into its rows at full resolution; a click on a prompt's cell opens its history."""
    from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run

    base = live_server.url
    owner = User.objects.create_user("alice", password="alice-password-1")
    # The documentation's picture: the 2,048 prompts over 100 steps of B = 32.
    size, steps, batch = (2048, 100, 32) if SAVE_SCREENSHOTS else (600, 6, 100)
    run = record_run(make_run(owner, make_prompt_set(f"rates-{size}", size),
                              name="large (simulated)", total_steps=steps, batch_size=batch))
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    page.wait_for_function("() => document.getElementById('chart-heatmap').dataset.loaded === '1'")
    fig = page.evaluate("document.getElementById('chart-heatmap')._fig")
    bins = -(-size // 256)
    subtitle = page.evaluate("document.getElementById('chart-heatmap').layout.title.subtitle.text")
    assert subtitle.startswith(f"{size:,} prompts in {-(-size // bins)} bins of {bins}")
    assert fig["bin_size"] == bins
    # Every row at least a few pixels tall, so hover and click reach each one.
    rows_px = page.evaluate("(() => { const L = document.getElementById('chart-heatmap')"
                            "._fullLayout; return L._size.h / L.yaxis._categories.length; })()")
    assert rows_px >= 3.5
    screenshot("heatmap-large", element="#heatmap-card")

    # Click a bin: its rows at full resolution, the range in the controls and the page URL.
    cell = page.evaluate(CELL, 2)
    lo, hi = fig["row_ranges"][cell["row"]]
    page.mouse.click(cell["x"], cell["y"])
    page.wait_for_function("() => document.getElementById('chart-heatmap')._fig.bin_size === 1")
    assert page.input_value("#heatmap-controls input[name=rows]") == f"{lo}-{hi}"
    assert f"rows={lo}-{hi}" in page.url
    zoomed = page.evaluate("document.getElementById('chart-heatmap')._fig")
    assert len(zoomed["prompt_ids"]) == hi - lo + 1

    # The zoomed URL is a link to the same view; a cell of one prompt opens its history.
    page.goto(page.url)
    page.wait_for_function("() => document.getElementById('chart-heatmap').dataset.loaded === '1'")
    cell = page.evaluate(CELL, 0)
    prompt_id = page.evaluate("document.getElementById('chart-heatmap')._fig.prompt_ids"
                              f"[{cell['row']}]")
    page.mouse.click(cell["x"], cell["y"])
    page.wait_for_url(re.compile(rf"/runs/{run.pk}/prompts/{prompt_id}/$"))
    assert page.locator(".step-block").count() >= 1


# Holds back the chart responses whose URL contains window.__slow, then flags window.__slowDone.
SLOW_FETCH = """
const plainFetch = window.fetch;
window.fetch = async function (url, options) {
  const resp = await plainFetch(url, options);
  if (window.__slow && String(url).includes(window.__slow)) {
    await new Promise(function (done) { setTimeout(done, 1500); });
    window.__slowDone = true;
  }
  return resp;
};
"""


def test_a_late_response_does_not_overwrite_a_newer_choice(live_server: Any, page: Any) -> None:
    """Two control changes in quick succession: the first request's response arrives last (held
    back here; a busy server does the same). The chart shows the second choice."""
    owner = User.objects.create_user("alice", password="alice-password-1")
    ps = make_prompt_set()
    runs = [record_run(make_run(owner, ps, name=f"r{i}", seed=i)) for i in range(2)]
    page.add_init_script(SLOW_FETCH)
    sign_in(page, live_server.url)
    page.goto(live_server.url + f"/compare/?runs={runs[0].pk},{runs[1].pk}")
    page.wait_for_function("() => document.getElementById('chart-compare').dataset.loaded === '1'")
    page.evaluate("window.__slow = 'metric=real_reward'")
    page.select_option("#compare-controls select[name=x]", "samples")  # held back
    page.select_option("#compare-controls select[name=metric]", "zero_adv_frac")
    page.wait_for_function("() => window.__slowDone === true")
    page.wait_for_timeout(500)  # time for the late response to be drawn, were it drawn
    title = "document.getElementById('chart-compare').layout.{}.title.text"
    assert page.evaluate(title.format("yaxis")).startswith("zero-advantage")
    assert page.evaluate(title.format("xaxis")) == "cumulative samples"
