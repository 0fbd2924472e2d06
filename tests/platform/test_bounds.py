"""Bounded work at launch: the config's bounds in the launch form, the per-queue cap on a step's
generation work (``RUN_MAX_STEP_TOKENS``), and values past the integer columns refused with the
field named instead of a database error."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import Run

from trainer.config import MAX_SEED, field_specs

from .dashboard_fixtures import make_prompt_set
from .test_dashboard_views import _launch_data, field_block

pytestmark = pytest.mark.django_db

SIM = {"backend": "simulated", "batch_size": 4, "total_steps": 2, "eval_every": 0}


def test_launch_form_inputs_carry_the_config_bounds(owner_client: Client) -> None:
    make_prompt_set()
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    checked = 0
    for spec in field_specs():
        hi = spec.get("le", spec.get("lt"))
        if hi is None or spec["name"] in ("prompts", "eval_prompts"):
            continue
        tag = re.search(rf'<input[^>]*name="{spec["name"]}"[^>]*>', page)
        assert tag, spec["name"]
        assert f'max="{hi}"' in tag.group(0), (spec["name"], tag.group(0))
        lo = spec.get("ge", spec.get("gt"))
        assert f'min="{lo}"' in tag.group(0), (spec["name"], tag.group(0))
        checked += 1
    assert checked > 30


def test_step_work_past_the_queue_cap_is_refused_naming_the_figure(
        owner: User, settings: object) -> None:
    settings.RUN_MAX_STEP_TOKENS = {"cpu": 10_000, "gpu": 10**9}
    ps = make_prompt_set(size=64)
    config = SIM | {"algorithm": "ada-balance", "batch_size": 32, "samples_per_round": 8,
                    "max_rounds": 4, "max_new_tokens": 16}  # 32 x 8 x 4 x 16 = 16,384 tokens
    with pytest.raises(services.LaunchError) as exc:
        services.launch_run(owner, "too much", config, ps, queue="cpu")
    assert exc.value.field == "max_new_tokens"
    assert "16,384 tokens" in exc.value.reason and "at most 10,000" in exc.value.reason
    assert "RUN_MAX_STEP_TOKENS" in exc.value.reason and "cpu queue" in exc.value.reason
    assert not Run.objects.exists()
    # The gpu queue's cap is larger; within the cpu cap is fine too.
    assert services.launch_errors(config, name="x", prompt_set=ps, queue="gpu",
                                  retention="all") == []
    assert services.launch_errors(config | {"max_new_tokens": 8}, name="x", prompt_set=ps,
                                  queue="cpu", retention="all") == []


def test_dapo_step_work_reads_its_options_and_the_prompt_set_bounds_no_limit(
        owner: User, settings: object) -> None:
    """DAPO's work is G x n x max_num_gen_batches (its options, not the defaults); with 0 (no
    limit) a step draws each prompt at most once: the set's size x n bounds it."""
    settings.RUN_MAX_STEP_TOKENS = {"cpu": 10_000, "gpu": 10**9}
    ps = make_prompt_set(size=64)
    dapo = SIM | {"algorithm": "dapo", "batch_size": 8, "group_size": 4, "max_new_tokens": 16}
    ok = services.launch_errors(dapo | {"max_num_gen_batches": 2}, name="x", prompt_set=ps,
                                queue="cpu", retention="all")  # 8 x 4 x 2 x 16 = 1,024
    assert ok == []
    many = services.launch_errors(dapo | {"max_num_gen_batches": 100}, name="x",
                                  prompt_set=ps, queue="cpu", retention="all")
    # 100 batches of 8 would be 51,200 tokens, but 64 prompts x 4 x 16 = 4,096 is the most.
    assert many == []
    settings.RUN_MAX_STEP_TOKENS = {"cpu": 4_000, "gpu": 10**9}
    (field, reason), = services.launch_errors(dapo | {"max_num_gen_batches": 0}, name="x",
                                              prompt_set=ps, queue="cpu", retention="all")
    assert field == "max_new_tokens" and "4,096 tokens" in reason
    assert "64 prompts of the set x 4 = 256 responses" in reason


