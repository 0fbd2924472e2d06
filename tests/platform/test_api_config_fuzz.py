"""Random configs (every TrainConfig field, awkward values: NaN, infinities, huge integers,
NUL, nested lists, lone surrogates, integers past a float's range, deep nesting) launched
through the API: a 4xx or a launch, never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api.services import create_token
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.config import field_specs

from .dashboard_fixtures import make_prompt_set
from .test_api import Api

NAMES = [spec["name"] for spec in field_specs()]
AWKWARD = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 2**63, 2**64, -(2**63) - 1,
                     10**30, 1e308, -1, 0, 1, 0.5, True, False, None, "", "\x00", "auto",
                     "builtin:tiny", [1, 2], {"a": 1},
                     # The classes of issue 19: a lone surrogate, past a float's range, deep.
                     "\ud800", "a\udfffb", 10**400, -(10**400), json.loads("[" * 300 + "]" * 300),
                     {"\ud800": 1}]),
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.text(max_size=12))


@pytest.mark.django_db
def test_random_configs_never_give_a_5xx(user: Any) -> None:
    make_prompt_set("arith", size=12)
    api = Api(create_token(user, "t")[1])

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(config=st.dictionaries(st.sampled_from(NAMES), AWKWARD, max_size=5),
           sweep=st.booleans())
    def check(config: dict[str, Any], sweep: bool) -> None:
        body = {"name": "fuzz", "prompt_set": "arith",
                "config": {"backend": "simulated", "batch_size": 4, **config}}
        path = "/sweeps" if sweep else "/runs"
        if sweep:
            body["grid"] = {"seed": [0, 1]}
        # allow_nan: Python's json module reads NaN and Infinity, so a client may send them.
        r = api.client.post("/api/v1" + path, data=json.dumps(body, allow_nan=True),
                            content_type="application/json", headers=api.headers)
        assert r.status_code < 500, (body, r.content[:300])

    check()
