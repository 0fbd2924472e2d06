"""The experiments service layer on a real PostgreSQL and a real Redis (no worker here)."""

from __future__ import annotations

import base64
import io
import json
import os
from typing import Any

import pytest
import redis
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from experiments import selectors, services
from experiments.models import Prompt, PromptSet, Run, Sample, Step
from experiments.services import LaunchError

from tests.fixtures.services import make_prompts

SIM = {"backend": "simulated", "batch_size": 4, "total_steps": 3}


def queued_messages(queue: str = "cpu") -> list[dict[str, Any]]:
    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])
    return [json.loads(m) for m in client.lrange(queue, 0, -1)]


@pytest.fixture(autouse=True)
def _empty_queues() -> None:
    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])
    client.delete("cpu", "gpu")


def test_import_prompt_set_stores_rows_in_order(db: None, user: Any) -> None:
    prompts = make_prompts(5, pass_rate=0.25)
    ps = services.import_prompt_set(owner=user, name="five", prompts=prompts)
    rows = list(Prompt.objects.filter(prompt_set=ps).order_by("index"))
    assert ps.size == 5 and [r.index for r in rows] == [0, 1, 2, 3, 4]
    assert [(r.text, r.answer) for r in rows] == [(p.text, p.answer) for p in prompts]
    assert rows[0].metadata == {"pass_rate": 0.25}
    assert list(selectors.prompt_set_preview(ps, limit=2)) == rows[:2]


def test_import_prompt_set_is_all_or_nothing(db: None, user: Any) -> None:
    from trainer.types import Prompt as P

    # The fourth prompt fails after three rows went into the COPY (a NUL byte, which
    # PostgreSQL's text cannot hold: refused by name before the database would).
    bad = make_prompts(3) + [P(id="x", text="nul \x00 byte", answer="1")]
    with pytest.raises(LaunchError, match="prompt 4 contains a NUL"), transaction.atomic():
        services.import_prompt_set(owner=user, name="bad", prompts=bad)
    assert not PromptSet.objects.filter(name="bad").exists()
    assert not Prompt.objects.exists()


def test_duplicate_prompt_set_name_is_a_field_error(db: None, user: Any) -> None:
    services.import_prompt_set(owner=user, name="dup", prompts=make_prompts(2))
    with pytest.raises(LaunchError) as info:
        services.import_prompt_set(owner=user, name="dup", prompts=make_prompts(2))
    assert info.value.field == "name"


def test_upload_rejects_bad_file_whole(db: None, user: Any) -> None:
    pytest.importorskip("trainer.data", reason="trainer.data (prompt loaders) not on main yet")
    good = b'{"prompt": "1+1=", "answer": "2"}\n'
    bad = good + b'{"prompt": "2+2="}\n'
    with pytest.raises(LaunchError) as info:
        services.create_prompt_set_from_upload(user, "upload", io.BytesIO(bad), "p.jsonl")
    assert info.value.field == "file" and "2" in info.value.reason
    assert not PromptSet.objects.exists() and not Prompt.objects.exists()
    ps = services.create_prompt_set_from_upload(user, "upload", io.BytesIO(good * 3),
                                              "p.jsonl")
    assert ps.size == 3 and ps.prompts.count() == 3


def test_builtin_prompt_set(db: None, user: Any) -> None:
    pytest.importorskip("trainer.tasks", reason="trainer.tasks (built-in task) not on main yet")
    ps = services.create_builtin_prompt_set(user, "arith", 20, 1, 2, 0)
    assert ps.source == PromptSet.Source.BUILTIN and ps.size == 20
    texts = list(ps.prompts.values_list("text", flat=True))
    assert len(texts) == 20 and all(t.endswith("=") for t in texts)


@pytest.mark.parametrize(("config", "field"), [
    ({"algorithm": "ppo"}, "algorithm"),
    ({"group_size": 8, "samples_per_round": 4}, "samples_per_round"),
    ({"lerning_rate": 0.1}, "lerning_rate"),
    ({"temperature": 0.001}, "temperature"),
])
def test_launch_validates_with_trainer_config(db: None, user: Any, prompt_set_factory: Any,
                                              config: dict[str, Any], field: str) -> None:
    from trainer.config import ConfigError, TrainConfig

    ps = prompt_set_factory(8)
    with pytest.raises(ConfigError) as cli:
        TrainConfig.from_dict(config)
    with pytest.raises(ValidationError) as info:
        services.launch_run(user, "bad", config, ps)
    # The same field and reason as the CLI, first, in a form-friendly error dict (next to the
    # platform's own: a batch of 32 from 8 prompts).
    assert info.value.message_dict == {cli.value.field: [cli.value.reason],
                                       "batch_size": ["larger than the prompt set (8 prompts)"]}
    assert info.value.field == field
    assert not Run.objects.exists()


