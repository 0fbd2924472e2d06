"""Drawing apart from keeping (``Algorithm.draws``, ``Algorithm.keep``) and an algorithm's own
options (``Algorithm.options``), proven by a toy defined in this file alone: PODS' shape
(arXiv 2504.13818), each prompt draws ``toy_pods_draws`` responses, an option the toy declares,
and the update keeps the n of them whose rewards vary most. It trains through
``trainer.train``; its option is a field of the launch form, checked by the API with the error
on the option, swept, stored, cloned and documented; the simulator prints what it kept."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from api.services import create_token
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Run

from tests.platform.dashboard_fixtures import make_prompt_set
from trainer import train
from trainer.algorithms import (
    Algorithm,
    CrossCheck,
    Option,
    register_algorithm,
    sample_batch,
    unregister_algorithm,
)
from trainer.backends.simulated import SimulatedBackend
from trainer.cli import simulate
from trainer.config import TrainConfig
from trainer.config_docs import config_reference
from trainer.recorders import ListRecorder
from trainer.result import SamplerResult
from trainer.types import Prompt

DRAWS = Option("toy_pods_draws", 8, "Toy PODS: responses each prompt draws, of which the update "
               "keeps the n whose rewards vary most.", "responses", ge=2, le=64)


def max_variance(pools: SamplerResult, n: int, seed: int) -> np.ndarray:
    """PODS' down-sample: of each pool, the n rewards of largest variance, which are its k
    highest and n - k lowest for the best k (ties: the fewest highest)."""
    kept = np.zeros(len(pools.rewards), dtype=bool)
    for i in range(pools.num_prompts):
        lo, hi = int(pools.offsets[i]), int(pools.offsets[i + 1])
        order = lo + np.argsort(pools.rewards[lo:hi], kind="stable")
        m = min(n, hi - lo)

        def chosen(k: int, order: np.ndarray = order, m: int = m) -> np.ndarray:
            return np.concatenate([order[len(order) - k:], order[:m - k]])

        k = max(range(m + 1), key=lambda k: (np.var(pools.rewards[chosen(k)]), -k))
        kept[chosen(k)] = True
    return kept


def draws_at_least_n(c: TrainConfig) -> Iterator[tuple[str, str]]:
    if c.toy_pods_draws < c.group_size:
        yield "toy_pods_draws", f"must be >= group_size ({c.group_size}), got {c.toy_pods_draws}"


TOY = Algorithm(
    name="toy-pods", label="Toy PODS", help="draw toy_pods_draws, keep the n of most variance",
    sampling="group", sample_step=sample_batch, draws=lambda c: c.toy_pods_draws,
    keep=max_variance, advantage="group", std_normalize=True, options=(DRAWS,),
    config_checks=(CrossCheck(("toy_pods_draws", "group_size"), draws_at_least_n,
                              {"toy_pods_draws": 2}),),
    max_samples_per_prompt=lambda c: c.toy_pods_draws,
    max_samples_per_step=lambda c: c.batch_size * c.toy_pods_draws,
    step_shape="batch_size x toy_pods_draws", summary_fields=("group_size", "toy_pods_draws"))


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    register_algorithm(TOY)
    yield TOY
    unregister_algorithm(TOY.name)


def balanced_as_can_be(positives: int, negatives: int, n: int) -> int:
    """The positives of the most varied n of binary rewards: as close to n/2 as the pool has."""
    return int(np.clip(n // 2, n - negatives, positives))


def test_the_toy_draws_its_own_number_and_keeps_its_own_choice(toy: Algorithm,
                                                                tmp_path: Path) -> None:
    prompts = [Prompt(id=f"p{i}", text=f"{i}+1=", answer="x", metadata={"pass_rate": r})
               for i, r in enumerate([0.1, 0.3, 0.5, 0.7, 0.9, 0.0, 1.0, 0.5])]
    cfg = TrainConfig.from_dict({"algorithm": toy.name, "backend": "simulated",
                                 "verifier": "exact", "batch_size": 8, "total_steps": 3,
                                 "save_every": 0, "eval_every": 0, "toy_pods_draws": 10})
    rec = ListRecorder()
    train(cfg, prompts, SimulatedBackend(cfg), rec, out_dir=tmp_path)
    for step in rec.steps:
        assert step.metrics["samples"] == 8 * 10 and step.metrics["kept_samples"] == 8 * 4
        for p in step.prompts:
            assert (p.samples, p.kept_positives + p.kept_negatives) == (10, 4)
            assert p.kept_positives == balanced_as_can_be(p.positives, p.negatives, 4), p
            kept = [s for s in step.samples if s.prompt_id == p.prompt_id and s.kept]
            # GRPO's advantage over what was kept: centred on the kept group.
            assert sum(s.advantage for s in kept) == pytest.approx(0.0, abs=1e-9)
    # The simulator draws and keeps the same way.
    rows = simulate(toy.name, [0.2, 0.5, 0.8], overrides={"toy_pods_draws": 6})["prompts"]
    for row in rows:
        assert row["samples"] == 6 and row["kept_positives"] + row["kept_negatives"] == 4
        assert row["kept_positives"] == balanced_as_can_be(row["positives"],
                                                           row["negatives"], 4)


def test_the_toys_option_is_checked_documented_and_stored(toy: Algorithm) -> None:
    assert TrainConfig(algorithm=toy.name).toy_pods_draws == 8
    errors = TrainConfig.dict_errors({"algorithm": toy.name, "toy_pods_draws": 65})
    assert [(e.field, e.reason) for e in errors] == [("toy_pods_draws",
                                                      "must be within [2, 64], got 65")]
    errors = TrainConfig.dict_errors({"algorithm": toy.name, "toy_pods_draws": 3})
    assert [e.field for e in errors] == ["toy_pods_draws"]  # its own check: >= n
    assert TrainConfig.dict_errors({"algorithm": toy.name, "toy_pods_draws": "8"})[0].reason \
        == "expected int, got '8'"
    reference = config_reference()
    assert f"## {toy.label} (`{toy.name}`)" in reference
    assert "| `toy_pods_draws` | `8` | [2, 64] | responses | Toy PODS: " in reference
    stored = TrainConfig.from_dict({"algorithm": toy.name, "toy_pods_draws": 6}).to_dict()
    assert stored["toy_pods_draws"] == 6 and TrainConfig.from_stored(stored).toy_pods_draws == 6


def api(owner: User) -> tuple[Client, dict[str, str]]:
    return Client(), {"Authorization": f"Bearer {create_token(owner, 'toy')[1]}"}


def post(owner: User, path: str, body: Any) -> Any:
    client, headers = api(owner)
    return client.post("/api/v1" + path, json.dumps(body), content_type="application/json",
                       headers=headers)


SIM = {"backend": "simulated", "batch_size": 4, "total_steps": 2, "eval_every": 0}


@pytest.mark.django_db
def test_the_form_and_the_api_take_the_toys_option(toy: Algorithm, owner: User,
                                                   owner_client: Client) -> None:
    make_prompt_set("arith", size=12)
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert f'<option value="{toy.name}">{toy.label}</option>' in page
    assert f"<legend>{toy.label} ({toy.name} only)</legend>" in page
    field = page[page.index('name="toy_pods_draws"') - 200:page.index('name="toy_pods_draws"')
                 + 200]
    assert 'min="2"' in field and 'max="64"' in field
    bad = post(owner, "/runs", {"name": "x", "prompt_set": "arith",
                                "config": {**SIM, "algorithm": toy.name, "toy_pods_draws": 1}})
    assert bad.status_code == 400
    assert [e["field"] for e in bad.json()["errors"]] == ["toy_pods_draws"]
    good = post(owner, "/runs", {"name": "p", "prompt_set": "arith",
                                 "config": {**SIM, "algorithm": toy.name, "toy_pods_draws": 6}})
    assert good.status_code == 201, good.content
    run = Run.objects.get(pk=good.json()["id"])
    assert run.config["toy_pods_draws"] == 6 and run.algorithm == toy.name
    # A clone starts from the run's value.
    clone = owner_client.get(reverse("dashboard:run_launch") + f"?clone={run.pk}")
    assert clone.context["form"]["toy_pods_draws"].value() == 6
    # A sweep over it: one run per value.
    sweep = post(owner, "/sweeps", {"name": "s", "prompt_set": "arith",
                                    "config": {**SIM, "algorithm": toy.name},
                                    "grid": "toy_pods_draws=4,8"})
    assert sweep.status_code == 201, sweep.content
    values: Sequence[int] = sorted(Run.objects.filter(sweep__name="s").values_list(
        "config__toy_pods_draws", flat=True))
    assert list(values) == [4, 8]
