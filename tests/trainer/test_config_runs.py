"""A config that validates is one that runs: numbers are coerced to their field's type where
they enter (``TrainConfig``: JSON's ``2`` for a float field is 2.0, as transformers wants), and
every bound is one a run can meet. The property test draws the numeric fields at and between
their bounds, as the JSON of an API body would carry them (floats written as integers too),
and trains one step with each on the simulated backend and on the tiny model."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from trainer import train
from trainer.backends import make_backend
from trainer.config import TrainConfig
from trainer.recorders import ListRecorder
from trainer.tasks import arithmetic_prompts
from trainer.types import Prompt

# The fields whose values change how a step samples, scores and updates; the run's shape
# stays small so one step costs milliseconds (simulated) or a fraction of a second (tiny model).
DRAWN = ("temperature", "top_p", "lr", "weight_decay", "max_grad_norm", "clip_eps_low",
         "clip_eps_high", "clip_ratio_c", "entropy_coef", "kl_coef", "tis_cap",
         "positive_threshold", "overlong_penalty_factor", "simulated_pass_rate",
         "simulated_length_correct", "simulated_length_wrong", "simulated_length_spread")
SHAPE = {"batch_size": 4, "group_size": 2, "samples_per_round": 2, "max_rounds": 2,
         "total_steps": 1, "eval_every": 0, "save_every": 0, "max_new_tokens": 5,
         "algorithm": "ada-balance"}
SPECS = {f.name: f.metadata for f in dataclasses.fields(TrainConfig)}


def field_values(name: str) -> st.SearchStrategy[Any]:
    """The field's bounds themselves (an exclusive one: the next float inside), values
    between, and the integers within them (JSON's spelling of 1.0)."""
    meta = SPECS[name]
    lo = meta["ge"] if "ge" in meta else math.nextafter(meta["gt"], math.inf)
    hi = meta["le"] if "le" in meta else math.nextafter(meta["lt"], -math.inf)
    values = st.sampled_from([lo, hi]) | st.floats(lo, hi)
    if math.ceil(lo) <= math.floor(hi):
        values |= st.integers(math.ceil(lo), min(math.floor(hi), 10**6))
    return values


configs = st.fixed_dictionaries({}, optional={n: field_values(n) for n in DRAWN})


def edge(name: str, side: str) -> float:
    meta = SPECS[name]
    if side == "low":
        return meta["ge"] if "ge" in meta else math.nextafter(meta["gt"], math.inf)
    return meta["le"] if "le" in meta else math.nextafter(meta["lt"], -math.inf)


# Every field at its floor, then at its ceiling: always tried, whatever hypothesis draws.
LOWEST = {n: edge(n, "low") for n in DRAWN}
HIGHEST = {n: edge(n, "high") for n in DRAWN}


def valid_config(drawn: dict[str, Any], backend: str, **extra: Any) -> TrainConfig:
    data = {**SHAPE, **drawn, "backend": backend, **extra}
    assume(not TrainConfig.dict_errors(data))  # tis_cap in (0, 1), clip ranges crossed...
    config = TrainConfig.from_dict(data)
    for name in DRAWN:  # what validated is what trains: floats, whatever the JSON wrote
        assert isinstance(getattr(config, name), float), name
    return config


def one_step(config: TrainConfig, prompts: list[Prompt], out: Path) -> None:
    rec = ListRecorder()
    backend = make_backend(config, prompts)
    try:
        result = train(config, prompts, backend, rec, None, out_dir=out)
    finally:
        backend.close()
    assert result.status == "completed", result
    assert [s.step for s in rec.steps] == [1]
    for key in ("policy_loss", "grad_norm", "real_reward"):
        value = rec.steps[0].metrics.get(key)
        assert value is None or math.isfinite(value), (key, value)


def test_json_integers_in_float_fields_are_floats() -> None:
    config = TrainConfig.from_dict({"temperature": 2, "top_p": 1, "max_wall_seconds": 60})
    stored = config.to_dict()
    assert (type(stored["temperature"]), type(stored["top_p"])) == (float, float)
    assert stored["temperature"] == 2.0 and stored["max_wall_seconds"] == 60.0
    # An integer past a float's range is not coerced: it is refused, naming the field.
    assert [e.field for e in TrainConfig(lr=10**400).errors()] == ["lr"]
    assert TrainConfig(seed=True).errors()[0].field == "seed"  # bool stays no number


@given(drawn=configs)
@example(drawn=LOWEST)
@example(drawn=HIGHEST)
@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
def test_any_valid_config_runs_a_step_on_the_simulated_backend(tmp_path: Path,
                                                                drawn: dict[str, Any]) -> None:
    config = valid_config(drawn, "simulated")
    prompts = [Prompt(f"p{i}", f"{i}+1=", str(i + 1)[::-1], {"pass_rate": i / 8})
               for i in range(8)]
    one_step(config, prompts, tmp_path / "sim")


@given(drawn=configs)
@example(drawn=LOWEST)
@example(drawn=HIGHEST)
@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
def test_any_valid_config_runs_a_step_on_the_tiny_model(builtin_model: Path, tmp_path: Path,
                                                        drawn: dict[str, Any]) -> None:
    config = valid_config(drawn, "hf", device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one_step(config, arithmetic_prompts(8, 1, 2, seed=0), tmp_path / "hf")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(("field", "value"), [("temperature", 5e-324), ("temperature", 1e-3),
                                              ("top_p", 5e-324), ("top_p", 0)])
def test_sampling_values_no_run_can_meet_are_refused_on_their_field(field: str,
                                                                    value: float) -> None:
    errors = TrainConfig(**{field: value}).errors()
    assert [e.field for e in errors] == [field]
    assert "must be within" in errors[0].reason
