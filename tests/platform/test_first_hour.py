"""A researcher's first hour (issue 20): settings compared as they resolve, a clone that says
what it changed, numbers written one way, errors that name what is wrong."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from dashboard import selectors
from dashboard.forms import clone_name, initial_from_run
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from experiments.models import PromptSet, Run

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


def _diff_keys(diff: list) -> dict[str, list]:
    return {key: cells for key, cells in diff}


def test_compare_diffs_settings_as_they_resolve(owner: User, owner_client: Client) -> None:
    """``verifier auto`` on a built-in set is ``exact``, ``device auto`` on the cpu queue is
    ``cpu``: no difference. A real difference is listed with the raw spelling on hover."""
    ps = make_prompt_set("resolve-set", size=8)
    a = make_run(owner, ps, name="a", verifier="auto", device="auto", std_normalize=None)
    b = make_run(owner, ps, name="b", verifier="exact", device="cpu", std_normalize=False,
                 K_pos=2, K_neg=2)
    diff = _diff_keys(selectors.config_diff([a, b]))
    # ada-balance with n = 4: K_pos = K_neg = 2 and no std normalisation are its defaults.
    assert "verifier" not in diff and "device" not in diff
    assert "std_normalize" not in diff and "K_pos" not in diff and "K_neg" not in diff
    c = make_run(owner, ps, name="c", verifier="math", lr=3e-4)
    diff = _diff_keys(selectors.config_diff([a, c]))
    assert [cell.value for cell in diff["verifier"]] == ["exact", "math"]
    assert diff["verifier"][0].resolved and diff["verifier"][0].raw_text == "auto"
    assert not diff["verifier"][1].resolved
    html = owner_client.get(reverse("dashboard:compare") + f"?runs={a.pk}&runs={c.pk}"
                      ).content.decode()
    table = html[html.index('id="config-diff"'):]
    assert 'title="set as auto; resolves to exact"' in table
    assert "device" not in table[:table.index("</table>")]
    same = owner_client.get(reverse("dashboard:compare") + f"?runs={a.pk}&runs={b.pk}"
                      ).content.decode()
    assert "settings resolve to the same values" in same


def test_a_clone_shows_its_differences_from_its_source(owner: User, owner_client: Client) -> None:
    ps = make_prompt_set("clone-set", size=8)
    source = record_run(make_run(owner, ps, name="source", total_steps=2))
    clone = make_run(owner, ps, name="source (clone)", total_steps=2, lr=5e-4,
                     algorithm="grpo", verifier="auto")
    clone.cloned_from = source
    clone.save()
    html = owner_client.get(reverse("dashboard:run_detail", args=[clone.pk])).content.decode()
    block = html[html.index('id="source-diff"'):html.index("</details>",
                                                           html.index('id="source-diff"'))]
    text = " ".join(re.sub(r"<[^>]+>", " ", block).split())
    assert "Differences from its source, source" in text
    assert "algorithm ada-balance grpo" in text and "lr 1e-06 0.0005" in text
    assert "K_pos 2 –" in text  # GRPO has no exit counts
    assert "verifier" not in text  # auto resolves to the source's exact
    again = make_run(owner, ps, name="again", total_steps=2)
    again.cloned_from = source
    again.save()
    html = owner_client.get(reverse("dashboard:run_detail", args=[again.pk])).content.decode()
    assert "None: this run repeats its source's settings exactly." in html
    plain = owner_client.get(reverse("dashboard:run_detail", args=[source.pk])).content.decode()
    assert 'id="source-diff"' not in plain


def test_a_sweep_runs_clone_keeps_the_sweeps_name_and_its_values(owner: User) -> None:
    from experiments import services

    ps = make_prompt_set("sweep-clone-set", size=8)
    sweep = services.launch_sweep(owner, "my sweep", {"backend": "simulated", "batch_size": 4},
                                  services.parse_sweep_spec("algorithm=grpo,ada-pos;seed=0,1"),
                                  ps)
    run = Run.objects.filter(sweep=sweep).order_by("pk").first()
    assert run.name == "my sweep [algorithm=grpo, seed=0]"
    assert clone_name(run) == "my sweep [algorithm=grpo, seed=0] (clone)"
    assert initial_from_run(run)["name"] == "my sweep [algorithm=grpo, seed=0] (clone)"
    lone = make_run(owner, ps, name="alone")
    assert clone_name(lone) == "alone (clone)"
    # A sweep's name as long as the column: its runs' and their clones' names are shortened
    # in the sweep's name, never in the values that tell them apart.
    long = services.launch_sweep(owner, "s" * 200, {"backend": "simulated", "batch_size": 4},
                                 {"seed": [0, 1]}, ps)
    names = [r.name for r in Run.objects.filter(sweep=long).order_by("pk")]
    assert [len(n) for n in names] == [200, 200]
    assert names[0].endswith("s… [seed=0]") and names[1].endswith("s… [seed=1]")
    clone = clone_name(Run.objects.filter(sweep=long).order_by("pk").last())
    assert len(clone) == 200 and clone.endswith("s… [seed=1] (clone)")


# --- numbers, one way everywhere ----------------------------------------------------------------

class _Text(HTMLParser):
    """The text a reader sees: no scripts, styles, code or attribute values."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style", "code", "pre", "textarea"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "code", "pre", "textarea"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


# Integers of 5 digits or more written without separators; dates ("2026-12-02"), times and
# decimals are left alone.
UNSEPARATED = re.compile(r"(?<![\d.,:\-/])\d{5,}(?![\d.,:\-/])")


