"""Names read as what they are (issue 32, item 4). A second user uploaded prompt sets named
"arithmetic (built-in)" with a zero-width space, with a no-break space, with a Cyrillic "а":
the launch form's drop-down showed four identical entries, the impostor's first, no owner
shown. Run and sweep names took newlines, ESC sequences, BEL, DEL and C1 controls and
invisible-only names; the model took bidirectional controls that names refused.

Now one rule holds for every visible line of text (``trainer.visible``, through the config's
validation and ``check_fits_columns``), prompt set names are unique under their confusable
skeleton (``experiments.names``), "(built-in)" is the platform's alone, and every list shows a
set's owner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api.services import create_token
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from experiments import services
from experiments.models import PromptSet, Run, Sweep

from tests.fixtures.services import make_prompts

from .test_api import SIM, Api, _empty_queues  # noqa: F401 (autouse: the queues start empty)

BUILTIN = "arithmetic (built-in)"
# The attack as it was made, and the spellings the rule must catch alike.
IMPOSTORS = {
    "zero-width space": BUILTIN + "\u200b",
    "no-break space": BUILTIN.replace(" ", "\u00a0"),
    "Cyrillic a": "\u0430" + BUILTIN[1:],
    "digit one for l": BUILTIN.replace("l", "1"),
    "capitals": "Arithmetic (BUILT-IN)",
    "no hyphen": "arithmetic (builtin)",
}
JSONL = b'{"prompt": "What is 1+1?", "answer": "666"}\n'
# Names that do not read as one line of visible text.
BAD_NAMES = {
    "newline": "run\nname", "carriage return": "run\rname", "ESC sequence": "run\x1b[31mred",
    "bell": "run\x07", "delete": "run\x7f", "C1 CSI": "run\x9b31m", "tab": "a\tb",
    "line separator": "a\u2028b", "bidi override": "invoice\u202egnp.exe",
    "bidi isolate": "a\u2067b", "left-to-right mark": "a\u200eb",
    "zero-width space": "a\u200bb", "only spaces": "\u00a0\u3000", "only a filler": "\u3164",
    "only joiners": "\u200d\u200c", "only a combining mark": "\u0301",
    "only a braille blank": "\u2800",
}


@pytest.fixture
def platform_set(django_user_model: Any) -> PromptSet:
    admin = django_user_model.objects.create_user("admin", password="pw", is_staff=True)
    return services.import_prompt_set(owner=admin, name=BUILTIN, prompts=make_prompts(4),
                                      source=PromptSet.Source.BUILTIN, platform=True)


def upload(api: Api, name: str) -> Any:
    return api.client.post("/api/v1/prompt-sets", {
        "name": name, "file": SimpleUploadedFile("p.jsonl", JSONL)}, headers=api.headers)


@pytest.mark.django_db
@pytest.mark.parametrize("how", list(IMPOSTORS))
def test_a_look_alike_of_a_built_in_set_is_refused(platform_set: PromptSet, other_user: Any,
                                                   how: str) -> None:
    api = Api(create_token(other_user, "t")[1])
    response = upload(api, IMPOSTORS[how])
    assert response.status_code == 400, response.content
    error = response.json()["errors"][0]
    assert error["field"] == "name"
    assert ("reserved for the platform" in error["reason"]
            or "invisible character U+200B" in error["reason"]), error
    assert list(PromptSet.objects.values_list("name", flat=True)) == [BUILTIN]


@pytest.mark.django_db
def test_look_alike_names_of_any_set_are_refused_naming_the_set_and_its_owner(
        user: Any, other_user: Any, client: Client) -> None:
    services.import_prompt_set(owner=user, name="gsm8k train", prompts=make_prompts(2))
    api = Api(create_token(other_user, "t")[1])
    for twin in ("gsm8k train", "gsm8k\u00a0train", "g\u0455m8k train", "gsm8k  train ",
                 "gsm8k tra\u0456n", "gsm8k train\u200d"):
        response = upload(api, twin)
        assert response.status_code == 409, (twin, response.content)
        reason = response.json()["errors"][0]["reason"]
        assert "“gsm8k train”" in reason and "alice's" in reason, reason
    assert upload(api, "gsm8k test").status_code == 201  # a different name is fine
    # The dashboard's upload form says the same on its name field.
    client.force_login(other_user)
    page = client.post(reverse("dashboard:prompt_sets"), {
        "upload-name": "g\u0455m8k train", "upload-file": SimpleUploadedFile("p.jsonl", JSONL)})
    assert "looks like the name of the prompt set “gsm8k train”" in page.content.decode()
    assert PromptSet.objects.count() == 2


@pytest.mark.django_db
def test_every_list_shows_a_sets_owner_and_the_platforms_sets_come_first(
        platform_set: PromptSet, user: Any, other_user: Any) -> None:
    mine = services.import_prompt_set(owner=user, name="mine", prompts=make_prompts(4))
    theirs = services.import_prompt_set(owner=other_user, name="arithmetic (copy)",
                                        prompts=make_prompts(4))
    client = Client()
    client.force_login(user)
    page = client.get(reverse("dashboard:run_launch")).content.decode()
    select = page[page.index('name="prompt_set"'):]
    select = select[:select.index("</select>")]
    shown = [select.index(f'value="{ps.pk}"') for ps in (platform_set, mine, theirs)]
    assert shown == sorted(shown)  # the platform's, then the user's, then others'
    assert f"{BUILTIN} · admin · 4 prompts" in select
    assert "arithmetic (copy) · bob · 4 prompts" in select
    listing = client.get(reverse("dashboard:prompt_sets")).content.decode()
    assert "<td>bob</td>" in listing and "<td>admin</td>" in listing
    api = Api(create_token(user, "t")[1])
    owners = {s["name"]: s["owner"] for s in api.get("/prompt-sets").json()}
    assert owners == {BUILTIN: "admin", "mine": "alice", "arithmetic (copy)": "bob"}


@pytest.mark.django_db
@pytest.mark.parametrize("what", list(BAD_NAMES))
def test_run_sweep_set_and_token_names_must_be_one_line_of_visible_text(
        user: Any, what: str) -> None:
    ps = services.import_prompt_set(owner=user, name="arith", prompts=make_prompts(12))
    api = Api(create_token(user, "t")[1])
    name = BAD_NAMES[what]
    for path, extra in (("/runs", {}), ("/sweeps", {"grid": {"seed": [0, 1]}})):
        body = {"name": name, "prompt_set": ps.pk, "config": SIM, **extra}
        response = api.post(path, body)
        assert response.status_code == 400, (path, response.content)
        error = response.json()["errors"][0]
        assert error["field"] == "name", error
    assert upload(api, name).json()["errors"][0]["field"] == "name"
    with pytest.raises(services.LaunchError) as token:
        create_token(user, name)
    assert token.value.field == "name"
    assert (Run.objects.count(), Sweep.objects.count(), PromptSet.objects.count()) == (0, 0, 1)


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["tiny\u202e", "a\u2066b", "m\nodel", "m\x1b[2J", "\u200b",
                                   "x" * 501])
def test_the_model_follows_the_same_rule_and_a_length_bound(user: Any, model: str) -> None:
    ps = services.import_prompt_set(owner=user, name="arith", prompts=make_prompts(12))
    api = Api(create_token(user, "t")[1])
    body = {"name": "m", "prompt_set": ps.pk, "config": SIM | {"model": model}}
    response = api.post("/runs", body)
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["field"] == "config.model" or \
        response.json()["errors"][0]["field"] == "model"
    assert not Run.objects.exists()
    # A label a user can read is fine under the simulated backend.
    ok = api.post("/runs", body | {"config": SIM | {"model": "qwen2.5-math-7b (simulated)"}})
    assert ok.status_code == 201, ok.content
    assert json.loads(ok.content)["model"] == "qwen2.5-math-7b (simulated)"