def test_work_cap_error_shows_next_to_the_field_in_the_form(owner_client: Client,
                                                           settings: object) -> None:
    settings.RUN_MAX_STEP_TOKENS = {"cpu": 1000, "gpu": 10**9}
    ps = make_prompt_set(size=64)
    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _launch_data(ps, batch_size=8, max_new_tokens=16))
    assert resp.status_code == 200
    html = resp.content.decode()
    block = field_block(html, "max_new_tokens")
    assert "the cpu queue allows at most 1,000 per step" in block
    assert not Run.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("seed", MAX_SEED + 1), ("total_steps", 2**31),
                                               ("ppo_epochs", 10**9), ("max_rounds", 10**6)])
def test_values_past_the_columns_are_form_errors_not_server_errors(
        owner_client: Client, field: str, value: int) -> None:
    ps = make_prompt_set(size=64)
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(ps, **{field: value}))
    assert resp.status_code == 200
    html = resp.content.decode()
    block = field_block(html, field)
    # One wording for every field: the config's own check, naming the bounds and the value.
    assert "must be within" in block and f"got {value}" in block
    assert not Run.objects.exists()
    with pytest.raises(services.LaunchError) as exc:
        services.launch_run(Run._meta.get_field("owner").related_model.objects.first(), "x",
                            SIM | {field: value}, ps)
    assert exc.value.field == field


# --- ranks per queue (world_size, issue 22) ------------------------------------------------------

VLLM = SIM | {"backend": "vllm", "batch_size": 8}


def test_world_size_past_what_the_queue_can_place_is_refused_naming_the_figure(
        owner: User, settings: object) -> None:
    settings.RUN_MAX_WORLD_SIZE = {"cpu": 2, "gpu": 1, "ray": 8}
    ps = make_prompt_set(size=64)
    with pytest.raises(services.LaunchError) as exc:
        services.launch_run(owner, "too wide", VLLM | {"world_size": 4}, ps, queue="cpu")
    assert exc.value.field == "world_size"
    assert exc.value.reason == ("world_size 4 needs 4 CPU processes; the cpu queue has at most "
                                "2 (RUN_MAX_WORLD_SIZE_CPU)")
    errors = services.launch_errors(VLLM | {"world_size": 8, "device": "cuda"}, name="x",
                                    prompt_set=ps, queue="gpu", retention="all")
    assert errors == [("world_size", "world_size 8 needs 8 GPUs; the gpu queue has at most 1 "
                                     "(RUN_MAX_WORLD_SIZE_GPU)")]
    assert not Run.objects.exists()
    # Within the queue's figure: no complaint (the run waits for free ranks, if need be).
    for queue, size in (("cpu", 2), ("ray", 8), ("gpu", 1)):
        assert services.launch_errors(VLLM | {"world_size": size}, name="x", prompt_set=ps,
                                      queue=queue, retention="all") == [], queue


def test_the_ray_queue_refuses_a_one_rank_run(owner: User) -> None:
    ps = make_prompt_set(size=64)
    errors = services.launch_errors(VLLM, name="x", prompt_set=ps, queue="ray",
                                    retention="all")
    assert [f for f, _ in errors] == ["world_size"]
    assert "world_size >= 2" in errors[0][1] and "gpu queue" in errors[0][1]
    # A cuda run may go to either GPU queue, never to cpu.
    assert services.launch_errors(VLLM | {"device": "cuda", "world_size": 2}, name="x",
                                  prompt_set=ps, queue="ray", retention="all") == []
    cpu = services.launch_errors(VLLM | {"device": "cuda"}, name="x", prompt_set=ps,
                                 queue="cpu", retention="all")
    assert cpu == [("queue", "device 'cuda' needs a GPU: choose the gpu or ray queue")]