def test_pages_write_large_numbers_with_thousands_separators(owner: User,
                                                             owner_client: Client) -> None:
    """"26688 samples spent" on the status card against "18,264" in the list: every page a run
    appears on writes its counts one way."""
    ps = make_prompt_set("numbers-set", size=8)
    a = record_run(make_run(owner, ps, name="numbers-a", total_steps=2))
    b = record_run(make_run(owner, ps, name="numbers-b", total_steps=2, seed=1))
    Run.objects.filter(pk__in=[a.pk, b.pk]).update(samples_spent=26688, total_steps=12000)
    PromptSet.objects.filter(pk=ps.pk).update(size=20480)
    pages = [reverse("dashboard:run_detail", args=[a.pk]), reverse("dashboard:run_list"),
             reverse("dashboard:run_status", args=[a.pk]),
             reverse("dashboard:compare") + f"?runs={a.pk}&runs={b.pk}",
             reverse("dashboard:prompt_sets"), reverse("dashboard:prompt_set_detail",
                                                       args=[ps.pk]),
             reverse("dashboard:report") + f"?runs={a.pk}&runs={b.pk}"]
    for url in pages:
        resp = owner_client.get(url)
        assert resp.status_code == 200, url
        text = visible_text(resp.content.decode())
        assert UNSEPARATED.findall(text) == [], (url, UNSEPARATED.findall(text))
    status = visible_text(owner_client.get(pages[2]).content.decode())
    assert "26,688 samples spent" in status and "of 12,000" in status


def test_text_in_a_number_field_says_not_a_number(owner: User, owner_client: Client) -> None:
    """The browser posts a number input holding text as empty; forms.js names it in
    _not_a_number, and the field says "not a number" instead of "This field is required." (a
    required field) or nothing (an optional one, K_pos)."""
    from .test_dashboard_views import _launch_data, field_block

    ps = make_prompt_set("typed-set", size=8)
    data = {**_launch_data(ps, name="typed"), "batch_size": "", "K_pos": "",
            "_not_a_number": ["batch_size", "K_pos"]}
    html = owner_client.post(reverse("dashboard:run_launch"), data).content.decode()
    for field in ("batch_size", "K_pos"):
        block = field_block(html, field)
        assert "not a number" in block, field
        assert "This field is required." not in block, field
    assert not Run.objects.exists()
    # The built-in set form (prefixed fields) too.
    html = owner_client.post(reverse("dashboard:prompt_sets"), {
        "builtin-name": "typed", "builtin-num_prompts": "", "builtin-min_digits": "1",
        "builtin-max_digits": "3", "builtin-seed": "0",
        "_not_a_number": ["builtin-num_prompts"]}).content.decode()
    assert "not a number" in html and "This field is required." not in html


def test_a_sweep_spec_names_every_bad_axis(owner: User, owner_client: Client) -> None:
    """`algorithm=;;seed=x` has two mistakes: both are named, on the launch form too."""
    from experiments import services

    from .test_dashboard_views import _launch_data, field_block

    with pytest.raises(services.LaunchError) as info:
        services.parse_sweep_spec("algorithm=;;seed=x;sed=1;lr=1e-4,fast,slow;nonsense")
    reasons = [r for _, r in info.value.pairs]
    assert {f for f, _ in info.value.pairs} == {"sweep"}
    assert any("algorithm: no values" in r for r in reasons)
    assert any("seed: 'x' is not an integer" in r for r in reasons)
    assert any("did you mean 'seed'" in r for r in reasons)
    assert any("'fast' is not a number" in r for r in reasons)
    assert any("'slow' is not a number" in r for r in reasons)
    assert any("expected field=value" in r and "nonsense" in r for r in reasons)
    ps = make_prompt_set("sweep-errors-set", size=8)
    html = owner_client.post(reverse("dashboard:run_launch"),
                       {**_launch_data(ps, name="s"), "sweep": "algorithm=;;seed=x"}
                       ).content.decode()
    block = field_block(html, "sweep")
    assert "algorithm: no values" in block and "seed: &#x27;x&#x27; is not an integer" in block
    assert not Run.objects.exists()


def test_bounds_read_one_way_with_separators(owner: User) -> None:
    """"must be within [1, 32_768]" and Django's "less than or equal to 100000": every bound
    reads "must be within [1, 100,000], got ..." now, the config's, the forms' and the
    services' alike."""
    from dashboard.forms import BuiltinForm
    from experiments import services

    from trainer.config import TrainConfig

    errors = {e.field: e.reason for e in TrainConfig(max_new_tokens=40_000, K_pos=-1).errors()}
    assert errors["max_new_tokens"] == "must be within [1, 32,768], got 40000"
    form = BuiltinForm({"builtin-name": "b", "builtin-num_prompts": "200000",
                        "builtin-min_digits": "0", "builtin-max_digits": "3",
                        "builtin-seed": "-1"}, prefix="builtin")
    assert not form.is_valid()
    assert form.errors["num_prompts"] == ["must be within [1, 100,000], got 200000"]
    assert form.errors["min_digits"] == ["must be within [1, 9], got 0"]
    assert "must be within [0, ...)" in form.errors["seed"][0]
    with pytest.raises(services.LaunchError, match=r"\[1, 1,000,000\]"):
        services.create_builtin_prompt_set(owner, "too many", 2_000_000)
