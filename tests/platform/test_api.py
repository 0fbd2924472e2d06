"""The REST API (/api/v1/) on the real database: tokens, the owner/staff rules, launches from JSON
and TOML, errors that name the field, records paged with cursors, reports; a run launched through
the API executes on a real worker; random requests to every operation never give a 5xx."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import redis
from api.models import ApiToken
from api.services import create_token, hash_token
from django.test import Client
from django.urls import reverse
from experiments.models import PromptStep, RoundStat, Run, Sample, Step, Sweep
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.services import wait_for

from .dashboard_fixtures import make_prompt_set, make_run, record_run, record_run_with_evals

SIM = {"backend": "simulated", "algorithm": "ada-balance", "batch_size": 4, "group_size": 4,
       "samples_per_round": 4, "max_rounds": 3, "total_steps": 3, "eval_every": 0}
TOML = """# as for python -m trainer run
algorithm = "grpo"
backend = "simulated"
prompts = "builtin:arithmetic"
batch_size = 4
total_steps = 2
eval_every = 0
seed = 7
"""


class Api:
    """The test client with a Bearer token, JSON in and out."""

    def __init__(self, token: str) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get("/api/v1" + path, params, headers=self.headers)

    def post(self, path: str, body: Any = None, content_type: str = "application/json",
             **kw: Any) -> Any:
        data = json.dumps(body) if content_type == "application/json" and body is not None \
            else body
        return self.client.post("/api/v1" + path, data=data if data is not None else "",
                                content_type=content_type, headers=self.headers, **kw)

    def delete(self, path: str) -> Any:
        return self.client.delete("/api/v1" + path, headers=self.headers)


@pytest.fixture(autouse=True)
def _empty_queues() -> None:
    redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).delete("cpu", "gpu")


@pytest.fixture
def api(user: Any) -> Api:
    return Api(create_token(user, "tests")[1])


@pytest.fixture
def other_api(other_user: Any) -> Api:
    return Api(create_token(other_user, "tests")[1])


@pytest.fixture
def staff_api(staff_user: Any) -> Api:
    return Api(create_token(staff_user, "tests")[1])


def _fields(response: Any) -> list[str]:
    return [e["field"] for e in response.json()["errors"]]


# --- tokens and authentication ------------------------------------------------------------------

@pytest.mark.django_db
def test_token_is_stored_hashed_and_authenticates_until_revoked(user: Any, client: Any) -> None:
    client.force_login(user)
    page = client.post(reverse("account"), {"name": "laptop"})
    assert page.status_code == 200
    plain = page.context["new_token"]
    assert plain.startswith("rada_") and plain in page.content.decode()
    assert "no-store" in page["Cache-Control"]
    token = ApiToken.objects.get(user=user)
    # Only the hash is stored, and the list shows a prefix, not the token.
    assert token.key_hash == hash_token(plain) and plain not in token.key_hash
    assert plain not in client.get(reverse("account")).content.decode()

    assert Api(plain).get("/me").json() == {"id": user.pk, "username": "alice",
                                            "is_staff": False}
    assert Api("rada_wrong").get("/me").status_code == 401
    assert Client().get("/api/v1/runs").status_code == 401

    client.post(reverse("account_token_revoke", args=[token.pk]))
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert Api(plain).get("/me").status_code == 401


@pytest.mark.django_db
def test_a_user_cannot_revoke_another_users_token(user: Any, other_user: Any,
                                                  client: Any) -> None:
    token, plain = create_token(user, "mine")
    client.force_login(other_user)
    assert client.post(reverse("account_token_revoke", args=[token.pk])).status_code == 404
    assert Api(plain).get("/me").status_code == 200


@pytest.mark.django_db
def test_token_needs_a_name(user: Any, client: Any) -> None:
    client.force_login(user)
    page = client.post(reverse("account"), {"name": "  "})
    assert page.context["error"] and not ApiToken.objects.exists()


@pytest.mark.django_db
def test_schema_and_docs_page(client: Any) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    assert schema["info"]["version"] == "1"
    assert {"/api/v1/runs", "/api/v1/runs/{run_id}/samples", "/api/v1/sweeps",
            "/api/v1/prompt-sets", "/api/v1/report",
            "/api/v1/runs/{run_id}/export"} <= set(schema["paths"])
    body = schema["paths"]["/api/v1/runs"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/toml"} <= set(body)
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200
    # Swagger UI from the platform's own static files: no CDN.
    assert "cdn" not in docs.content.decode().lower()


# --- prompt sets --------------------------------------------------------------------------------

@pytest.mark.django_db
def test_prompt_set_upload_list_and_detail(api: Api) -> None:
    lines = "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                    for i in range(5))
    from django.core.files.uploadedfile import SimpleUploadedFile

    up = api.client.post("/api/v1/prompt-sets", {
        "name": "five", "file": SimpleUploadedFile("five.jsonl", lines.encode())},
        headers=api.headers)
    assert up.status_code == 201, up.content
    assert up.json()["size"] == 5 and up.json()["owner"] == "alice"
    assert [p["name"] for p in api.get("/prompt-sets").json()] == ["five"]
    detail = api.get(f"/prompt-sets/{up.json()['id']}").json()
    assert [p["text"] for p in detail["preview"]] == [f"{i}+1=" for i in range(5)]

    bad = api.client.post("/api/v1/prompt-sets", {
        "name": "bad", "file": SimpleUploadedFile("bad.jsonl", b'{"prompt": "x"}\n')},
        headers=api.headers)
    assert bad.status_code == 400 and _fields(bad) == ["file"]
    assert "answer" in bad.json()["errors"][0]["reason"]
    dup = api.client.post("/api/v1/prompt-sets", {
        "name": "five", "file": SimpleUploadedFile("five.jsonl", lines.encode())},
        headers=api.headers)
    assert dup.status_code == 409 and _fields(dup) == ["name"]
    missing = api.client.post("/api/v1/prompt-sets", {"name": "none"}, headers=api.headers)
    assert missing.status_code == 400 and _fields(missing) == ["file"]


@pytest.mark.django_db
def test_prompt_set_upload_over_the_limit_is_refused_while_streaming(
        api: Api, settings: Any) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.PROMPT_UPLOAD_MAX_BYTES = 1000
    big = b"".join(json.dumps({"prompt": f"{i}+1=", "answer": "1"}).encode() + b"\n"
                   for i in range(200))
    r = api.client.post("/api/v1/prompt-sets", {
        "name": "big", "file": SimpleUploadedFile("big.jsonl", big)}, headers=api.headers)
    assert r.status_code == 400 and _fields(r) == ["file"]
    assert "PROMPT_UPLOAD_MAX_BYTES" in r.json()["errors"][0]["reason"]


# --- launching ----------------------------------------------------------------------------------

@pytest.mark.django_db
def test_launch_from_json_and_from_toml(api: Api) -> None:
    ps = make_prompt_set("arith", size=12)
    r = api.post("/runs", {"name": "j", "prompt_set": ps.pk, "config": SIM})
    assert r.status_code == 201, r.content
    run = Run.objects.get(pk=r.json()["id"])
    assert (run.status, run.owner.username, run.config["group_size"]) == ("queued", "alice", 4)
    # The built-in set's verifier is resolved as for every launch.
    assert r.json()["config"]["verifier"] == "exact"

    t = api.post("/runs?name=t&prompt_set=arith&retention=kept", TOML,
                 content_type="application/toml")
    assert t.status_code == 201, t.content
    run = Run.objects.get(pk=t.json()["id"])
    assert (run.algorithm, run.seed, run.total_steps, run.retention, run.prompt_set_id) == (
        "grpo", 7, 2, "kept", ps.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("body, field", [
    ({"name": "x", "prompt_set": "arith", "config": {"group_size": 1}}, "group_size"),
    ({"name": "x", "prompt_set": "arith", "config": {"seeed": 1}}, "seeed"),
    ({"name": "x", "prompt_set": "arith", "config": {"lr": "fast"}}, "lr"),
    ({"name": "x", "prompt_set": "arith", "config": {"batch_size": 64}}, "batch_size"),
    ({"name": "x", "prompt_set": "nope"}, "prompt_set"),
    ({"name": "", "prompt_set": "arith"}, "name"),
    ({"name": "x", "prompt_set": "arith", "queue": "tpu"}, "queue"),
    ({"name": "x", "prompt_set": "arith", "retention": "some"}, "retention"),
    ({"name": "x", "prompt_set": "arith", "eval_set": 99999}, "eval_set"),
    ({"prompt_set": "arith"}, "name"),
    ({"name": "x", "prompt_set": "arith", "config": [1, 2]}, "config"),
    ({"name": "x" * 300, "prompt_set": "arith", "config": SIM}, "name"),
    ([1, 2], "body"),
])
def test_bad_launch_is_a_400_naming_the_field(api: Api, body: Any, field: str) -> None:
    make_prompt_set("arith", size=12)
    r = api.post("/runs", body)
    assert r.status_code == 400, r.content
    assert field in _fields(r), r.json()
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_bad_toml_is_a_400_on_config(api: Api) -> None:
    make_prompt_set("arith", size=12)
    r = api.post("/runs?name=t&prompt_set=arith", "algorithm = ", content_type="application/toml")
    assert r.status_code == 400 and _fields(r) == ["config"]
    r = api.post("/runs?name=t&prompt_set=arith", 'algorithm = "sac"\nbatch_size = 4',
                 content_type="application/toml")
    assert r.status_code == 400 and _fields(r) == ["algorithm"]
    r = api.post("/runs", "{not json")
    assert r.status_code == 400 and _fields(r) == ["body"]
    # Past DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB): refused before it is parsed, a 413 in the
    # API's shape (issue 19; it was Django's HTML 400).
    r = api.post("/runs", {"name": "x" * 3_000_000, "prompt_set": "arith"})
    assert r.status_code == 413 and _fields(r) == ["body"]


@pytest.mark.django_db
def test_cancel_delete_relaunch_follow_the_owner_and_staff_rules(
        api: Api, other_api: Api, staff_api: Api, user: Any) -> None:
    ps = make_prompt_set("arith", size=12)
    run = record_run(make_run(user, ps, total_steps=2))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)

    # Anyone signed in reads; only the owner or staff act.
    assert other_api.get(f"/runs/{run.pk}").status_code == 200
    assert other_api.post(f"/runs/{run.pk}/relaunch").status_code == 403
    assert other_api.delete(f"/runs/{run.pk}").status_code == 403
    relaunched = api.post(f"/runs/{run.pk}/relaunch")
    assert relaunched.status_code == 201
    new = relaunched.json()
    assert (new["cloned_from"], new["status"], new["name"]) == (run.pk, "queued",
                                                                 "run (relaunch)")
    assert other_api.post(f"/runs/{new['id']}/cancel").status_code == 403
    cancelled = staff_api.post(f"/runs/{new['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert api.delete(f"/runs/{run.pk}").status_code == 204
    assert not Run.objects.filter(pk=run.pk).exists()
    assert api.get(f"/runs/{run.pk}").status_code == 404
    assert api.get("/runs/99999999999999999999").status_code == 404


@pytest.mark.django_db
def test_run_list_filters(api: Api, user: Any, other_user: Any) -> None:
    ps = make_prompt_set("arith", size=12)
    a = make_run(user, ps, name="alpha", algorithm="grpo")
    b = make_run(other_user, ps, name="beta", algorithm="ada-pos")
    Run.objects.filter(pk=b.pk).update(status=Run.Status.FAILED)

    def names(**q: Any) -> list[str]:
        r = api.get("/runs", **q)
        assert r.status_code == 200, r.content
        return sorted(x["name"] for x in r.json())

    assert names() == ["alpha", "beta"]
    assert names(status="failed") == ["beta"]
    assert names(algorithm="grpo") == ["alpha"]
    assert names(owner="bob") == ["beta"]
    assert names(q="alp") == ["alpha"]
    assert names(prompt_set=ps.pk, limit=1, offset=1) in (["alpha"], ["beta"])
    bad = api.get("/runs", status="done")
    assert bad.status_code == 422 and _fields(bad) == ["status"]
    assert _fields(api.get("/runs", limit=0)) == ["limit"]
    assert a.pk


@pytest.mark.django_db
def test_sweep_create_list_cancel(api: Api, other_api: Api) -> None:
    ps = make_prompt_set("arith", size=12)
    r = api.post("/sweeps", {"name": "grid", "prompt_set": ps.pk, "config": SIM,
                             "grid": "algorithm=grpo,ada-balance;seed=0,1"})
    assert r.status_code == 201, r.content
    sweep = r.json()
    assert len(sweep["runs"]) == 4 and sweep["counts"] == {"queued": 4}
    assert sweep["grid"] == [{"field": "algorithm", "values": ["grpo", "ada-balance"]},
                             {"field": "seed", "values": [0, 1]}]
    as_toml = api.post("/sweeps?name=t&prompt_set=arith&grid=seed%3D0,1,2", TOML,
                       content_type="application/toml")
    assert as_toml.status_code == 201 and len(as_toml.json()["runs"]) == 3
    as_list = api.post("/sweeps", {"name": "l", "prompt_set": ps.pk, "config": SIM,
                                   "grid": [{"field": "lr", "values": [1e-4, 2e-4]}]})
    assert as_list.status_code == 201

    assert [s["name"] for s in api.get("/sweeps").json()] == ["l", "t", "grid"]
    assert api.get(f"/sweeps/{sweep['id']}").json()["summary"] == "4 queued"
    assert other_api.post(f"/sweeps/{sweep['id']}/cancel").status_code == 403
    assert api.post(f"/sweeps/{sweep['id']}/cancel").json() == {"cancelled": 4}
    assert api.get(f"/sweeps/{sweep['id']}").json()["status"] == "cancelled"

    bad = api.post("/sweeps", {"name": "b", "prompt_set": ps.pk, "config": SIM,
                               "grid": "seed=0,x"})
    # Named as the API's field (the form's is "sweep"; issue 19).
    assert bad.status_code == 400 and _fields(bad) == ["grid"]
    bad = api.post("/sweeps", {"name": "b", "prompt_set": ps.pk, "config": SIM,
                               "grid": "group_size=1,4"})
    assert bad.status_code == 400 and _fields(bad) == ["grid"]
    assert "group_size=1" in bad.json()["errors"][0]["reason"]
    assert Sweep.objects.count() == 3
    # One budget for everyone (issue 31): the budget pseudo-field, as text and as a list.
    matched = api.post("/sweeps", {"name": "m", "prompt_set": ps.pk, "config": SIM,
                                   "grid": [{"field": "algorithm", "values": ["grpo", "pods"]},
                                            {"field": "budget", "values": [8]}]})
    assert matched.status_code == 201, matched.content
    runs = Run.objects.filter(sweep_id=matched.json()["id"]).order_by("sweep_index")
    assert [(r.config["group_size"], r.config["pods_rollouts"]) for r in runs] == [(8, 16),
                                                                                  (4, 8)]
    bad = api.post("/sweeps", {"name": "b", "prompt_set": ps.pk, "config": SIM,
                               "grid": "algorithm=grpo; budget=0"})
    assert bad.status_code == 400 and _fields(bad) == ["grid"]
    assert "budget: must be within [1, 32,767]" in bad.json()["errors"][0]["reason"]

    # Paired axes (issue 27), in the text spelling, as a list and as a mapping; each bad axis
    # named at once.
    for grid in ("(algorithm, group_size)=(ada-balance, 4), (grpo, 16); seed=0,1",
                 [{"fields": ["algorithm", "group_size"],
                   "values": [["ada-balance", 4], ["grpo", 16]]},
                  {"field": "seed", "values": [0, 1]}],
                 {"(algorithm, group_size)": [["ada-balance", 4], ["grpo", 16]],
                  "seed": [0, 1]}):
        paired = api.post("/sweeps", {"name": "budget", "prompt_set": ps.pk, "config": SIM,
                                      "grid": grid})
        assert paired.status_code == 201, paired.content
        assert paired.json()["grid"][0] == {"fields": ["algorithm", "group_size"],
                                            "values": [["ada-balance", 4], ["grpo", 16]]}
        runs = [api.get(f"/runs/{i}").json() for i in paired.json()["runs"]]
        assert [(r["algorithm"], r["config"]["group_size"], r["seed"]) for r in runs] == [
            ("ada-balance", 4, 0), ("ada-balance", 4, 1), ("grpo", 16, 0), ("grpo", 16, 1)]
        assert runs[3]["name"] == "budget [algorithm=grpo, group_size=16, seed=1]"
    bad = api.post("/sweeps", {"name": "b", "prompt_set": ps.pk, "config": SIM,
                               "grid": "(algorithm, group_size)=(grpo, 16), (dapo); seed=0..200"})
    assert bad.status_code == 400 and _fields(bad) == ["grid", "grid"]
    assert [e["reason"] for e in bad.json()["errors"]] == [
        "(algorithm, group_size): (dapo) has 1 value; each tuple needs 2, one per field",
        "seed: range '0..200' is 201 runs; a sweep launches at most 64 (SWEEP_MAX_RUNS)"]


@pytest.mark.django_db
def test_retry_takes_a_failed_runs_place_in_its_sweep(api: Api, other_api: Api) -> None:
    ps = make_prompt_set("arith", size=12)
    sweep = api.post("/sweeps", {"name": "s", "prompt_set": ps.pk, "config": SIM,
                                 "grid": "seed=0,1"}).json()
    first, second = sweep["runs"]
    Run.objects.filter(pk=second).update(status="failed")
    assert other_api.post(f"/runs/{second}/retry").status_code == 403
    refused = api.post(f"/runs/{first}/retry")  # queued: nothing to retry
    assert refused.status_code == 400 and _fields(refused) == ["run"]
    retried = api.post(f"/runs/{second}/retry")
    assert retried.status_code == 201, retried.content
    new = retried.json()
    assert (new["sweep"], new["cloned_from"], new["status"], new["name"]) == (
        sweep["id"], second, "queued", "s [seed=1] (attempt 2)")
    assert api.get(f"/runs/{second}").json()["replaced_by"] == new["id"]
    after = api.get(f"/sweeps/{sweep['id']}").json()
    assert after["runs"] == [first, new["id"]] and after["summary"] == "2 queued"
    again = api.post(f"/runs/{second}/retry")
    assert again.status_code == 409 and "already retried" in again.json()["detail"]


# --- records ------------------------------------------------------------------------------------

def _walk_pages(api: Api, path: str, limit: int, **q: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        r = api.get(path, limit=limit, **({"cursor": cursor} if cursor else {}), **q)
        assert r.status_code == 200, r.content
        page = r.json()
        assert len(page["items"]) <= limit
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


@pytest.mark.django_db
def test_records_and_cursor_pages_hold_every_row_once(api: Api, user: Any) -> None:
    ps = make_prompt_set("arith", size=12)
    run = record_run(make_run(user, ps, total_steps=3))
    steps = api.get(f"/runs/{run.pk}/steps").json()
    assert [s["step"] for s in steps] == [1, 2, 3]
    db = Step.objects.get(run=run, step=2)
    assert steps[1]["metrics"] == db.metrics and steps[1]["samples"] == db.samples
    rounds = api.get(f"/runs/{run.pk}/rounds").json()
    assert len(rounds) == RoundStat.objects.filter(run=run).count()
    assert api.get(f"/runs/{run.pk}/rounds", step=2).json() == [
        r for r in rounds if r["step"] == 2]

    prompt_steps = _walk_pages(api, f"/runs/{run.pk}/prompt-steps", 5)
    assert [(p["step"], p["prompt_id"]) for p in prompt_steps] == list(
        PromptStep.objects.filter(run=run).order_by("step", "prompt_id")
        .values_list("step", "prompt_id"))
    samples = _walk_pages(api, f"/runs/{run.pk}/samples", 7)
    assert [(s["step"], s["prompt_id"], s["index"]) for s in samples] == list(
        Sample.objects.filter(run=run).order_by("step", "prompt_id", "index")
        .values_list("step", "prompt_id", "index"))
    kept = _walk_pages(api, f"/runs/{run.pk}/samples", 1000, kept="true", step=3)
    assert kept and all(s["kept"] and s["step"] == 3 for s in kept)
    assert len(kept) == Sample.objects.filter(run=run, step=3, kept=True).count()

    bad = api.get(f"/runs/{run.pk}/samples", cursor="garbage!")
    assert bad.status_code == 400 and _fields(bad) == ["cursor"]
    assert _fields(api.get(f"/runs/{run.pk}/samples", limit=10**6)) == ["limit"]


@pytest.mark.django_db
def test_evaluations_and_report_data(api: Api, user: Any) -> None:
    from tests.fixtures.services import make_prompts

    ps = make_prompt_set("arith", size=12)
    runs = [record_run_with_evals(make_run(user, ps, seed=s, total_steps=2, eval_every=1,
                                           eval_k=2, algorithm=a), make_prompts(4,
                                                                                pass_rate=0.5))
            for a in ("grpo", "ada-balance") for s in (0, 1)]
    evals = api.get(f"/runs/{runs[0].pk}/evaluations").json()
    assert [e["step"] for e in evals] == [0, 1, 2] and "greedy_accuracy" in evals[0]["metrics"]
    r = api.get("/report", runs=[r.pk for r in runs])
    assert r.status_code == 200, r.content
    data = r.json()
    assert sorted(len(g["runs"]) for g in data["groups"]) == [2, 2]
    assert {"reward", "table-eval", "table-cost", "pass-at-k"} <= set(data["rows"])
    assert api.get("/report").status_code == 400
    assert api.get("/report", runs="x").status_code == 422


# --- a real worker ------------------------------------------------------------------------------

def test_run_launched_through_the_api_executes_on_a_worker(start_worker: Any, user: Any,
                                                           prompt_set_factory: Any) -> None:
    start_worker("cpu")
    api = Api(create_token(user, "worker test")[1])
    ps = prompt_set_factory(12, pass_rate=0.5)
    r = api.post("/runs", {"name": "via api", "prompt_set": ps.name, "config": SIM})
    assert r.status_code == 201, r.content
    run_id = r.json()["id"]

    def finished() -> Any:
        body = api.get(f"/runs/{run_id}").json()
        return body if body["status"] not in ("queued", "running") else None

    body = wait_for(finished, 120, what="the run to finish")
    assert (body["status"], body["current_step"]) == ("succeeded", 3), body
    steps = api.get(f"/runs/{run_id}/steps").json()
    assert sum(s["samples"] for s in steps) == body["samples_spent"]
    samples = _walk_pages(api, f"/runs/{run_id}/samples", 50)
    assert len(samples) == body["samples_spent"]


@pytest.mark.django_db
@pytest.mark.parametrize("path, params", [
    ("/runs", {"owner": "a\x00"}), ("/runs", {"q": "a\x00"}), ("/runs", {"algorithm": "\x00"}),
])
def test_nul_in_a_query_is_a_4xx_naming_it(api: Api, path: str, params: dict[str, str]) -> None:
    r = api.get(path, **params)
    assert r.status_code == 422 and _fields(r) == list(params)


@pytest.mark.django_db
@pytest.mark.parametrize("body, field", [
    ({"name": "x", "prompt_set": "\x00"}, "prompt_set"),
    ({"name": "x", "prompt_set": "arith", "eval_set": "a\x00"}, "eval_set"),
    ({"name": "x\x00", "prompt_set": "arith"}, "name"),
])
def test_nul_in_a_launch_is_a_400_naming_it(api: Api, body: dict[str, Any], field: str) -> None:
    make_prompt_set("arith", size=12)
    for path in ("/runs", "/sweeps"):
        r = api.post(path, {**body, "config": SIM, "grid": "seed=0,1"})
        assert r.status_code == 400 and field in _fields(r), (path, r.content)


@pytest.mark.django_db
@pytest.mark.parametrize("name, line, field", [
    ("n\x00", b'{"prompt": "1+1=", "answer": "2"}\n', "name"),
    ("text", b'{"prompt": "1+1=\\u0000", "answer": "2"}\n', "file"),
    ("meta", b'{"prompt": "1+1=", "answer": "2", "note": "\\u0000"}\n', "file"),
])
def test_nul_in_an_upload_is_refused(api: Api, name: str, line: bytes, field: str) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    r = api.client.post("/api/v1/prompt-sets", {
        "name": name, "file": SimpleUploadedFile("f.jsonl", line)}, headers=api.headers)
    assert r.status_code in (400, 422) and _fields(r) == [field], r.content


# --- no 5xx, whatever the request ---------------------------------------------------------------

def _operations() -> list[tuple[str, str]]:
    from api.api import api as ninja_api

    schema = ninja_api.get_openapi_schema()
    return sorted((method.upper(), path) for path, ops in schema["paths"].items()
                  for method in ops)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4), max_leaves=12)
FIELDS = ["name", "prompt_set", "config", "eval_set", "queue", "retention", "grid", "cursor",
          "limit", "step", "prompt", "kept", "status", "algorithm", "sweep", "runs", "owner",
          "q", "offset", "group_size", "seed", "batch_size", "lr", "total_steps", "file"]
VALUES = st.one_of(st.sampled_from(["", "0", "1", "-1", "x", "9223372036854775808", "true",
                                    "arith", "grpo", "seed=0,1", "1e400", "\x00", "²"]),
                   st.text(max_size=16), st.integers(min_value=-(2**70), max_value=2**70)
                   .map(str))


@pytest.mark.django_db
def test_no_5xx_from_any_operation(api: Api, user: Any) -> None:
    ps = make_prompt_set("arith", size=12)
    run = record_run(make_run(user, ps, total_steps=2))
    operations = _operations()
    assert len(operations) >= 18
    ids = st.sampled_from(["1", str(run.pk), str(ps.pk), "0", "99999999999999999999"])

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(op=st.sampled_from(operations), ident=ids,
           query=st.lists(st.tuples(st.sampled_from(FIELDS), VALUES), max_size=6),
           body=st.one_of(JSONISH, st.dictionaries(st.sampled_from(FIELDS), JSONISH,
                                                   max_size=6), st.text(max_size=40)),
           kind=st.sampled_from(["application/json", "application/toml", "text/plain"]))
    def check(op: tuple[str, str], ident: str, query: list[tuple[str, str]], body: Any,
              kind: str) -> None:
        method, path = op
        path = path.replace("{run_id}", ident).replace("{sweep_id}", ident).replace(
            "{set_id}", ident)
        from urllib.parse import urlencode

        url = path + ("?" + urlencode(query) if query else "")
        data = body if isinstance(body, str) else json.dumps(body)
        if method == "GET":
            r = api.client.get(url, headers=api.headers)
        elif method == "DELETE":
            r = api.client.delete(url, headers=api.headers)
        else:
            r = api.client.post(url, data=data, content_type=kind, headers=api.headers)
        assert r.status_code < 500, (method, url, data, r.status_code, r.content[:500])

    check()


@pytest.mark.django_db
def test_admin_lists_tokens_without_them_and_revokes(admin_client: Any, user: Any) -> None:
    token, plain = create_token(user, "laptop")
    page = admin_client.get("/admin/api/apitoken/")
    assert page.status_code == 200 and "laptop" in page.content.decode()
    assert plain not in page.content.decode()
    admin_client.post("/admin/api/apitoken/", {"action": "revoke",
                                                "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None and Api(plain).get("/me").status_code == 401
