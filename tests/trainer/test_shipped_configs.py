"""The example configs under configs/ load and validate, and the study's three differ only in
the algorithm (docs/study-algorithms.md compares them as the same run but for that)."""

from pathlib import Path

import pytest

from trainer.config import TrainConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_config_validates(path: Path) -> None:
    TrainConfig.from_toml(path)


def test_study_configs_differ_only_in_algorithm() -> None:
    configs = {a: TrainConfig.from_toml(CONFIGS / f"tiny-{a}.toml")
               for a in ("grpo", "ada-pos", "ada-balance", "ada-est")}
    for a, c in configs.items():
        assert c.algorithm == a
        assert set(configs["grpo"].diff(c)) <= {"algorithm"}
    assert configs["grpo"].eval_every > 0
