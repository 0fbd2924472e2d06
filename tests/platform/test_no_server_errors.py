"""No HTTP 5xx on bad input: random query strings and form bodies, sent to every URL of the
URLconf (so a new page is covered the day it is added) as a signed-in user and as an anonymous
one. Django's own admin is left out (its pages are Django's, and ours are tested by name in
test_production.py).

The parameter names are the ones the views read (found in their source) and the ones their
pages' forms post (found in the rendered HTML), plus random ones; values are the inputs that broke
pages before (``²``, which passes ``str.isdigit()``; numbers past int32 and int64; NUL; names over
200 characters) and random text. The test client re-raises a view's exception, so a failure shows
the traceback and the falsifying example.
"""

from __future__ import annotations

import html.parser
import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from experiments.models import Prompt, Run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .dashboard_fixtures import make_prompt_set, make_run, record_run

SKIPPED_NAMESPACES = {"admin"}
EXAMPLES = {"user": 12, "anonymous": 4}
CONVERTER_ARG = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")


def _walk(patterns: list[Any], prefix: str = "", namespace: str | None = None
          ) -> Iterator[tuple[str, str, Any]]:
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = p.namespace or namespace
            if ns in SKIPPED_NAMESPACES:
                continue
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            route = getattr(p.pattern, "_route", None)
            assert route is not None, f"{p!r}: only path() routes can be generated here"
            yield f"{namespace}:{p.name}" if namespace else str(p.name), prefix + route, p


ROUTES = sorted(_walk(get_resolver().url_patterns), key=lambda r: r[1])


def _view_source_names() -> set[str]:
    """Request parameter names the views read: ``request.GET.get("x")``, ``POST["x"]``,
    ``params.get_int(request.GET, "x")``..."""
    names: set[str] = set()
    modules = {inspect.getmodule(getattr(p.callback, "view_class", p.callback))
               for _, _, p in ROUTES}
    for module in modules - {None}:
        source = inspect.getsource(module)
        names |= set(re.findall(r"""(?:GET|POST)(?:\.get|\.getlist)?[(\[,]\s*["']([\w-]+)["']""",
                                source))
    return names


class _FormNames(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("input", "select", "textarea", "button"):
            name = dict(attrs).get("name")
            if name:
                self.names.add(name)


AWKWARD = ["", " ", "0", "-1", "1", "2", "abc", "²", "٣", "1e9", "1.5", "nan", "inf", "-inf",
           "true", "on", "1,2", "2147483647", "2147483648", "-2147483649", "4294967296",
           "9223372036854775807", "9223372036854775808", "1" * 40, "\x00", "a\x00b", "%",
           "<script>", "' OR 1=1 --", "x" * 200, "y" * 255, "grpo", "ada-pos", "ada-balance",
           "simulated", "cpu", "gpu", "all", "none", "running", "queued", "failed", "step",
           "samples", "real_reward", "heatmap", "rewards", "builtin:tiny", "builtin:arithmetic"]


def _values(ids: list[int]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(AWKWARD),
        st.sampled_from([str(i) for i in ids]),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=24),
        st.integers(min_value=180, max_value=260).map(lambda n: "n" * n),
    )


def _path_arg(converter: str | None, world: dict[str, Any]) -> st.SearchStrategy[str]:
    if converter == "int":
        return st.one_of(st.sampled_from([str(i) for i in world["ids"]]),
                         st.integers(min_value=0, max_value=2**80).map(str))
    if converter == "slug":
        return st.one_of(st.sampled_from(world["slugs"]),
                         st.from_regex(r"[-a-zA-Z0-9_]{1,20}", fullmatch=True))
    return st.one_of(st.sampled_from(world["slugs"]), st.from_regex(r"[^/]{1,20}",
                                                                   fullmatch=True))


