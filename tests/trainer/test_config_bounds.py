"""Every numeric config field has a lower and an upper bound, declared next to its default and
enforced by ``TrainConfig.validate`` naming the field (issue 10: ``ppo_epochs = 10**9`` held a
worker forever)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from trainer.config import MAX_SAMPLES_PER_PROMPT, MAX_SEED, ConfigError, TrainConfig, field_specs
from trainer.config_docs import config_reference
from trainer.validation import MAX_PATH_CHARS

ROOT = Path(__file__).resolve().parents[2]
NUMERIC = [spec for spec in field_specs()
           if spec["type"].removesuffix(" | None") in ("int", "float")]


def test_every_numeric_field_declares_both_bounds() -> None:
    assert len(NUMERIC) > 30  # the check below must see the fields
    missing = [s["name"] for s in NUMERIC
               if not ({"ge", "gt"} & set(s) and {"le", "lt"} & set(s))]
    assert missing == []


def test_the_default_of_every_field_is_within_its_bounds() -> None:
    assert TrainConfig().errors() == []


def _past(spec: dict, side: str) -> float:
    """The nearest value outside the bound on ``side`` (low or high)."""
    is_int = spec["type"].startswith("int")
    if side == "low":
        if "ge" in spec:
            return spec["ge"] - 1 if is_int else spec["ge"] - 1e-3
        return spec["gt"]
    if "le" in spec:
        return spec["le"] + 1 if is_int else spec["le"] * 1.001 + 1e-3
    return spec["lt"]


@pytest.mark.parametrize("spec", NUMERIC, ids=[s["name"] for s in NUMERIC])
@pytest.mark.parametrize("side", ["low", "high"])
def test_a_value_past_a_bound_is_an_error_naming_the_field(spec: dict, side: str) -> None:
    value = _past(spec, side)
    if spec["type"].startswith("int"):
        value = int(value)
    errors = TrainConfig(**{spec["name"]: value}).errors()
    named = [e for e in errors if e.field == spec["name"]]
    assert named, (spec["name"], value, errors)
    assert "must be within" in named[0].reason and repr(value) in named[0].reason


def test_the_upper_bound_itself_is_valid_alone() -> None:
    """Bounds are reachable: each field at its inclusive upper bound raises no error of its own
    (other fields may then object, e.g. K_pos above M x N)."""
    for spec in NUMERIC:
        if "le" in spec:
            errors = TrainConfig(**{spec["name"]: spec["le"]}).errors()
            assert not [e for e in errors if e.field == spec["name"]
                        and e.reason.startswith("must be within [")
                        and not e.reason.startswith("must be within [est_")], spec["name"]


def test_ppo_epochs_of_a_billion_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        TrainConfig.from_dict({"ppo_epochs": 10**9})
    assert exc.value.field == "ppo_epochs" and "[1, 64]" in exc.value.reason


def test_seed_fits_the_integer_columns() -> None:
    assert TrainConfig(seed=MAX_SEED).errors() == []
    with pytest.raises(ConfigError) as exc:
        TrainConfig.from_dict({"seed": MAX_SEED + 1})
    assert exc.value.field == "seed"


def test_samples_per_prompt_fit_the_smallint_columns() -> None:
    """M x N past 32,767 responses per prompt is refused on max_rounds, each field alone being
    within its bounds."""
    ok = {"samples_per_round": 4096, "max_rounds": 7}
    assert 4096 * 7 <= MAX_SAMPLES_PER_PROMPT
    assert TrainConfig.from_dict(ok)
    with pytest.raises(ConfigError) as exc:
        TrainConfig.from_dict({"samples_per_round": 4096, "max_rounds": 8})
    assert exc.value.field == "max_rounds" and "at most 32,767" in exc.value.reason
    # GRPO ignores M and N: no error for it.
    assert TrainConfig.from_dict({"algorithm": "grpo", "samples_per_round": 4096,
                                  "max_rounds": 8})


@pytest.mark.parametrize("name", ["model", "prompts", "eval_prompts"])
def test_paths_within_the_os_limits(name: str) -> None:
    too_long = "/tmp/" + "/".join(["d" * 200] * 21)
    assert len(too_long) > MAX_PATH_CHARS
    for value, words in ((too_long, "characters; at most"),
                         ("/tmp/" + "x" * 256, "longer than 255"),
                         ("/tmp/a\0b", "NUL")):
        errors = TrainConfig(**{name: value}).errors()  # no OSError from the filesystem
        assert [e for e in errors if e.field == name and words in e.reason], (name, errors)


def test_step_work_figures() -> None:
    seq = TrainConfig(batch_size=32, samples_per_round=8, max_rounds=4, max_new_tokens=16)
    assert (seq.max_samples_per_step, seq.max_step_tokens) == (1024, 16384)
    grpo = TrainConfig(algorithm="grpo", batch_size=32, group_size=4, max_new_tokens=16)
    assert grpo.max_step_tokens == 32 * 4 * 16
    est = TrainConfig(algorithm="ada-est", batch_size=32, budget_per_prompt=8)
    assert est.max_samples_per_step == 256


def test_docs_config_reference_is_up_to_date() -> None:
    """docs/config.md documents every field's bounds; regenerate it with
    ``python -m trainer config-docs > docs/config.md``."""
    assert (ROOT / "docs" / "config.md").read_text() == config_reference()
    assert {f.name for f in fields(TrainConfig) if not f.metadata.get("internal")} <= set(
        line.split("`")[1] for line in config_reference().splitlines()
        if line.startswith("| `"))
