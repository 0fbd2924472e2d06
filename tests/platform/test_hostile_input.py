"""Input classes that gave HTTP 500 (issue 19): text that is not Unicode (a lone surrogate),
numbers jsonb will not hold (NaN, infinities, 1e999), nesting deep enough to exhaust the parser's
stack, integers past a float's range in a float field. Each is a 4xx naming the field (or the
file and line) with the reason, and nothing is stored: the row counts are the same after.

The property tests (``test_api_config_fuzz``, below) generate these classes too."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from api.services import create_token
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from experiments.models import Prompt, PromptSet, Run, Sweep
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .dashboard_fixtures import make_prompt_set
from .test_api import SIM, Api, _empty_queues  # noqa: F401 (autouse: the queues start empty)

DEEP = "[" * 1000 + "]" * 1000


def _counts() -> tuple[int, int, int, int]:
    return (Run.objects.count(), Sweep.objects.count(), PromptSet.objects.count(),
            Prompt.objects.count())


@pytest.fixture
def api(user: Any) -> Api:
    make_prompt_set("arith", size=12)
    return Api(create_token(user, "tests")[1])


def _refused(send: Callable[[], Any], status: int = 400) -> dict[str, Any]:
    """Send, expect ``status`` in the API's error shape, and that nothing was stored."""
    before = _counts()
    response = send()
    assert response.status_code == status, response.content[:500]
    assert _counts() == before
    body = response.json()
    assert body["errors"] and body["detail"]
    return body


def _json(api: Api, path: str, text: str) -> Any:
    return api.client.post("/api/v1" + path, data=text, content_type="application/json",
                           headers=api.headers)


# --- launch bodies ------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field"), [
    ({"name": "\ud800", "prompt_set": "arith", "config": SIM}, "name"),
    ({"name": "ok", "prompt_set": "arith", "config": SIM | {"model": "a\udfffb"}},
     "config.model"),
    ({"name": "ok", "prompt_set": "arith", "config": SIM, "queue": "\udc80"}, "queue"),
    ({"name": "ok", "prompt_set": "arith", "config": SIM | {"\ud800": 1}}, "config"),
])
@pytest.mark.parametrize("path", ["/runs", "/sweeps"])
def test_lone_surrogates_are_refused_naming_the_field(api: Api, body: dict[str, Any],
                                                      field: str, path: str) -> None:
    if path == "/sweeps":
        body = body | {"grid": {"seed": [0, 1]}}
    # json.dumps writes a lone surrogate as the escape "\ud800", as a hostile client would.
    errors = _refused(lambda: _json(api, path, json.dumps(body)))["errors"]
    assert errors[0]["field"] == field
    assert "lone surrogate" in errors[0]["reason"]


@pytest.mark.django_db
def test_a_lone_surrogate_in_a_sweep_grid_is_refused(api: Api) -> None:
    body = {"name": "ok", "prompt_set": "arith", "config": SIM,
            "grid": [{"field": "model", "values": ["x", "\ud800"]}]}
    errors = _refused(lambda: _json(api, "/sweeps", json.dumps(body)))["errors"]
    assert errors[0]["field"] == "grid[0].values[1]"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/runs", "/sweeps"])
def test_deep_nesting_is_a_400_not_a_recursion_error(api: Api, path: str) -> None:
    errors = _refused(lambda: _json(api, path, DEEP))["errors"]
    assert errors[0]["field"] == "body" and "nested too deeply" in errors[0]["reason"]
    # Deep enough to refuse, shallow enough for the parser: named where it is.
    body = ('{"name": "x", "prompt_set": "arith", "grid": {"seed": [0]}, "config": {"seed": '
            + "[" * 200 + "]" * 200 + "}}")
    errors = _refused(lambda: _json(api, path, body))["errors"]
    assert errors[0]["field"].startswith("config.seed[0]")
    assert "nested more than 32 levels" in errors[0]["reason"]


@pytest.mark.django_db
def test_toml_nested_too_deeply_is_a_400(api: Api) -> None:
    for toml in ("x = " + "[" * 1000 + "]" * 1000, "x = " + "{a = " * 1000 + "1" + "}" * 1000):
        errors = _refused(lambda toml=toml: api.post("/runs?name=t&prompt_set=arith", toml,
                                                     content_type="application/toml"))["errors"]
        assert errors[0]["field"] == "config"
        assert "nested too deeply" in errors[0]["reason"]


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", ["application/json", "application/toml"])
def test_an_integer_past_a_floats_range_in_a_float_field(api: Api, content_type: str) -> None:
    big = "1" + "0" * 400
    if content_type == "application/json":
        send = lambda: _json(api, "/runs", '{"name": "x", "prompt_set": "arith", '  # noqa: E731
                             f'"config": {{"backend": "simulated", "lr": {big}}}}}')
    else:
        send = lambda: api.post("/runs?name=x&prompt_set=arith",  # noqa: E731
                                f'backend = "simulated"\nlr = {big}\n',
                                content_type=content_type)
    errors = _refused(send)["errors"]
    assert errors[0]["field"] == "lr"
    assert "integer of about 401 digits, past a float's range" in errors[0]["reason"]