def _paths(route: str, world: dict[str, Any]) -> st.SearchStrategy[str]:
    args = list(CONVERTER_ARG.finditer(route))
    if not args:
        return st.just("/" + route)

    @st.composite
    def build(draw: Any) -> str:
        out, last = [], 0
        for m in args:
            out.append(route[last:m.start()])
            out.append(draw(_path_arg(m.group("conv"), world)))
            last = m.end()
        out.append(route[last:])
        return "/" + "".join(out)

    return build()


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """Runs in every state a page can meet (finished and recorded, queued, failed with a config
    that no longer validates, a 200-character name), committed for the module and removed after
    it: each test's own writes are rolled back."""
    from experiments.services import delete_run_records

    with django_db_blocker.unblock():
        owner = User.objects.create_user("fuzz-owner", password="pw-fuzz-owner")
        ps = make_prompt_set("fuzz-set", size=12)
        done = record_run(make_run(owner, ps, name="fuzz-done", total_steps=4, seed=1))
        Run.objects.filter(pk=done.pk).update(status=Run.Status.SUCCEEDED)
        queued = make_run(owner, ps, name="n" * 200, algorithm="grpo", total_steps=4)
        broken = make_run(owner, ps, name="fuzz-broken", total_steps=4)
        Run.objects.filter(pk=broken.pk).update(
            status=Run.Status.FAILED, config={**broken.config, "group_size": 10**12})
        runs = [done, queued, broken]
        prompt_ids = list(Prompt.objects.filter(prompt_set=ps).values_list("pk", flat=True))
        c = Client()
        c.force_login(owner)
        form_names = _FormNames()
        for _, route, _ in ROUTES:
            if "<" not in route:
                form_names.feed(c.get("/" + route).content.decode(errors="replace"))
        for page in (f"/runs/{done.pk}/", f"/runs/new/?clone={done.pk}", f"/compare/?runs="
                     f"{done.pk}&runs={queued.pk}", f"/runs/{done.pk}/prompts/{prompt_ids[0]}/"):
            form_names.feed(c.get(page).content.decode(errors="replace"))
        yield {"owner": owner, "ids": [r.pk for r in runs] + [ps.pk] + prompt_ids[:3],
               "slugs": ["rewards", "heatmap", "funnel", "eval", "nope"],
               "keys": sorted(_view_source_names() | form_names.names)}
        for run in Run.objects.filter(owner=owner):
            delete_run_records(run.pk)
        Run.objects.filter(owner=owner).delete()
        ps.delete()
        User.objects.filter(pk=owner.pk).delete()


def _request(client: Client, method: str, path: str, params: list[tuple[str, str]]) -> Any:
    data: dict[str, list[str]] = {}
    for key, value in params:
        data.setdefault(key, []).append(value)
    if method == "GET":
        return client.get(path, data)
    return client.post(path, data)


@pytest.mark.django_db
@pytest.mark.parametrize("who", sorted(EXAMPLES))
@pytest.mark.parametrize(("name", "route"), [(n, r) for n, r, _ in ROUTES],
                         ids=[n for n, _, _ in ROUTES])
def test_no_5xx_on_random_input(world: dict[str, Any], name: str, route: str, who: str) -> None:
    keys = st.one_of(st.sampled_from(world["keys"]), st.from_regex(r"[a-z_-]{1,12}",
                                                                   fullmatch=True))
    params = st.lists(st.tuples(keys, _values(world["ids"])), max_size=8)

    @settings(max_examples=EXAMPLES[who], deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(path=_paths(route, world), method=st.sampled_from(["GET", "POST"]), params=params)
    def check(path: str, method: str, params: list[tuple[str, str]]) -> None:
        client = Client()
        if who == "user":
            client.force_login(world["owner"])
        response = _request(client, method, path, params)
        assert response.status_code < 500, (method, path, params, response.status_code)

    check()


def test_every_dashboard_page_is_covered() -> None:
    """The walk finds the dashboard's pages (a broken walk would test nothing)."""
    names = {n for n, _, _ in ROUTES}
    assert {"dashboard:run_list", "dashboard:run_launch", "dashboard:run_chart",
            "dashboard:prompt_sets", "dashboard:compare_chart", "healthz"} <= names
    assert not any(n.startswith("admin:") for n in names)