def test_a_split_the_queue_can_never_place_is_refused_naming_the_figure(
        owner: User, owner_client: Client, settings: object) -> None:
    """Each role of a rollout/train split needs places of its own: past world_size's figure
    as any run, and where the queue's cluster declares its roles (nodes advertising rada_rollout
    / rada_train), past each role's."""
    settings.RUN_MAX_WORLD_SIZE = {"cpu": 4, "gpu": 1, "ray": 8}
    settings.RUN_MAX_ROLLOUT_RANKS = {"ray": 2}
    settings.RUN_MAX_TRAIN_RANKS = {"ray": 4}
    ps = make_prompt_set(size=64)
    split = VLLM | {"device": "cuda"}

    def errors(queue: str, **config: int) -> list[tuple[str, str]]:
        return services.launch_errors(split | config, name="x", prompt_set=ps, queue=queue,
                                      retention="all")

    # Undeclared (the gpu queue): the split's ranks are world_size's, bounded by its figure.
    assert errors("gpu", world_size=2, rollout_ranks=1) == [
        ("world_size", "world_size 2 needs 2 GPUs; the gpu queue has at most 1 "
                       "(RUN_MAX_WORLD_SIZE_GPU)")]
    assert services.launch_errors(VLLM | {"world_size": 4, "rollout_ranks": 3}, name="x",
                                  prompt_set=ps, queue="cpu", retention="all") == []
    # Declared (ray): 3 rollout ranks where 2 nodes' GPUs generate; 6 train ranks where 4 train.
    assert errors("ray", world_size=5, rollout_ranks=3) == [
        ("rollout_ranks", "rollout_ranks 3 of world_size 5 needs 3 rollout ranks; the ray "
                          "queue places at most 2 (nodes with rada_rollout: "
                          "RUN_MAX_ROLLOUT_RANKS_RAY)")]
    assert errors("ray", world_size=8, rollout_ranks=2) == [
        ("rollout_ranks", "rollout_ranks 2 of world_size 8 needs 6 train ranks; the ray queue "
                          "places at most 4 (nodes with rada_train: RUN_MAX_TRAIN_RANKS_RAY)")]
    assert [f for f, _ in errors("ray", world_size=8, rollout_ranks=3)] == ["rollout_ranks"] * 2
    # Within both figures, and a colocated run (no role asked): no complaint.
    assert errors("ray", world_size=6, rollout_ranks=2) == []
    assert errors("ray", world_size=8) == []
    # The launch refuses it, the form shows it on the field and says each role's figure.
    with pytest.raises(services.LaunchError) as exc:
        services.launch_run(owner, "too many", split | {"world_size": 5, "rollout_ranks": 3},
                            ps, queue="ray")
    assert exc.value.field == "rollout_ranks" and "at most 2" in exc.value.reason
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert "world_size up to 8 (rollout ranks up to 2, train ranks up to 4)" in page
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(
        ps, backend="vllm", device="cuda", queue="ray", world_size=8, rollout_ranks=2))
    assert resp.status_code == 200
    assert "needs 6 train ranks; the ray queue places at most 4" in field_block(
        resp.content.decode(), "rollout_ranks")
    assert not Run.objects.exists()


def test_launch_form_offers_the_ranks_and_memory_options_and_says_each_queues_figure(
        owner_client: Client, settings: object) -> None:
    settings.RUN_MAX_WORLD_SIZE = {"cpu": 2, "gpu": 1, "ray": 16}
    ps = make_prompt_set(size=64)
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert "GPUs and machines" in page
    for name in ("world_size", "fsdp_bucket_mb", "activation_checkpointing",
                 "vllm_sleep_mode"):
        assert f'name="{name}"' in page, name
    assert "FSDP2 shard" in page  # world_size's own help
    assert "world_size up to 16" in page and "ray: drivers of runs across GPUs" in page
    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _launch_data(ps, backend="vllm", world_size=3))
    assert resp.status_code == 200
    html = resp.content.decode()
    block = field_block(html, "world_size")
    assert "world_size 3 needs 3 CPU processes; the cpu queue has at most 2" in block
    assert not Run.objects.exists()
