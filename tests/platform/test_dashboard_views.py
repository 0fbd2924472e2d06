"""Dashboard pages on PostgreSQL: sign-in, permissions, forms, uploads, prompt history, compare."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import Prompt, PromptSet, Run

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def other() -> User:
    return User.objects.create_user("other", password="pw-other-123")


@pytest.fixture
def owner_client(owner: User) -> Client:
    c = Client()
    c.force_login(owner)
    return c


@pytest.fixture
def other_client(other: User) -> Client:
    c = Client()
    c.force_login(other)
    return c


@pytest.fixture
def run(owner: User) -> Run:
    return make_run(owner, make_prompt_set(), name="balance-0")


def test_every_page_requires_sign_in(run: Run) -> None:
    c = Client()
    prompt = Prompt.objects.filter(prompt_set=run.prompt_set).first()
    urls = [reverse("dashboard:run_list"), reverse("dashboard:run_launch"),
            reverse("dashboard:run_detail", args=[run.pk]),
            reverse("dashboard:run_status", args=[run.pk]),
            reverse("dashboard:run_chart", args=[run.pk, "rewards"]),
            reverse("dashboard:prompt_history", args=[run.pk, prompt.pk]),
            reverse("dashboard:prompt_sets"),
            reverse("dashboard:prompt_set_detail", args=[run.prompt_set_id]),
            reverse("dashboard:compare") + f"?runs={run.pk}&runs={run.pk}",
            reverse("dashboard:compare_chart") + f"?runs={run.pk}"]
    for url in urls:
        resp = c.get(url)
        assert resp.status_code == 302, url
        assert resp["Location"].startswith("/login/?next="), url
    resp = c.post(reverse("dashboard:run_cancel", args=[run.pk]))
    assert resp.status_code == 302 and resp["Location"].startswith("/login/")


def test_sign_in_then_runs_list(run: Run, owner: User) -> None:
    c = Client(enforce_csrf_checks=True)
    page = c.get("/login/")
    token = page.cookies["csrftoken"].value
    resp = c.post("/login/", {"username": "owner", "password": "pw-owner-123",
                              "csrfmiddlewaretoken": token})
    assert resp.status_code == 302
    listing = c.get("/")
    assert listing.status_code == 200
    assert b"balance-0" in listing.content


def test_post_without_csrf_token_is_refused(run: Run, owner: User) -> None:
    c = Client(enforce_csrf_checks=True)
    c.force_login(owner)
    assert c.post(reverse("dashboard:run_cancel", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert not run.cancel_requested


def test_non_owner_cannot_cancel_delete_or_relaunch(run: Run, other_client: Client) -> None:
    for name in ("run_cancel", "run_delete", "run_relaunch"):
        resp = other_client.post(reverse(f"dashboard:{name}", args=[run.pk]))
        assert resp.status_code == 403, name
    run.refresh_from_db()
    assert not run.cancel_requested
    assert Run.objects.count() == 1
    # Reading is allowed, and the cancel button is not offered.
    page = other_client.get(reverse("dashboard:run_detail", args=[run.pk]))
    assert page.status_code == 200
    assert b"Cancel run" not in page.content


def test_owner_and_staff_can_cancel(run: Run, owner_client: Client, other: User) -> None:
    page = owner_client.get(reverse("dashboard:run_detail", args=[run.pk]))
    assert b"Cancel run" in page.content
    resp = owner_client.post(reverse("dashboard:run_cancel", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert resp.status_code == 200
    # A queued run is cancelled at once; a running one shows the pending request.
    assert b"cancel requested" in resp.content or b'data-status="cancelled"' in resp.content
    run.refresh_from_db()
    assert run.cancel_requested
    Run.objects.filter(pk=run.pk).update(cancel_requested=False)
    other.is_staff = True
    other.save()
    staff = Client()
    staff.force_login(other)
    assert staff.post(reverse("dashboard:run_cancel", args=[run.pk])).status_code == 302
    run.refresh_from_db()
    assert run.cancel_requested


def test_runs_list_filters(owner: User, owner_client: Client) -> None:
    ps = make_prompt_set()
    make_run(owner, ps, name="grpo-a", algorithm="grpo")
    make_run(owner, ps, name="pos-b", algorithm="ada-pos")
    resp = owner_client.get("/", {"algorithm": "grpo"})
    assert b"grpo-a" in resp.content and b"pos-b" not in resp.content
    resp = owner_client.get("/", {"q": "pos"})
    assert b"pos-b" in resp.content and b"grpo-a" not in resp.content
    resp = owner_client.get("/", {"status": "running"})
    assert b"pos-b" not in resp.content and b"No runs yet" in resp.content


def _launch_data(prompt_set: PromptSet, **overrides: object) -> dict[str, object]:
    from dashboard.forms import LaunchForm

    form = LaunchForm()
    data: dict[str, object] = {}
    for name, field in form.fields.items():
        value = field.initial
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                data[name] = "on"
            continue
        data[name] = value
    data.update(name="from-form", prompt_set=prompt_set.pk, queue="cpu", retention="all",
                backend="simulated")
    data.update(overrides)
    return data


def test_launch_form_lists_every_hyperparameter_with_default_and_help(owner_client: Client) -> None:
    from trainer.config import field_specs

    make_prompt_set()
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    for spec in field_specs():
        if spec["name"] in ("prompts", "eval_prompts"):
            continue
        assert f'id="field-{spec["name"]}"' in page, spec["name"]
        assert spec["help"].split(" (")[0][:30].replace("'", "&#x27;") in page, spec["name"]
    assert "Reinforce-Ada-balance" in page and "Reinforce-Ada-pos" in page and "GRPO" in page


def test_launch_form_shows_error_next_to_field(owner_client: Client) -> None:
    ps = make_prompt_set()
    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _launch_data(ps, samples_per_round=2, group_size=4))
    assert resp.status_code == 200
    html = resp.content.decode()
    block = html[html.index('id="field-samples_per_round"'):]
    block = block[:block.index('id="field-', 10)]
    assert "must be &gt;= group_size (4), got 2" in block
    assert "has-error" in html
    assert Run.objects.count() == 0
    # A type error from the form layer lands next to its field too.
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(ps, lr="fast"))
    html = resp.content.decode()
    block = html[html.index('id="field-lr"'):]
    assert "Enter a number." in block[:block.index('id="field-', 10)]


def test_launch_form_creates_run(owner_client: Client, owner: User) -> None:
    ps = make_prompt_set()
    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _launch_data(ps, algorithm="ada-pos", total_steps=3, seed=7,
                                          batch_size=4))  # a batch may not exceed the set
    assert resp.status_code == 302, resp.content.decode()[:2000]
    run = Run.objects.get()
    assert (run.owner, run.algorithm, run.seed, run.total_steps) == (owner, "ada-pos", 7, 3)
    assert run.config["backend"] == "simulated"
    assert resp["Location"] == reverse("dashboard:run_detail", args=[run.pk])


def test_clone_prefills_and_shows_differences_before_launch(run: Run, owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_launch") + f"?clone={run.pk}")
    form = page.context["form"]
    assert form.initial["batch_size"] == run.config["batch_size"]
    assert form.initial["algorithm"] == "ada-balance"
    data = _launch_data(run.prompt_set)
    data.update({k: v for k, v in form.initial.items() if v is not None
                 and not isinstance(v, bool) and k != "prompt_set"})
    data.update(cloned_from=run.pk, seed=5, name="clone-5")
    review = owner_client.post(reverse("dashboard:run_launch"), data)
    assert review.status_code == 200
    assert review.context["diff"] == [("seed", 0, 5)]
    assert Run.objects.count() == 1  # nothing launched before the confirmation
    data["confirm"] = "1"
    resp = owner_client.post(reverse("dashboard:run_launch"), data)
    assert resp.status_code == 302
    clone = Run.objects.get(name="clone-5")
    assert clone.cloned_from == run and clone.seed == 5


def test_upload_rejects_bad_file_and_imports_nothing(owner_client: Client) -> None:
    before_sets, before_prompts = PromptSet.objects.count(), Prompt.objects.count()
    bad = io.BytesIO(b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": "4"}\n'
                     b'{"prompt": "3+3="}\n')
    bad.name = "bad.jsonl"
    resp = owner_client.post(reverse("dashboard:prompt_sets"),
                             {"upload-name": "bad-set", "upload-file": bad})
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "line 3" in html and "answer" in html and "nothing imported" in html
    assert PromptSet.objects.count() == before_sets
    assert Prompt.objects.count() == before_prompts
    assert "Size limit" in html


def test_upload_valid_file_and_preview(owner_client: Client) -> None:
    good = io.BytesIO(b"\n".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}).encode()
                                 for i in range(30)))
    good.name = "good.jsonl"
    resp = owner_client.post(reverse("dashboard:prompt_sets"),
                             {"upload-name": "good-set", "upload-file": good})
    assert resp.status_code == 302
    ps = PromptSet.objects.get(name="good-set")
    assert ps.prompts.count() == 30
    preview = owner_client.get(resp["Location"]).content.decode()
    assert "0+1=" in preview and "19+1=" in preview and "20+1=" not in preview


def test_generate_builtin_set(owner_client: Client) -> None:
    resp = owner_client.post(reverse("dashboard:prompt_sets"), {
        "builtin-name": "arith", "builtin-num_prompts": 50, "builtin-min_digits": 1,
        "builtin-max_digits": 2, "builtin-seed": 3})
    assert resp.status_code == 302
    ps = PromptSet.objects.get(name="arith")
    assert ps.prompts.count() == 50 and ps.source == PromptSet.Source.BUILTIN


def test_run_page_live_status_and_failure(run: Run, owner_client: Client) -> None:
    record_run(run, steps=2)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    status = owner_client.get(reverse("dashboard:run_status", args=[run.pk])).content.decode()
    assert 'id="step-counter">2<' in status and "of 6" in status
    assert 'hx-trigger="every 2s"' in status  # keeps polling while active
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error="boom: bad thing",
                                         traceback="Traceback ...\nValueError: <bad>")
    status = owner_client.get(reverse("dashboard:run_status", args=[run.pk])).content.decode()
    assert "boom: bad thing" in status and "ValueError: &lt;bad&gt;" in status
    assert "hx-trigger" not in status  # a finished run stops polling


def test_prompt_history_escapes_responses(run: Run, owner_client: Client) -> None:
    record_run(run, steps=3, response="<script>alert({i})</script>")
    ps = run.prompt_steps.order_by("step").first()
    resp = owner_client.get(reverse("dashboard:prompt_history", args=[run.pk, ps.prompt_id]))
    html = resp.content.decode()
    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(0)&lt;/script&gt;" in html
    assert f"Step {ps.step}" in html
    assert ("eliminated after round" in html) or ("unresolved" in html)
    samples = run.samples.filter(prompt_id=ps.prompt_id, step=ps.step).count()
    assert html.count("<tr class=\"kept\">") + html.count("<tr class=\"\">") >= samples
    assert resp.context["steps"][-1].samples == ps.samples


def test_compare_page_groups_seeds_and_diffs_config(owner: User, owner_client: Client) -> None:
    ps = make_prompt_set()
    runs = [record_run(make_run(owner, ps, name=f"bal-{s}", seed=s)) for s in (1, 2)]
    runs.append(record_run(make_run(owner, ps, name="grpo-1", algorithm="grpo", seed=1)))
    q = "&".join(f"runs={r.pk}" for r in runs)
    page = owner_client.get(reverse("dashboard:compare") + "?" + q)
    assert page.status_code == 200
    diff = dict(page.context["diff"])
    assert diff["algorithm"] == ["ada-balance", "ada-balance", "grpo"]
    assert diff["seed"] == [1, 2, 1]
    html = page.content.decode()
    assert 'id="final-metrics"' in html and "grpo-1" in html
    fig = owner_client.get(reverse("dashboard:compare_chart") + "?" + q + "&x=samples").json()
    names = [t["name"] for t in fig["data"]]
    assert any("mean of 2 seeds" in n for n in names)
    assert "min-max across seeds" in names
    assert any(n.startswith("grpo-1") for n in names)
    assert fig["layout"]["xaxis"]["title"]["text"] == "cumulative samples"
    scatter = owner_client.get(reverse("dashboard:compare_scatter") + "?" + q).json()
    assert scatter["data"][0]["type"] == "scattergl"
    assert len(scatter["data"][0]["x"]) > 0


def test_compare_needs_two_runs(run: Run, owner_client: Client) -> None:
    resp = owner_client.get(reverse("dashboard:compare") + f"?runs={run.pk}")
    assert resp.status_code == 302


def test_owner_relaunches_and_deletes(run: Run, owner_client: Client) -> None:
    resp = owner_client.post(reverse("dashboard:run_relaunch", args=[run.pk]))
    assert resp.status_code == 302
    new = Run.objects.exclude(pk=run.pk).get()
    assert new.cloned_from_id == run.pk and new.config == run.config
    assert resp["Location"] == reverse("dashboard:run_detail", args=[new.pk])
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    assert owner_client.post(reverse("dashboard:run_delete", args=[run.pk])).status_code == 302
    assert not Run.objects.filter(pk=run.pk).exists()


def test_runs_list_refreshes_rows_while_runs_are_active(run: Run, owner_client: Client) -> None:
    page = owner_client.get("/").content.decode()
    assert 'hx-trigger="every 5s"' in page  # a queued run keeps the table live
    rows = owner_client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert "<table" not in rows and "balance-0" in rows  # only the rows are swapped
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    assert 'hx-trigger="every 5s"' not in owner_client.get("/").content.decode()
