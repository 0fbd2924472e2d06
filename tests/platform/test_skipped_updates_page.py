"""The run page warns when a run skipped optimiser steps for a non-finite gradient norm
(issue 21), and says nothing when it did not."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Step

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


def test_the_status_card_warns_of_skipped_updates(owner: User, owner_client: Client) -> None:
    run = record_run(make_run(owner, make_prompt_set("skips", size=8), algorithm="grpo",
                              total_steps=3, max_skipped_updates=5))
    url = reverse("dashboard:run_detail", args=[run.pk])
    assert 'id="skipped-updates"' not in owner_client.get(url).content.decode()
    for number, skipped in ((2, 1.0), (3, 2.0)):
        step = Step.objects.get(run=run, step=number)
        step.metrics = {**step.metrics, "skipped_updates": skipped}
        step.save()
    for page in (url, reverse("dashboard:run_status", args=[run.pk])):
        html = owner_client.get(page).content.decode()
        assert 'id="skipped-updates"' in html
        assert "3 optimiser steps skipped" in html and "in 2 training steps" in html
        assert "the latest step 3" in html and "more than 5 in a row" in html
