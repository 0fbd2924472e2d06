"""Checks across config fields report only when their own inputs are valid (issue 27: a negative
``batch_size`` also flagged the untouched ``ppo_mini_batch_size``, "must be <= batch_size (-5)").

Generated from the validation itself: every ``CrossCheck`` (everyone's, ``CROSS_CHECKS``, and
every registered algorithm's, ``Algorithm.config_checks``) is made to fail with its ``example``,
then each of its inputs is broken in turn (a wrong type, past each bound, an unknown choice) and
no derived error may appear or remain; and every field of every algorithm's defaults, broken
alone, is the only field named. A check added later is covered without a line here."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.algorithms import CrossCheck, algorithms
from trainer.config import CHOICE_FIELDS, TrainConfig, config_keys, field_specs
from trainer.validation import CROSS_CHECKS

SPECS = {spec["name"]: spec for spec in field_specs()}
# The config's fields and the registered algorithms' options: a check may read either.
FIELDS = set(config_keys())
# (the algorithm an algorithm's own check runs under, or None, and the check)
CHECKS: list[tuple[str | None, CrossCheck]] = [
    *((None, c) for c in CROSS_CHECKS),
    *((a.name, c) for a in algorithms() for c in a.config_checks)]


def _check_id(case: tuple[str | None, CrossCheck]) -> str:
    return f"{case[0]}:{case[1].name}" if case[0] else case[1].name


def bad_values(name: str) -> list[Any]:
    """Values of field ``name`` that fail its own checks: a wrong type, past each bound, an
    unknown choice, a path with a NUL."""
    spec = SPECS[name]
    typ = spec["type"].removesuffix(" | None")
    out: list[Any] = [5] if typ == "str" else ["x"]
    if typ in ("int", "float"):
        step = 1 if typ == "int" else 0.5
        if "ge" in spec:
            out.append(spec["ge"] - step)
        if "gt" in spec:
            out.append(spec["gt"])
        if "le" in spec:
            out.append(spec["le"] + step)
        if "lt" in spec:
            out.append(spec["lt"])
    if name in CHOICE_FIELDS:
        out.append("no-such-choice")
    if name in ("model", "prompts", "eval_prompts"):
        out.append("data/a\0b.jsonl")
    return out


def _pairs(config: TrainConfig, **kwargs: Any) -> set[tuple[str, str]]:
    return {(e.field, e.reason) for e in config.errors(**kwargs)}


@pytest.mark.parametrize("case", CHECKS, ids=[_check_id(c) for c in CHECKS])
def test_a_cross_check_fails_its_example_and_is_quiet_once_an_input_is_broken(
        case: tuple[str | None, CrossCheck]) -> None:
    algorithm, check = case
    assert set(check.inputs) <= FIELDS, check.inputs
    example = {**({"algorithm": algorithm} if algorithm else {}), **check.example}
    config = TrainConfig(**example)
    own = set(check.check(config))
    found = _pairs(config)
    assert own, f"{check.name}: its example {example} does not fail it"
    assert own <= found
    for name in check.inputs:
        # Named wrong by the caller (a form input that did not parse): the check is quiet.
        assert not own & _pairs(config, invalid={name}), (check.name, name)
        for bad in bad_values(name):
            errors = TrainConfig(**{**example, name: bad}).errors()
            on_input = [e for e in errors if e.field == name]
            assert len(on_input) == 1, (check.name, name, bad, errors)
            # Nothing new derived from the broken value, and this check is gone.
            others = {(e.field, e.reason) for e in errors if e.field != name}
            assert others <= found - own, (check.name, name, bad, others - (found - own))


class _Reads(TrainConfig):
    """A config that records which fields are read, through properties too."""

    def __getattribute__(self, name: str) -> Any:
        if name in FIELDS:
            object.__getattribute__(self, "__dict__").setdefault("_read", set()).add(name)
        return object.__getattribute__(self, name)


@pytest.mark.parametrize("case", CHECKS, ids=[_check_id(c) for c in CHECKS])
def test_a_cross_check_reads_only_its_inputs(case: tuple[str | None, CrossCheck]) -> None:
    """``inputs`` is what gates a check: a field it reads but does not declare would let a
    broken value through it."""
    algorithm, check = case
    # An algorithm's own checks run only under a known algorithm: it is an input of theirs.
    allowed = set(check.inputs) | ({"algorithm"} if algorithm else set())
    for values in ({}, check.example):
        config = _Reads(**{**({"algorithm": algorithm} if algorithm else {}), **values})
        config.__dict__.pop("_read", None)
        list(check.check(config))
        assert config.__dict__.get("_read", set()) <= allowed, (
            check.name, config.__dict__["_read"] - allowed)


def test_each_field_broken_alone_is_the_only_field_named() -> None:
    """From every algorithm's defaults, one field at a time: the error is on that field, and no
    other field is named because of it."""
    wrong: list[tuple[str, str, Any, list[str]]] = []
    for record in algorithms():
        for name in sorted(FIELDS):
            for bad in bad_values(name):
                errors = TrainConfig(**{"algorithm": record.name, name: bad}).errors()
                if [e.field for e in errors] != [name]:
                    wrong.append((record.name, name, bad, [str(e) for e in errors]))
    assert wrong == []


def test_the_issues_cascade_is_gone() -> None:
    """The issue's case, as a user met it."""
    errors = TrainConfig(batch_size=-5).errors()
    assert [str(e) for e in errors] == ["batch_size: must be within [1, 65,536], got -5"]
    # With a valid batch size the check still speaks.
    assert [str(e) for e in TrainConfig(batch_size=16, ppo_mini_batch_size=32).errors()] == [
        "ppo_mini_batch_size: must be <= batch_size (16), got 32"]
