"""Per-sample loss weights set by the algorithm, proven by a toy defined in this file alone:
DPPO's shape, it keeps each sample of a pool with probability 1/2 (seeded) and weights what it
kept by 1/2's inverse, so that the thinned update stays an unbiased estimate of the whole
pool's. The weights reach the update in every ``loss_agg_mode`` (a weight of 0 is an advantage
of 0; weights of c scale the loss by c), are recorded per sample, served by the API and
exported; the toy trains through ``trainer.train`` and the launch form offers it."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from api.services import create_token
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments import bundles
from experiments.models import Sample

from tests.platform.dashboard_fixtures import make_prompt_set, make_run, record_run
from trainer.algorithms import Algorithm, register_algorithm, sample_batch, unregister_algorithm
from trainer.config import LOSS_AGG_MODES, TrainConfig
from trainer.result import SamplerResult
from trainer.update import UpdateBatch, make_optimizer, update_policy

KEEP_PROBABILITY = 0.5


def thin_and_weight(pools: SamplerResult, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each sample kept with probability 1/2, a kept one weighted 2 (its inverse)."""
    kept = np.random.default_rng(seed).random(len(pools.rewards)) < KEEP_PROBABILITY
    return kept, np.where(kept, 1 / KEEP_PROBABILITY, 1.0)


TOY = Algorithm(
    name="toy-thinned", label="Toy: thinned and weighted",
    help="keeps each sample with probability 1/2, weighted 2", sampling="group",
    sample_step=sample_batch, draws=lambda c: 2 * c.group_size, keep=thin_and_weight,
    advantage="global", max_samples_per_prompt=lambda c: 2 * c.group_size,
    max_samples_per_step=lambda c: 2 * c.batch_size * c.group_size,
    step_shape="batch_size x 2 group_size", summary_fields=("group_size",))


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    register_algorithm(TOY)
    yield TOY
    unregister_algorithm(TOY.name)


def tiny_qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, pad_token_id=0)).eval()


def one_update(mode: str, advantages: list[float], weights: list[float]) -> dict[str, float]:
    """One mini-batch (the ratio is 1) of three prompts' ragged responses, no entropy bonus."""
    model = tiny_qwen2()
    config = TrainConfig(loss_agg_mode=mode, entropy_coef=0.0, max_grad_norm=1e6, lr=1e-3)
    opt, sched = make_optimizer(model, config)
    batch = UpdateBatch(prompt_ids=[[3, 4, 5], [3, 4, 5], [6, 7], [6, 7], [5, 8], [5, 8]],
                        response_ids=[[8, 9, 2], [10, 11], [12, 2], [13, 14, 15, 2], [9], [9, 9]],
                        advantages=advantages, groups=[0, 0, 1, 1, 2, 2],
                        old_logprobs=[None] * 6, weights=weights)
    return update_policy(model, opt, sched, batch, config, pad_token_id=0, seed=0)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_the_weights_reach_the_loss_in_every_aggregation(mode: str) -> None:
    adv = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0]
    plain = one_update(mode, adv, [1.0] * 6)
    # Weights of c scale the policy loss and its gradient by c (the denominators are the
    # unweighted token and response counts).
    doubled = one_update(mode, adv, [2.0] * 6)
    assert doubled["policy_loss"] == pytest.approx(2 * plain["policy_loss"], rel=1e-6)
    assert doubled["grad_norm"] == pytest.approx(2 * plain["grad_norm"], rel=1e-5)
    # A weight of 0 takes a response out of the loss as an advantage of 0 would (it still
    # counts in the denominators).
    dropped = one_update(mode, adv, [1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    zeroed = one_update(mode, [1.0, -1.0, 0.0, -0.5, 2.0, 0.0], [1.0] * 6)
    assert dropped["policy_loss"] == pytest.approx(zeroed["policy_loss"], rel=1e-6)
    assert dropped["grad_norm"] == pytest.approx(zeroed["grad_norm"], rel=1e-6)
    assert dropped["policy_loss"] != pytest.approx(plain["policy_loss"], rel=1e-3)


@pytest.mark.django_db
def test_the_toys_weights_are_recorded_served_and_exported(toy: Algorithm, owner: User,
                                                           owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert f'<option value="{toy.name}">{toy.label}</option>' in page
    # Trained through trainer.train (the simulated backend) and recorded as a worker does.
    run = record_run(make_run(owner, make_prompt_set(size=12), name="thinned",
                              algorithm=toy.name, total_steps=2, batch_size=4, group_size=4))
    rows = list(Sample.objects.filter(run=run).values_list("kept", "weight"))
    assert len(rows) == 2 * 4 * 8
    assert {w for kept, w in rows if kept} == {2.0} and {w for kept, w in rows if not kept} \
        == {1.0}
    assert 0.3 < np.mean([kept for kept, _ in rows]) < 0.7
    served = Client().get(f"/api/v1/runs/{run.pk}/samples", {"kept": "true"}, headers={
        "Authorization": f"Bearer {create_token(owner, 't')[1]}"}).json()["items"]
    assert served and {s["weight"] for s in served} == {2.0}
    buffer = io.BytesIO()
    bundles.write_bundle(run, buffer)
    import pyarrow.parquet as pq

    with zipfile.ZipFile(buffer) as zf:
        table = pq.read_table(io.BytesIO(zf.read("samples.parquet")))
    kept = table.column("kept").to_pylist()
    assert [w for w, k in zip(table.column("weight").to_pylist(), kept, strict=True) if k] \
        == [2.0] * sum(kept)
