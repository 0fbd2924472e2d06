"""The algorithm registry: one record per algorithm, and nothing outside ``trainer/algorithms/``
that branches on an algorithm's name. Adding an algorithm is one module: the toy algorithm here
is defined, registered and trained without touching any other file (its dashboard half is
tests/platform/test_toy_algorithm.py)."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from trainer import train
from trainer.advantages import signal_groups
from trainer.algorithms import (
    ALGORITHM_NAMES,
    GRPO,
    Algorithm,
    Option,
    SampledStep,
    StepContext,
    algorithms,
    baseline,
    get_algorithm,
    register_algorithm,
    sample_batch,
    step_metric_declarations,
    unregister_algorithm,
)
from trainer.backends.simulated import SimulatedBackend
from trainer.config import ConfigError, TrainConfig
from trainer.recorders import ListRecorder
from trainer.types import STEP_METRICS, Prompt

ROOT = Path(__file__).resolve().parents[2]
# Where an algorithm's name may be compared: its own record's module.
REGISTRY = ROOT / "trainer" / "algorithms"
SCANNED = ("trainer", "platform", "workers", "rada", "scripts", "benchmarks")


# --- nothing outside the registry compares an algorithm's name -----------------------------

def _names(node: ast.AST) -> Iterator[str]:
    """String constants of a comparison operand, looking into tuple/list/set displays."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for elt in node.elts:
            yield from _names(elt)


def name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison (==, !=, in, not in, is, match case) of a string
    constant that is an algorithm's name, found in the syntax tree: a comment or a docstring
    that mentions ``algorithm == "dapo"`` is not one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [(node.lineno, n) for n in _names(operand) if n in names]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, n) for n in _names(node.value) if n in names]
    return found


TEMPLATE_TAG = re.compile(r"{%-?\s*(?:if|elif)\b(.*?)-?%}", re.S)
QUOTED = re.compile(r"""["']([^"']+)["']""")


def template_comparisons(text: str, names: set[str]) -> list[str]:
    """Algorithm names quoted inside ``{% if %}`` / ``{% elif %}`` tags of a Django template."""
    return [m for tag in TEMPLATE_TAG.findall(text) for m in QUOTED.findall(tag) if m in names]


def test_the_checker_reads_code_not_text() -> None:
    names = {"dapo", "ada-est"}
    source = ('# if config.algorithm == "dapo": a comment\n'
              'def f(config):\n'
              '    """Compares algorithm == "dapo" only in words."""\n'
              '    if config.algorithm == "dapo":\n'
              '        return 1\n'
              '    return config.algorithm in ("grpo", "ada-est")\n')
    assert name_comparisons(source, names) == [(4, "dapo"), (6, "ada-est")]
    assert name_comparisons("x = {'dapo': 1}\ny = f('dapo')\n", names) == []
    assert template_comparisons('{% if run.algorithm == "ada-est" %}x{% endif %} dapo', names) \
        == ["ada-est"]


def test_no_module_outside_the_registry_compares_an_algorithm_name() -> None:
    names = set(ALGORITHM_NAMES)
    offenders = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if REGISTRY in path.parents or "migrations" in path.parts:
                continue
            for line, name in name_comparisons(path.read_text(), names):
                offenders.append(f"{path.relative_to(ROOT)}:{line} compares {name!r}")
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for name in template_comparisons(path.read_text(), names):
            offenders.append(f"{path.relative_to(ROOT)} compares {name!r}")
    assert not offenders, ("ask the algorithm's record (trainer.algorithms.get_algorithm) "
                           "instead:\n" + "\n".join(offenders))


# --- the records ---------------------------------------------------------------------------

def test_every_builtin_record_is_complete() -> None:
    """Whatever the built-ins are (trainer/algorithms/__init__.py registers them): one baseline,
    first; every record complete and valid at its defaults."""
    names = list(ALGORITHM_NAMES)
    assert len(names) == len(set(names)) >= 2
    assert [a.name for a in algorithms() if a.baseline] == [names[0]] == [baseline().name]
    declared = step_metric_declarations()
    for algorithm in algorithms():
        c = TrainConfig(algorithm=algorithm.name).validate()
        assert algorithm.label and algorithm.max_samples_per_step(c) >= c.batch_size
        assert c.max_samples_per_step == algorithm.max_samples_per_step(c)
        assert set(algorithm.step_metrics) <= set(declared)
        assert not set(algorithm.step_metrics) & set(STEP_METRICS), \
            "an algorithm's own metric keys are new keys"
    assert get_algorithm("ada-pos").eliminates and not get_algorithm("grpo").eliminates
    assert get_algorithm("ada-est").allocates and get_algorithm("dapo").draws_batches
    assert get_algorithm("grpo").label_for(16) == "GRPO n=16"
    assert get_algorithm("ada-balance").label_for(16) == "Reinforce-Ada Seq-balance"


def test_a_record_must_be_consistent() -> None:
    # A name the runs' algorithm column (16 characters) and a sweep spec can hold.
    with pytest.raises(ValueError, match="1 to 16 characters"):
        dataclasses.replace(GRPO, name="grpo-with-a-long-name")
    with pytest.raises(ValueError, match="lower-case letters"):
        dataclasses.replace(GRPO, name="grpo,n=8")
    with pytest.raises(ValueError, match="'group_size' is a config field"):
        dataclasses.replace(GRPO, name="x", options=(Option("group_size", 4, "n"),))
    with pytest.raises(ValueError, match="sampling"):
        dataclasses.replace(GRPO, name="x", sampling="sometimes")
    with pytest.raises(ValueError, match="exit rule"):
        dataclasses.replace(GRPO, name="x", exit_rule=lambda p, n, a, b: p >= a)
    with pytest.raises(ValueError, match="registered already"):
        register_algorithm(GRPO)


