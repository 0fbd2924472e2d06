"""A run trained on vLLM's real engine (its CPU build here and on CI), recorded through the
platform's recorder, in headless Chromium: the run page draws the rollout/policy log-prob chart
that only vllm runs have, with both traces, and the step-time chart shows the weight sync. With
SAVE_SCREENSHOTS=1 the picture goes to docs/screenshots/vllm-run-page.png."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import Prompt, Run, Step

from tests.fixtures.vllm import TEST_KV_CACHE_GIB, requires_vllm
from tests.platform.dashboard_fixtures import make_prompt_set

from .conftest import SAVE_SCREENSHOTS, sign_in

pytestmark = [requires_vllm(), pytest.mark.browser, pytest.mark.slow,
              pytest.mark.django_db(transaction=True)]

STEPS = 8 if SAVE_SCREENSHOTS else 2


def _record_vllm_run(owner: User, model_dir: Path, backend: Any) -> Run:
    """Train ``STEPS`` steps of ada-balance on the session's engine (its max_new_tokens is 6)
    and write them through the worker's recorder."""
    from trainer.config import TrainConfig
    from trainer.loop import train
    from trainer.types import Prompt as TrainerPrompt
    from workers.recorder import PostgresRecorder

    prompt_set = make_prompt_set(name="arith-vllm", size=16)
    config = TrainConfig(model=str(model_dir), backend="vllm", rollout_dtype="float32",
                         vllm_kv_cache_gib=TEST_KV_CACHE_GIB, algorithm="ada-balance",
                         batch_size=4, group_size=4, samples_per_round=4, max_rounds=2,
                         total_steps=STEPS, lr=2e-4, save_every=0, eval_every=0,
                         max_new_tokens=6, seed=3, verifier="exact").validate()
    run = Run.objects.create(owner=owner, name="tiny on vllm", algorithm=config.algorithm,
                             config=config.to_dict(), prompt_set=prompt_set, model=config.model,
                             seed=config.seed, total_steps=STEPS)
    prompts = [TrainerPrompt(id=str(p.pk), text=p.text, answer=p.answer, metadata=p.metadata)
               for p in Prompt.objects.filter(prompt_set=prompt_set).order_by("index")]
    with tempfile.TemporaryDirectory() as tmp:
        result = train(config, prompts, backend, PostgresRecorder(run.pk), out_dir=Path(tmp))
    assert result.status == "completed"
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, current_step=STEPS)
    return Run.objects.get(pk=run.pk)


def test_vllm_run_page_draws_the_rollout_gap(live_server: Any, page: Any, tiny_model_dir: Path,
                                             restore_policy: Any,
                                             screenshot: Callable[..., None]) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = _record_vllm_run(owner, tiny_model_dir, restore_policy)
    gaps = [s.metrics["rollout_logprob_diff_max"] for s in Step.objects.filter(run=run)]
    assert len(gaps) == STEPS

    base = live_server.url
    sign_in(page, base)
    page.goto(base + f"/runs/{run.pk}/")
    for chart in ("chart-rollout", "chart-timing"):
        page.wait_for_function(f"() => document.getElementById('{chart}').dataset.loaded === '1'")
        assert page.locator(f"#{chart} .main-svg").count() >= 1  # Plotly drew it
    traces = page.evaluate("document.getElementById('chart-rollout').data"
                           ".map(t => [t.name, t.y.length])")
    assert traces == [["mean over kept tokens", STEPS], ["max over kept tokens", STEPS]]
    drawn = page.evaluate("document.getElementById('chart-rollout').data[1].y")
    assert drawn == pytest.approx(gaps)  # the recorded values, not a placeholder
    timing = page.evaluate("document.getElementById('chart-timing').data.map(t => t.name)")
    assert "weight sync" in timing
    assert page.evaluate("document.getElementById('chart-rollout').layout.yaxis.exponentformat"
                         ) == "e"
    screenshot("vllm-run-page", element="#chart-rollout")