# --- prompt files -------------------------------------------------------------------------------

def _parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


GOOD = b'{"prompt": "What is 1+1?", "answer": "2"}\n'
BAD_FILES = [
    (b'{"prompt": "What is 1+1?", "answer": "2", "score": NaN}\n', "p.jsonl",
     "line 2: field 'score' is nan, not a finite number"),
    (b'{"prompt": "What is 1+1?", "answer": "2", "score": Infinity}\n', "p.jsonl",
     "line 2: field 'score' is inf, not a finite number"),
    (b'{"prompt": "What is 1+1?", "answer": "2", "score": 1e999}\n', "p.jsonl",
     "line 2: field 'score' is inf, not a finite number"),
    (b'{"prompt": "What is \\ud800?", "answer": "2"}\n', "p.jsonl",
     "line 2: field 'prompt' contains '\\ud800' at character 9, a lone surrogate"),
    (b'{"prompt": "q", "answer": "\\udfff"}\n', "p.jsonl",
     "line 2: field 'answer' contains '\\udfff' at character 1, a lone surrogate"),
    (b'{"prompt": "q", "answer": "2", "meta": {"\\ud800": 1}}\n', "p.jsonl",
     "line 2: field 'meta' has a key that contains"),
    (b'{"prompt": "q", "answer": "2", "x": ' + DEEP.encode() + b"}\n", "p.jsonl",
     "line 2: bad JSON: nested too deeply"),
    (b'{"prompt": "q", "answer": "2", "x": ' + b"1" * 5000 + b"}\n", "p.jsonl",
     "line 2: bad JSON: Exceeds the limit (4300 digits)"),
]


def _parquet_bad_files() -> list[tuple[bytes, str, str]]:
    nan = pa.table({"prompt": ["What is 1+1?", "What is 2+2?"], "answer": ["2", "4"],
                    "score": [0.5, float("nan")]})
    inf = pa.table({"prompt": ["What is 1+1?"], "answer": ["2"], "score": [float("-inf")]})
    return [(_parquet(nan), "p.parquet", "row 2: field 'score' is nan, not a finite number"),
            (_parquet(inf), "p.parquet", "row 1: field 'score' is -inf, not a finite number")]


@pytest.mark.django_db
@pytest.mark.parametrize("case", range(len(BAD_FILES) + 2))
def test_bad_values_in_prompt_files_name_the_line(api: Api, client: Client, case: int) -> None:
    content, filename, reason = (BAD_FILES + _parquet_bad_files())[case]
    if filename.endswith(".jsonl"):
        content = GOOD + content  # the bad record on line 2: the line is named, not line 1
    errors = _refused(lambda: api.client.post(
        "/api/v1/prompt-sets", {"name": "hostile", "file": SimpleUploadedFile(filename, content)},
        headers=api.headers))["errors"]
    assert errors[0]["field"] == "file"
    assert errors[0]["reason"].startswith(f"{filename}, {reason}"), errors[0]["reason"]
    # The dashboard's upload says the same next to the file field, and stores nothing either.
    before = _counts()
    response = client.post(reverse("dashboard:prompt_sets"), {
        "upload-name": "hostile", "upload-file": SimpleUploadedFile(filename, content)})
    assert response.status_code == 200 and _counts() == before
    shown = " ".join(response.context["upload"].errors["file"])
    assert f"{filename}, {reason}" in shown


@pytest.fixture
def client(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


# --- the property test over launch bodies -------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.text(max_size=8),
    # Lone surrogates: hypothesis' text() leaves category Cs out unless asked.
    st.text(st.characters(whitelist_categories=("Cs",)), min_size=1, max_size=3),
    st.builds(lambda a, b: f"{a}\ud83d{b}", st.text(max_size=4), st.text(max_size=4)))
HOSTILE_VALUES = st.one_of(
    HOSTILE_TEXT, st.integers(min_value=-(10**450), max_value=10**450),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=1, max_value=1200).map(lambda n: [[]] if n < 2 else json.loads(
        "[" * min(n, 400) + "]" * min(n, 400))),
    st.dictionaries(HOSTILE_TEXT, st.integers(), max_size=2))


@pytest.mark.django_db
def test_hostile_launch_bodies_are_4xx_and_store_nothing_unless_launched(api: Api) -> None:
    from trainer.config import field_specs

    names = [spec["name"] for spec in field_specs()]

    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(name=HOSTILE_TEXT, config=st.dictionaries(st.sampled_from(names), HOSTILE_VALUES,
                                                      max_size=3),
           sweep=st.booleans(), depth=st.sampled_from([0, 0, 0, 1500]))
    def check(name: str, config: dict[str, Any], sweep: bool, depth: int) -> None:
        body: dict[str, Any] = {"name": name or "x", "prompt_set": "arith",
                                "config": {"backend": "simulated", "batch_size": 4, **config}}
        if sweep:
            body["grid"] = {"seed": [0, 1]}
        text = json.dumps(body, allow_nan=True) if not depth else "[" * depth + "]" * depth
        before = _counts()
        r = _json(api, "/sweeps" if sweep else "/runs", text)
        assert r.status_code < 500, (text[:300], r.content[:300])
        if r.status_code >= 400:
            assert _counts() == before and r.json()["errors"]
        else:
            assert r.status_code == 201

    check()