# --- adding an algorithm is one module -----------------------------------------------------

def sample_equal_dropped(ctx: StepContext) -> SampledStep:
    """One round of n per prompt (GRPO's), then every group whose rewards are all equal leaves
    the update (``with_kept`` recomputes the kept counts and advantages)."""
    sampled = sample_batch(ctx)
    res = sampled.result
    if res is not None:
        sampled.result = res.with_kept(res.kept & signal_groups(res)[res.sample_prompt])
    return sampled


def equal_dropped_metrics(config: TrainConfig, res, allocation) -> dict[str, float]:
    return {"equal_groups": float(np.sum(~signal_groups(res)))}


TOY = Algorithm(
    name="toy-drop-equal", label="Toy: GRPO without equal groups",
    help="one round of n, groups with all-equal rewards dropped", sampling="group",
    sample_step=sample_equal_dropped, advantage="group", std_normalize=True,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: c.batch_size * c.group_size,
    step_shape="batch_size x group_size",
    step_metrics={"equal_groups": "groups whose rewards were all equal (dropped)"},
    extra_metrics=equal_dropped_metrics, summary_fields=("group_size",))


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    with pytest.raises(ConfigError, match="algorithm"):  # before: an unknown value
        TrainConfig(algorithm=TOY.name).validate()
    register_algorithm(TOY)
    yield TOY
    unregister_algorithm(TOY.name)


def test_a_toy_algorithm_trains_through_train_once_registered(toy: Algorithm,
                                                              tmp_path: Path) -> None:
    prompts = [Prompt(id=f"p{i}", text=f"{i}+1=", answer="x",
                      metadata={"pass_rate": rate}) for i, rate in
               enumerate([0.0, 1.0, 0.5, 0.5, 0.3, 0.7, 0.0, 1.0])]
    cfg = TrainConfig(algorithm=toy.name, backend="simulated", verifier="exact", batch_size=8,
                      total_steps=3, save_every=0, eval_every=0).validate()
    rec = ListRecorder()
    result = train(cfg, prompts, SimulatedBackend(cfg, prompts), rec, out_dir=tmp_path)
    assert result.status == "completed" and len(rec.steps) == 3
    for step in rec.steps:
        m = step.metrics
        assert m["samples"] == 8 * 4 and m["equal_groups"] >= 4  # pass rates 0 and 1: 4 groups
        kept = {p.prompt_id for p in step.prompts if p.kept_positives + p.kept_negatives}
        equal = {p.prompt_id for p in step.prompts if p.positives == 0 or p.negatives == 0}
        assert kept == {p.prompt_id for p in step.prompts} - equal
        assert m["kept_samples"] == 4 * len(kept)
        assert all(s.advantage is None for s in step.samples if s.prompt_id in equal)


def test_what_a_toy_keeps_is_what_simulate_prints(toy: Algorithm) -> None:
    """The toy drops equal groups through ``SamplerResult.with_kept``, which recomputes the
    kept counts: ``simulate`` prints 0 kept for a dropped group, not its pool's counts."""
    from trainer.cli import simulate

    rows = simulate(toy.name, [0.0, 1.0, 0.5, 0.5], seed=3)["prompts"]
    for row in rows:
        dropped = row["positives"] == 0 or row["negatives"] == 0
        kept = row["kept_positives"] + row["kept_negatives"]
        assert kept == (0 if dropped else 4) == len(row["advantages"]), row
    assert sum(r["positives"] == 0 or r["negatives"] == 0 for r in rows) >= 2


PLUGIN = '''
from trainer.algorithms import GRPO, Algorithm, Option, register_algorithm
import dataclasses

register_algorithm(dataclasses.replace(
    GRPO, name="plugin-grpo", label="Plugin GRPO", help="a deployment's own", baseline=False,
    label_shows_group_size=False, preflight_group_sizes=(),
    options=(Option("plugin_knob", 3, "Plugin: a knob.", "knobs", ge=1, le=9),)))
'''


def test_a_deployment_registers_its_own_algorithm_by_environment(tmp_path: Path) -> None:
    """RADA_ALGORITHMS names modules that every process importing the trainer imports after the
    built-ins: the config's choices, the help text and docs/config.md list the algorithm."""
    import os
    import subprocess
    import sys

    (tmp_path / "my_algorithm.py").write_text(PLUGIN)
    env = {**os.environ, "RADA_ALGORITHMS": "my_algorithm",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    code = ("from trainer.config import ALGORITHMS, TrainConfig, field_specs\n"
            "print(list(ALGORITHMS)[-1], TrainConfig(algorithm='plugin-grpo').plugin_knob)\n"
            "print('plugin-grpo (a deployment' in field_specs()[0]['help'])\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["plugin-grpo", "3", "True"]
    docs = subprocess.run([sys.executable, "-m", "trainer", "config-docs"], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert "| `plugin_knob` | `3` | [1, 9] | knobs | Plugin: a knob. |" in docs.stdout
