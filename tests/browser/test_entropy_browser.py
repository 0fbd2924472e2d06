"""The run page's entropy chart in headless Chromium (issue 34 item 7): the token-mean and the
run's loss_agg_mode aggregate (verl's actor/entropy) drawn apart, each with its legend and its
unit. The run trains the warm-started tiny model with the hf backend (the simulated backend
trains nothing, so it has no entropy) under seq-mean-token-sum, whose aggregate is per response,
and is recorded through the platform's recorder. With SAVE_SCREENSHOTS=1 the chart's picture
goes to docs/screenshots/entropy.png (from a longer run)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.models import Prompt, Run, Step

from tests.platform.dashboard_fixtures import make_prompt_set, make_run
from trainer.config import TrainConfig

from .conftest import SAVE_SCREENSHOTS, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS, BATCH = (30, 8) if SAVE_SCREENSHOTS else (3, 4)


def record_hf_run(run: Run, model_dir: Path) -> None:
    """Train the run's config on the hf backend with ``model_dir`` and record its steps as a
    worker does."""
    from trainer import train
    from trainer.backends import make_backend
    from trainer.recorders import ListRecorder
    from trainer.types import Prompt as TrainerPrompt
    from workers.recorder import PostgresRecorder

    config = TrainConfig.from_dict({**run.config, "backend": "hf", "device": "cpu",
                                    "model": str(model_dir), "eval_every": 0,
                                    "save_every": 0})
    prompts = [TrainerPrompt(id=str(p.pk), text=p.text, answer=p.answer, metadata=p.metadata)
               for p in Prompt.objects.filter(prompt_set=run.prompt_set).order_by("index")]
    recorder = ListRecorder()
    with tempfile.TemporaryDirectory() as tmp:
        train(config, prompts, make_backend(config, prompts), recorder, out_dir=Path(tmp))
    postgres = PostgresRecorder(run.pk)
    for record in recorder.steps:
        postgres.on_step(record)


def test_the_entropy_chart_draws_the_token_mean_and_the_modes_aggregate(
        live_server: Any, page: Any, screenshot: Callable[..., None],
        tiny_model_dir: Path) -> None:
    owner = User.objects.create_user("alice", password="alice-password-1")
    run = make_run(owner, make_prompt_set("sums-32", 32), name="grpo, seq-mean-token-sum",
                   algorithm="grpo", total_steps=STEPS, batch_size=BATCH, lr=2e-3,
                   max_new_tokens=6, loss_agg_mode="seq-mean-token-sum")
    record_hf_run(run, tiny_model_dir)
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert len(steps) == STEPS
    # Per response (token sums) is larger than per token: the two are different figures.
    assert all(s.metrics["entropy_agg"] > s.metrics["entropy"] > 0 for s in steps)

    sign_in(page, live_server.url)
    page.goto(live_server.url + f"/runs/{run.pk}/")
    page.wait_for_function("() => document.getElementById('chart-entropy') && "
                           "document.getElementById('chart-entropy').dataset.loaded === '1'")
    layout = page.evaluate("document.getElementById('chart-entropy').layout")
    assert layout["title"]["text"] == "Policy entropy: token-mean and by loss_agg_mode"
    assert layout["yaxis"]["title"]["text"] == "per token (nats)"
    assert layout["yaxis2"]["title"]["text"] == "per response (nats)"
    traces = dict(page.evaluate("document.getElementById('chart-entropy').data"
                                ".map(t => [t.name, Array.from(t.y)])"))
    token_mean = "token-mean: every token weighs the same (nats per token)"
    agg = ("by loss_agg_mode = seq-mean-token-sum, as the entropy bonus and verl's "
           "actor/entropy (nats per response)")
    assert traces[token_mean] == pytest.approx([s.metrics["entropy"] for s in steps])
    assert traces[agg] == pytest.approx([s.metrics["entropy_agg"] for s in steps])
    legend = page.locator("#chart-entropy .legendtext").all_text_contents()
    assert set(legend) == {token_mean, agg}  # on the page, not only in the data
    screenshot("entropy", element="#chart-entropy")
