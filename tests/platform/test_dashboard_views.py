"""Dashboard pages on PostgreSQL: sign-in, permissions, forms, uploads, prompt history, compare."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from experiments.models import Prompt, PromptSet, Run

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


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


def field_block(html: str, name: str) -> str:
    """The launch form's markup of one field, up to the next field's: where its error shows."""
    block = html[html.index(f'id="field-{name}"'):]
    return block[:block.index('id="field-', 10)]


def test_launch_form_lists_every_hyperparameter_with_default_and_help(owner_client: Client) -> None:
    from trainer.config import field_specs

    make_prompt_set()
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    for spec in field_specs():
        if spec["name"] in ("prompts", "eval_prompts"):
            continue
        assert f'id="field-{spec["name"]}"' in page, spec["name"]
        # The page holds the help HTML-escaped ('world_size > 1' reads 'world_size &gt; 1').
        assert escape(spec["help"].split(" (")[0][:30]) in page, spec["name"]
    for label in ("GRPO", "Reinforce-Ada Seq-pos (v1/v2: ada-pos)",
                  "Reinforce-Ada Seq-balance (v1/v2: ada-balance)", "Reinforce-Ada Est", "DAPO"):
        assert label in page
    assert "Reinforce-Ada Est (ada-est only)" in page  # the Est fields' group


def test_every_choice_field_is_a_dropdown_of_exactly_its_values() -> None:
    """A string field with a fixed set of values is a <select> of those values (rollout_dtype was
    once a free-text box); the remaining string fields are the free-text ones, by decision."""
    from dataclasses import fields

    from dashboard.forms import LaunchForm

    from trainer.config import CHOICE_FIELDS, TrainConfig

    form = LaunchForm()
    for name, values in CHOICE_FIELDS.items():
        widget = form.fields[name].widget
        assert widget.input_type == "select", name
        assert [v for v, _ in form.fields[name].choices] == list(values), name
    text = {f.name for f in fields(TrainConfig) if f.type == "str"} - set(CHOICE_FIELDS)
    # rewards: names with weights ("verifier:1 format:0.1"), the registered names listed beside;
    # mirror: tracker targets ("mlflow:DIR, tensorboard:DIR"); lora_target_modules: "all-linear"
    # or module names.
    assert text == {"model", "prompts", "eval_prompts", "rewards", "mirror",
                    "lora_target_modules"}


def test_launch_form_shows_optimizer_steps_per_training_step(owner_client: Client) -> None:
    ps = make_prompt_set()
    url = reverse("dashboard:run_launch")
    page = owner_client.get(url).content.decode()
    # The defaults: the whole batch in one mini-batch, one optimiser step (no clipping).
    assert '<output for="id_batch_size id_ppo_mini_batch_size id_ppo_epochs" ' \
           'id="optimizer-steps-value">1</output>' in page
    # As entered: B=32 in mini-batches of 8, 2 epochs = 8 steps (an invalid form re-renders).
    html = owner_client.post(url, _launch_data(ps, batch_size=32, ppo_mini_batch_size=8,
                                               ppo_epochs=2, lr="fast")).content.decode()
    assert 'id="optimizer-steps-value">8</output>' in html


def test_launch_form_shows_error_next_to_field(owner_client: Client) -> None:
    ps = make_prompt_set()
    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _launch_data(ps, samples_per_round=2, group_size=4))
    assert resp.status_code == 200
    html = resp.content.decode()
    block = field_block(html, "samples_per_round")
    assert "must be &gt;= group_size (4), got 2" in block
    assert "has-error" in html
    assert Run.objects.count() == 0
    # A type error from the form layer lands next to its field too.
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(ps, lr="fast"))
    html = resp.content.decode()
    assert "Enter a number." in field_block(html, "lr")


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


def test_launch_form_v3_fields(owner_client: Client) -> None:
    ps = make_prompt_set()
    url = reverse("dashboard:run_launch")
    resp = owner_client.post(url, _launch_data(ps, name="seq", algorithm="ada-balance",
                                               batch_size=4, K_pos=3, K_neg=""))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    seq = Run.objects.get(name="seq")
    assert (seq.config["K_pos"], seq.config["K_neg"]) == (3, None)  # empty: the rule's default
    resp = owner_client.post(url, _launch_data(ps, name="est", algorithm="ada-est", batch_size=4,
                                               budget_per_prompt=6, est_weight="inv"))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    est = Run.objects.get(name="est")
    assert (est.algorithm, est.config["budget_per_prompt"], est.config["est_weight"]) == (
        "ada-est", 6, "inv")
    html = owner_client.post(url, _launch_data(ps, name="bad", algorithm="ada-est",
                                               batch_size=4, budget_per_prompt=1)
                             ).content.decode()
    assert "must be within [est_min_samples, est_max_samples]" in field_block(
        html, "budget_per_prompt")
    assert not Run.objects.filter(name="bad").exists()


def test_launch_form_selects_the_scheduler(owner_client: Client) -> None:
    """The scheduler is a launch field: per-prompt launches on the simulated backend, and hf
    with anything but round is refused next to the field, saying why."""
    ps = make_prompt_set()
    url = reverse("dashboard:run_launch")
    page = owner_client.get(url).content.decode()
    assert 'id="field-scheduler"' in page and "a different algorithm" in page
    resp = owner_client.post(url, _launch_data(ps, name="pp", batch_size=4,
                                               scheduler="per-prompt"))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert Run.objects.get(name="pp").config["scheduler"] == "per-prompt"
    html = owner_client.post(url, _launch_data(ps, name="bad", batch_size=4, backend="hf",
                                               scheduler="streaming")).content.decode()
    assert "the hf backend supports only &#x27;round&#x27;" in field_block(html, "scheduler")
    assert not Run.objects.filter(name="bad").exists()


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
    # (setting, [the source's value, this launch's]): each as it resolves (DiffCell.value).
    assert [(k, *(c.value for c in cells)) for k, cells in review.context["diff"]] == [
        ("seed", 0, 5)]
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
    # The long-answer variant, from the same form; past its digit limit, an error on the field.
    resp = owner_client.post(reverse("dashboard:prompt_sets"), {
        "builtin-name": "long", "builtin-task": "arithmetic-long", "builtin-num_prompts": 40,
        "builtin-min_digits": 1, "builtin-max_digits": 3, "builtin-seed": 3})
    assert resp.status_code == 302
    long_set = PromptSet.objects.get(name="long")
    assert long_set.prompts.count() == 40 and "arithmetic-long" in long_set.description
    assert all(t.count("+") >= 1 and t.endswith("=")
               for t in long_set.prompts.values_list("text", flat=True))
    assert max(t.count("+") for t in long_set.prompts.values_list("text", flat=True)) >= 3
    preview = owner_client.get(reverse("dashboard:prompt_set_detail",
                                       args=[long_set.pk])).content.decode()
    assert "answers are the running sums after each" in preview
    assert "sum&#x27;s digits reversed" not in preview
    resp = owner_client.post(reverse("dashboard:prompt_sets"), {
        "builtin-name": "long5", "builtin-task": "arithmetic-long", "builtin-num_prompts": 40,
        "builtin-min_digits": 1, "builtin-max_digits": 5, "builtin-seed": 3})
    assert resp.status_code == 200
    assert "need 1 &lt;= min_digits &lt;= max_digits &lt;= 4" in resp.content.decode()
    assert not PromptSet.objects.filter(name="long5").exists()


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
    diff = {k: [c.value for c in cells] for k, cells in page.context["diff"]}
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
    # The relaunch copies the config; verifier=auto (the fixture's, as runs stored before launch
    # resolved it) is resolved from the prompt set, as every launch does.
    assert new.cloned_from_id == run.pk
    assert run.config["verifier"] == "auto" and new.config["verifier"] == "exact"
    assert {k: v for k, v in new.config.items() if k != "verifier"} == {
        k: v for k, v in run.config.items() if k != "verifier"
    }
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


# --- second round: what a first-time user tripped over ----------------------------------------

def test_launch_form_reports_every_error_at_once(owner_client: Client) -> None:
    ps = make_prompt_set()
    bad = {"name": "", "group_size": 1, "samples_per_round": 0, "lr": 2.0, "top_p": 3.0,
           "temperature": -1, "batch_size": 500, "max_new_tokens": "many"}
    resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(ps, **bad))
    assert resp.status_code == 200 and Run.objects.count() == 0
    errors = resp.context["form"].errors
    assert set(errors) == set(bad)  # one submission, every field at fault
    html = resp.content.decode()
    for name in bad:
        block = html[html.index(f'id="field-{name}"'):]
        block = block[:block.index("</div>\n</div>") if "</div>\n</div>" in block else 600]
        assert 'class="field-error"' in block, name
    assert "larger than the prompt set (12 prompts)" in html  # the service's check, too
    summary = html[html.index('id="form-errors"'):][:1500]
    assert f"{len(bad)} fields to fix" in summary
    # In the order the fields appear on the page (issue 27: it was the order they were found).
    linked = re.findall(r'href="#field-(\w+)"', summary)
    on_page = [m for m in re.findall(r'id="field-(\w+)"', html) if m in bad]
    assert linked == on_page and sorted(linked) == sorted(bad), (linked, on_page)
    assert linked[0] == "name" and linked.index("group_size") < linked.index("lr")


def test_launch_form_reports_a_derived_error_only_when_its_inputs_are_valid(
        owner_client: Client) -> None:
    """A negative batch_size is one error, not a second one on the untouched mini-batch
    ("must be <= batch_size (-5)"); nor does a batch_size that did not parse let the checks
    read the default in its place (issue 27)."""
    ps = make_prompt_set()
    for bad in ({"batch_size": -5}, {"batch_size": 70_000},
                {"batch_size": "", "_not_a_number": "batch_size", "ppo_mini_batch_size": 64},
                {"batch_size": "", "_not_a_number": "batch_size", "dapo_gen_batch_size": 16,
                 "algorithm": "dapo"}):
        resp = owner_client.post(reverse("dashboard:run_launch"), _launch_data(ps, **bad))
        errors = resp.context["form"].errors
        assert list(errors) == ["batch_size"], (bad, errors)
    # Valid inputs: the derived checks speak (the config's and the platform's).
    resp = owner_client.post(reverse("dashboard:run_launch"),
                             _launch_data(ps, batch_size=8, ppo_mini_batch_size=64))
    assert resp.context["form"].errors["ppo_mini_batch_size"] == [
        "must be <= batch_size (8), got 64"]


def test_launch_form_proposes_the_builtin_models_learning_rate(run: Run,
                                                               owner_client: Client) -> None:
    from trainer.config import BUILTIN_MODEL, TrainConfig, recommended_lr

    form = owner_client.get(reverse("dashboard:run_launch")).context["form"]
    assert form["model"].value() == BUILTIN_MODEL
    assert form["lr"].value() == recommended_lr(BUILTIN_MODEL) == 2e-4 != TrainConfig.lr
    # The page switches it with the model while the user has not typed their own.
    assert json.loads(form.fields["lr"].widget.attrs["data-lr-by-model"]) == {
        BUILTIN_MODEL: 2e-4, "": TrainConfig.lr}
    # A clone keeps its run's learning rate.
    clone = owner_client.get(reverse("dashboard:run_launch") + f"?clone={run.pk}")
    assert clone.context["form"]["lr"].value() == run.config["lr"]


def test_prompt_of_another_set_is_not_found(run: Run, owner_client: Client) -> None:
    record_run(run, steps=1)
    other = make_prompt_set(name="other-set")
    foreign = Prompt.objects.filter(prompt_set=other).first()
    own = Prompt.objects.filter(prompt_set=run.prompt_set).first()
    for name in ("dashboard:prompt_history", "dashboard:prompt_chart"):
        assert owner_client.get(reverse(name, args=[run.pk, foreign.pk])).status_code == 404
        assert owner_client.get(reverse(name, args=[run.pk, own.pk])).status_code == 200


def test_reversed_answers_are_explained_where_shown(run: Run, owner_client: Client) -> None:
    prompt = Prompt.objects.filter(prompt_set=run.prompt_set).get(index=7)  # 7+8=, answer 51
    html = owner_client.get(reverse("dashboard:prompt_history",
                                    args=[run.pk, prompt.pk])).content.decode()
    assert "digits reversed (least significant first): 51 is the sum 15" in html
    preview = owner_client.get(reverse("dashboard:prompt_set_detail",
                                       args=[run.prompt_set_id])).content.decode()
    assert "answers are the sum&#x27;s digits reversed" in preview
    uploaded = PromptSet.objects.create(name="up", source=PromptSet.Source.UPLOAD, size=0)
    assert 'id="answer-note"' not in owner_client.get(reverse(
        "dashboard:prompt_set_detail", args=[uploaded.pk])).content.decode()


def test_parameters_that_choose_the_view_are_a_400_naming_them(run: Run,
                                                               owner_client: Client) -> None:
    """An unknown axis, metric, order or row range is refused, not replaced by a default (a
    shared URL must show what it names); malformed ids and counts are ignored
    (test_bad_input.py)."""
    runs = f"{run.pk},{make_run(run.owner, run.prompt_set, name='b').pk}"
    heat = reverse("dashboard:run_chart", args=[run.pk, "heatmap"])
    for path, query, named in [
            (reverse("dashboard:compare"), {"runs": runs, "x": "bogus"}, "x"),
            (reverse("dashboard:compare_chart"), {"runs": runs, "metric": "nope"}, "metric"),
            (reverse("dashboard:compare_chart"), {"runs": runs, "x": "wall\x00"}, "x"),
            (heat, {"rows": "9-2"}, "rows"),
            (heat, {"rows": "²-3"}, "rows"),
            (heat, {"sort": "random"}, "sort"),
            (reverse("dashboard:run_detail", args=[run.pk]), {"rows": "a-b"}, "rows")]:
        resp = owner_client.get(path, query)
        assert resp.status_code == 400, (path, query)
        assert f"{named}: " in resp.content.decode(), (path, query)
    ok = owner_client.get(heat, {"sort": "pass-rate", "rows": "1-3", "q": "1+"})
    assert ok.status_code == 200 and ok.json()["bin_size"] == 1


def test_compare_url_keeps_the_view_and_names_missing_runs(owner: User,
                                                           owner_client: Client) -> None:
    ps = make_prompt_set()
    a, b = (record_run(make_run(owner, ps, name=n, seed=s)) for n, s in (("a", 1), ("b", 2)))
    url = reverse("dashboard:compare")
    page = owner_client.get(url, {"runs": f"{a.pk},{b.pk}", "x": "samples",
                                  "metric": "zero_adv_frac"}).content.decode()
    # One x-axis control for the page, showing the URL's choice; both charts follow it.
    assert page.count('name="x"') == 1 and page.count('name="metric"') == 1
    assert '<option value="samples" selected>' in page
    assert '<option value="zero_adv_frac" selected>' in page
    assert "&x=samples&metric=zero_adv_frac\"" in page
    assert "&x=samples&metric=samples\"" in page
    assert "data-url-state" in page
    # A shared link naming a deleted run: the others are compared and the missing one named.
    resp = owner_client.get(url, {"runs": f"{a.pk},{b.pk},99999"})
    assert resp.status_code == 200
    assert "No run with id 99999" in resp.content.decode()
    resp = owner_client.get(url, {"runs": f"{a.pk},99998,99999"}, follow=True)
    html = resp.content.decode()
    assert "No runs with ids 99998, 99999" in html and "1 was found" in html
    chart = owner_client.get(reverse("dashboard:compare_chart"), {"runs": f"{a.pk},99999"})
    assert [t["name"] for t in chart.json()["data"]] == ["a (Reinforce-Ada Seq-balance)"]


def test_compare_formats_the_last_evaluation(owner: User, owner_client: Client) -> None:
    from experiments.models import EvalResult

    ps = make_prompt_set()
    a, b = (make_run(owner, ps, name=n) for n in ("a", "b"))
    EvalResult.objects.create(run=a, step=40, metrics={
        "prompts": 200.0, "k": 4.0, "greedy_accuracy": 0.47, "avg@4": 0.4125, "pass@4": 0.6,
        "verifier_errors": 0.0})
    html = owner_client.get(reverse("dashboard:compare"),
                            {"runs": f"{a.pk},{b.pk}"}).content.decode()
    assert ("step 40: avg@4 0.412 · greedy accuracy 0.470 · pass@4 0.600 (200 prompts, k = 4, "
            "0 verifier errors)" in html)
    assert "200.000" not in html and "k 4.000" not in html


def test_delete_arrives_with_the_status_poll_when_the_run_finishes(run: Run,
                                                                   owner_client: Client) -> None:
    status_url = reverse("dashboard:run_status", args=[run.pk])
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    live = owner_client.get(status_url, HTTP_HX_REQUEST="true").content.decode()
    # The actions are part of what the poll swaps (no out-of-band swap, which a late poll
    # could aim at a card no longer on the page).
    assert 'id="run-actions"' in live and "run-delete-button" not in live
    assert "hx-swap-oob" not in live and 'id="run-live"' in live
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    done = owner_client.get(status_url, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="run-actions"' in done and 'id="run-delete-button"' in done
    assert "hx-trigger" not in done  # and the polling stops


def test_favicon(client: Client) -> None:
    resp = client.get("/favicon.ico", follow=True)
    assert resp.status_code == 200
    body = b"".join(resp.streaming_content) if resp.streaming else resp.content
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO
    assert resp.redirect_chain[0][0].endswith(".ico")


def test_runs_list_fits_its_shape_columns_and_keeps_symbol_case(run: Run,
                                                                owner_client: Client) -> None:
    from django.contrib.staticfiles import finders

    html = owner_client.get("/").content.decode()
    assert "<th title=\"B prompts per step · group size n" in html and ">B · n · M×N</th>" in html
    assert ">4 · 4 · 8×4</td>" in html  # B, n, M x N of the run
    css = open(finders.find("dashboard/app.css")).read()
    th_rule = css[css.index("\nth {"):][:200].split("}")[0]
    assert "text-transform" not in th_rule  # "n" and "N" stay two symbols
