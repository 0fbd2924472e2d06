"""The model field (issue 32, item 7). With the hf backend any server folder holding a
``config.json`` was accepted: the built-in model's own folder by absolute path gave 201 while
``/etc`` gave 400, which told a user which folders exist and let them load any model the
worker can read. A platform run now loads ``builtin:tiny`` or a model folder under the
operator's roots (``RADA_MODEL_ROOTS``), the launch form lists those, and every other value
gets the same sentence whether or not the path exists. The CLI keeps any local folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from api.services import create_token
from django.test import Client
from django.urls import reverse
from experiments import model_catalogue, services
from experiments.models import Run

from tests.fixtures.services import make_prompts
from trainer.config import BUILTIN_MODEL, TrainConfig

from .test_api import SIM, Api, _empty_queues  # noqa: F401 (autouse: the queues start empty)

HF = {**SIM, "backend": "hf"}


@pytest.fixture
def roots(tmp_path: Path, settings: Any) -> Path:
    """A model root with two models (one in the hub's org/name layout), a folder without a
    config.json, and a model outside any root."""
    root = tmp_path / "models"
    for folder in ("qwen-tiny", "org/math-7b", "not-a-model", "org/deep/too-deep"):
        (root / folder).mkdir(parents=True)
    for folder in ("qwen-tiny", "org/math-7b", "org/deep/too-deep"):
        (root / folder / "config.json").write_text("{}")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text("{}")
    settings.RADA_MODEL_ROOTS = [str(root)]
    return root


def launch(api: Api, model: str, backend: dict[str, Any] = HF) -> Any:
    ps_id = api.get("/prompt-sets").json()[0]["id"]
    return api.post("/runs", {"name": "m", "prompt_set": ps_id,
                              "config": {**backend, "model": model}})


@pytest.fixture
def api(user: Any) -> Api:
    services.import_prompt_set(owner=user, name="arith", prompts=make_prompts(12))
    return Api(create_token(user, "t")[1])


@pytest.mark.django_db
def test_only_offered_models_launch_and_the_refusal_never_says_whether_a_path_exists(
        roots: Path, api: Api, tiny_model_dir: Path) -> None:
    for model in (BUILTIN_MODEL, str(roots / "qwen-tiny"), str(roots / "org" / "math-7b")):
        response = launch(api, model)
        assert response.status_code == 201, (model, response.content)
        assert response.json()["model"] == model
    refused = [
        "/etc", str(tiny_model_dir),                        # folders that exist: one a model
        str(roots.parent / "outside"),                       # a model outside the roots
        str(roots / "not-a-model"), str(roots / "nope"),     # in a root: no model, nothing
        str(roots / "org" / "deep" / "too-deep"),            # deeper than two levels
        str(roots / ".." / "outside"), str(roots / "qwen-tiny") + "/",  # not as offered
        "qwen-tiny", "/no/such/model", "~/models/x",
    ]
    answers = set()
    for model in refused:
        response = launch(api, model)
        assert response.status_code == 400, (model, response.content)
        errors = response.json()["errors"]
        assert [e["field"] for e in errors] == ["config.model"] or \
            [e["field"] for e in errors] == ["model"], (model, errors)
        answers.add(errors[0]["reason"])
    assert answers == {model_catalogue.not_offered("")}  # one sentence for every path
    assert "RADA_MODEL_ROOTS" in answers.pop()
    assert Run.objects.count() == 3


@pytest.mark.django_db
def test_the_launch_form_offers_what_the_roots_hold(roots: Path, user: Any) -> None:
    assert model_catalogue.offered_models() == [
        BUILTIN_MODEL, str(roots / "org" / "math-7b"), str(roots / "qwen-tiny")]
    client = Client()
    client.force_login(user)
    page = client.get(reverse("dashboard:run_launch")).content.decode()
    datalist = page[page.index('<datalist id="model-choices">'):]
    datalist = datalist[:datalist.index("</datalist>")]
    for model in model_catalogue.offered_models():
        assert f'<option value="{model}">' in datalist
    assert "not-a-model" not in datalist and "too-deep" not in datalist


@pytest.mark.django_db
def test_the_simulated_backend_takes_a_label_and_the_cli_any_local_folder(
        roots: Path, api: Api) -> None:
    assert launch(api, "/etc", SIM).status_code == 201  # no model is loaded: a label
    outside = roots.parent / "outside"
    assert TrainConfig(model=str(outside)).errors() == []  # python -m trainer run: any folder
    assert [e.field for e in TrainConfig(model=str(roots / "nope")).errors()] == ["model"]