# --- a bad token on a write ---------------------------------------------------------------------

@pytest.mark.django_db
def test_a_bad_token_is_a_401_on_writes_too(user: Any, client: Client) -> None:
    """A revoked, unknown or deactivated user's token: 401 on POST and DELETE as on GET (it was
    a 403 "CSRF check Failed", which the client reported as "forbidden"), so ``rada`` says "not
    signed in". A browser session still needs its CSRF token to write."""
    from api.models import ApiToken

    make_prompt_set("arith", size=12)
    revoked_token, revoked = create_token(user, "revoked")
    ApiToken.objects.filter(pk=revoked_token.pk).update(revoked_at="2026-01-01T00:00:00Z")
    inactive_user = type(user).objects.create_user("inactive", password="pw-inactive-1")
    inactive = create_token(inactive_user, "t")[1]
    inactive_user.is_active = False
    inactive_user.save()
    launch = {"name": "x", "prompt_set": "arith", "config": SIM}
    for token in ("rada_unknown", revoked, inactive):
        bad = Api(token)
        before = _counts()
        for response in (bad.post("/runs", launch), bad.delete("/runs/1"),
                         bad.post("/sweeps", launch | {"grid": {"seed": [0, 1]}})):
            assert response.status_code == 401, response.content
            assert "authentication needed" in response.json()["detail"]
        assert _counts() == before
    assert Client().post("/api/v1/runs", launch, content_type="application/json"
                         ).status_code == 401
    # A signed-in browser without the CSRF token is refused; its session is the thing forged.
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.post("/api/v1/runs", launch, content_type="application/json"
                        ).status_code == 403


# --- bodies past the limit ----------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/runs", "/sweeps"])
def test_a_body_past_the_limit_is_a_413_in_the_apis_shape(api: Api, path: str) -> None:
    """Django answered an HTML 400 "The request could not be understood"; the API says 413 in
    JSON, naming the limit, after reading the body through (a client still sending sees it)."""
    body = json.dumps({"name": "big", "prompt_set": "arith", "config": SIM,
                       "padding": "x" * (3 * 2**20)})
    errors = _refused(lambda: _json(api, path, body), status=413)["errors"]
    assert errors == [{"field": "body", "reason": errors[0]["reason"]}]
    assert "larger than 2.5 MiB (2,621,440 bytes), the limit (DATA_UPLOAD_MAX_MEMORY_SIZE)" \
        in errors[0]["reason"]


# --- smaller refusals ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_unknown_launch_keys_are_refused_by_name(api: Api) -> None:
    """``"retension": "none"`` launched a run that kept every response (the default)."""
    body = {"name": "x", "prompt_set": "arith", "config": SIM, "retension": "none"}
    errors = _refused(lambda: _json(api, "/runs", json.dumps(body)))["errors"]
    assert errors[0]["field"] == "retension"
    assert errors[0]["reason"].startswith("unknown field; a launch takes name, prompt_set")
    errors = _refused(lambda: api.post("/runs?name=t&prompt_set=arith&retension=none",
                                       'backend = "simulated"\n',
                                       content_type="application/toml"))["errors"]
    assert errors[0]["field"] == "retension"


@pytest.mark.django_db
def test_sweep_grid_errors_name_the_grid(api: Api) -> None:
    for grid in ("seed=0,x", {"nope": [1, 2]}):
        body = {"name": "g", "prompt_set": "arith", "config": SIM, "grid": grid}
        errors = _refused(lambda body=body: _json(api, "/sweeps", json.dumps(body)))["errors"]
        assert {e["field"] for e in errors} == {"grid"}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/runs", "/sweeps"])
def test_bidirectional_overrides_in_names_are_refused(api: Api, path: str) -> None:
    body = {"name": "invoice\u202egnp.exe", "prompt_set": "arith", "config": SIM}
    if path == "/sweeps":
        body["grid"] = {"seed": [0, 1]}
    errors = _refused(lambda: _json(api, path, json.dumps(body)))["errors"]
    assert errors[0]["field"] == "name" and "U+202E" in errors[0]["reason"]
    errors = _refused(lambda: api.client.post(
        "/api/v1/prompt-sets", {"name": "set\u2067x", "file": SimpleUploadedFile(
            "p.jsonl", GOOD)}, headers=api.headers))["errors"]
    assert errors[0]["field"] == "name" and "U+2067" in errors[0]["reason"]


@pytest.mark.django_db
def test_a_404_says_why(client: Client) -> None:
    """A 404 carried no reason ("/compare/chart.json?runs=abc"): it now says what was not
    found."""
    for path, reason in (("/compare/chart.json?runs=abc", "Need 1 or more runs."),
                         ("/runs/999999/", "No such run."),
                         ("/no-such-page/", "No page at /no-such-page/.")):
        response = client.get(path)
        assert response.status_code == 404
        assert reason in response.content.decode(), (path, response.content[:400])
