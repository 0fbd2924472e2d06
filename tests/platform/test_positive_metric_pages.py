"""The run's pages count positives as the run did (issue 34 item 4): a sample row stores the
shaped reward, so with overlong shaping on and ``positive_metric = acc`` the prompt history's
per-round positives and the pass-rate fallback read the verifier's score back from the reward
and the token count. Checked against the sampler's own counts (``PromptStep``) and the trainer's
``pass_rate_le_*`` metrics, for both metrics."""

from __future__ import annotations

import pytest
from dashboard import selectors
from django.contrib.auth.models import User
from experiments.models import Prompt, PromptStep, Step

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("metric", ["acc", "seq_reward"])
def test_prompt_history_and_pass_rates_count_positives_as_the_run_did(owner: User,
                                                                     metric: str) -> None:
    ps = make_prompt_set(size=8)
    run = record_run(make_run(owner, ps, name=f"overlong-{metric}", algorithm="ada-pos",
                              total_steps=2, batch_size=8, max_new_tokens=16,
                              overlong_buffer_len=16, positive_metric=metric))
    differs = 0
    for prompt in Prompt.objects.filter(prompt_set=ps):
        history = selectors.prompt_history(run, prompt, page_steps=2)
        for s in history["steps"]:
            recorded = PromptStep.objects.get(run=run, prompt=prompt, step=s.step)
            assert sum(r["positives"] for r in s.rounds) == recorded.positives, (prompt, s.step)
            assert sum(r["negatives"] for r in s.rounds) == recorded.negatives
            # Right by the verifier, not above 0.5 once shaped (penalty -tokens / 16 here).
            differs += sum(r.reward <= 0.5 < r.reward + r.tokens / 16 for r in s.responses)
        words = "the verifier's score (before overlong shaping)" if metric == "acc" \
            else "its reward"
        assert history["positive_of"] == words
    assert differs > 0  # shaping moved some right answers to or below the threshold
    thresholds = (0.0, 0.25, 0.5)
    fallback = selectors.low_pass_rate_fractions(run, thresholds)
    steps = list(Step.objects.filter(run=run).order_by("step"))
    assert fallback["fractions"] == [[st.metrics[f"pass_rate_le_{t:g}"] for st in steps]
                                     for t in thresholds]
