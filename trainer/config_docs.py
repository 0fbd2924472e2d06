"""docs/config.md, generated: every config field and every registered algorithm's own option
with its default, bounds, unit and help (``python -m trainer config-docs > docs/config.md``;
``tests/trainer/test_config_bounds.py`` keeps the file equal to ``config_reference()``)."""

from __future__ import annotations

from typing import Any

from trainer.config import MAX_SAMPLES_PER_PROMPT, field_specs
from trainer.registry import algorithms
from trainer.validation import MAX_NAME_CHARS, MAX_PATH_CHARS, bounds_text


def config_reference() -> str:
    """docs/config.md: every field with its default, bounds, unit and help (a test keeps the
    file equal to this)."""
    lines = ["# Run configuration reference", "",
             "Generated from `trainer/config.py` and the algorithms' own options "
             "(`python -m trainer config-docs > docs/config.md`); "
             "`TrainConfig.validate()` enforces the bounds, naming the field, for the command line "
             "and the dashboard alike, and the launch form carries them as `min`/`max`. A bracket "
             "includes the bound, a parenthesis excludes it.", "",
             f"Across fields: `samples_per_round x max_rounds` (Seq) is at most "
             f"{MAX_SAMPLES_PER_PROMPT:,} responses per prompt; paths are at most "
             f"{MAX_PATH_CHARS:,} characters ({MAX_NAME_CHARS} per component). The platform "
             "also caps a step's work per queue, `max_samples_per_step x max_new_tokens` "
             "(B x M x N x max_new_tokens for Seq), with the `RUN_MAX_STEP_TOKENS` setting. A "
             "check across fields (`ppo_mini_batch_size <= batch_size`) is made only where the "
             "fields it reads passed their own checks: a value out of bounds is one error, on "
             "its field.", "",
             "| field | default | bounds | unit | meaning |", "| --- | --- | --- | --- | --- |"]
    specs = field_specs()
    for spec in (s for s in specs if "algorithm" not in s):
        lines.append(_reference_row(spec))
    for algorithm in algorithms():
        own = [s for s in specs if s.get("algorithm") == algorithm.name]
        if own:
            lines += ["", f"## {algorithm.label} (`{algorithm.name}`)", "",
                      f"Declared by the algorithm (`Algorithm.options`); every config holds "
                      f"them, only `{algorithm.name}` reads them.", "",
                      "| option | default | bounds | unit | meaning |",
                      "| --- | --- | --- | --- | --- |", *map(_reference_row, own)]
    return "\n".join(lines) + "\n"


def _reference_row(spec: dict[str, Any]) -> str:
    default = "empty" if spec["default"] is None else f"`{spec['default']}`"
    return (f"| `{spec['name']}` | {default} | {bounds_text(spec)} | {spec['unit']} | "
            f"{spec['help'].replace('|', '/')} |")