def test_launch_checks_platform_fields(db: None, user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(2)
    for kwargs, field in [({"queue": "tpu"}, "queue"), ({"retention": "some"}, "retention")]:
        with pytest.raises(LaunchError) as info:
            services.launch_run(user, "x", SIM | {"batch_size": 2}, ps, **kwargs)
        assert info.value.field == field
    with pytest.raises(LaunchError) as info:
        services.launch_run(user, "x", SIM, ps)  # batch of 4 from 2 prompts
    assert info.value.field == "batch_size"
    # Every error at once, each on its field.
    with pytest.raises(LaunchError) as info:
        services.launch_run(user, " ", SIM | {"group_size": 1, "lr": 2.0}, ps, queue="tpu",
                            retention="some")
    assert set(info.value.message_dict) == {"group_size", "lr", "name", "queue", "retention",
                                            "batch_size"}
    assert not Run.objects.exists()


def test_launch_stores_validated_config_and_enqueues_after_commit(
        transactional_db: None, user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    with transaction.atomic():
        run = services.launch_run(user, "sim", SIM, ps, retention="kept")
        # Not yet committed: no worker may see the id before the row exists.
        assert queued_messages() == []
    messages = queued_messages()
    assert len(messages) == 1
    assert messages[0]["headers"]["task"] == "workers.execute_run"
    args, _kwargs, _embed = json.loads(base64.b64decode(messages[0]["body"]))
    assert args == [run.pk]
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.retention == "kept"
    assert run.config["batch_size"] == 4 and run.config["group_size"] == 4  # defaults filled
    assert (run.algorithm, run.total_steps, run.model) == ("ada-balance", 3, "builtin:tiny")


def test_rolled_back_launch_enqueues_nothing(transactional_db: None, user: Any,
                                             prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.launch_run(user, "sim", SIM, ps)
        raise RuntimeError("form failed later")
    assert queued_messages() == [] and not Run.objects.exists()


def test_gpu_run_goes_to_gpu_queue(transactional_db: None, user: Any,
                                   prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    services.launch_run(user, "g", SIM, ps, queue="gpu")
    assert len(queued_messages("gpu")) == 1 and queued_messages("cpu") == []


def test_permissions(db: None, user: Any, other_user: Any, staff_user: Any,
                     prompt_set_factory: Any) -> None:
    run = services.launch_run(user, "mine", SIM, prompt_set_factory(8))
    for action in (services.request_cancel, services.delete_run, services.relaunch_run):
        with pytest.raises(PermissionDenied):
            action(run, other_user)
    assert services.can_modify_run(run, user) and services.can_modify_run(run, staff_user)
    assert not services.can_modify_run(run, other_user)
    clone = services.relaunch_run(run, staff_user)
    assert clone.cloned_from == run and clone.config == run.config and clone.owner == staff_user


def test_cancel_queued_run_is_immediate(db: None, user: Any, prompt_set_factory: Any) -> None:
    run = services.launch_run(user, "q", SIM, prompt_set_factory(8))
    run = services.request_cancel(run, user)
    assert run.status == Run.Status.CANCELLED and run.finished_at is not None


def test_cancel_running_run_sets_flag(db: None, user: Any, prompt_set_factory: Any) -> None:
    run = services.launch_run(user, "r", SIM, prompt_set_factory(8))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    run = services.request_cancel(run, user)
    assert run.status == Run.Status.RUNNING and run.cancel_requested


def test_delete_run_removes_records(db: None, user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    run = services.launch_run(user, "d", SIM, ps)
    keep = services.launch_run(user, "k", SIM, ps)
    prompt = ps.prompts.first()
    for r in (run, keep):
        Step.objects.create(run=r, step=1)
        Sample.objects.create(run=r, step=1, prompt=prompt, index=0, round=1, response="x",
                              tokens=1, reward=1.0, kept=True, advantage=0.5)
    services.delete_run(run, user)
    assert not Run.objects.filter(pk=run.pk).exists()
    assert Step.objects.filter(run=keep).count() == 1 and Sample.objects.count() == 1


def test_selectors_filter_runs(db: None, user: Any, prompt_set_factory: Any) -> None:
    ps = prompt_set_factory(8)
    a = services.launch_run(user, "alpha grpo", SIM | {"algorithm": "grpo"}, ps)
    b = services.launch_run(user, "beta", SIM, ps)
    assert list(selectors.run_list(algorithm="grpo")) == [a]
    assert list(selectors.run_list(search="bet")) == [b]
    assert set(selectors.run_list(prompt_set_id=ps.pk)) == {a, b}
    assert selectors.run_detail(b.pk).status == "queued"


def test_auto_verifier_follows_the_prompt_set(db: None, user: Any,
                                              prompt_set_factory: Any) -> None:
    """``verifier = "auto"`` is resolved at launch from the prompt set's source and stored: exact
    match for the built-in arithmetic task, math-verify for an uploaded set (a set of word
    problems scored by exact match would read 0 reward everywhere); an explicit choice stays."""
    uploaded = prompt_set_factory(8)
    builtin = services.create_builtin_prompt_set(user, "arith-auto", 8, 1, 2, 0)
    assert services.launch_run(user, "up", SIM, uploaded).config["verifier"] == "math"
    assert services.launch_run(user, "bi", SIM, builtin).config["verifier"] == "exact"
    chosen = services.launch_run(user, "ex", {**SIM, "verifier": "exact"}, uploaded)
    assert chosen.config["verifier"] == "exact"
