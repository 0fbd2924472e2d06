import pytest

from trainer.config import ConfigError, TrainConfig


def test_defaults_are_valid() -> None:
    cfg = TrainConfig().validate()
    assert (cfg.group_size, cfg.samples_per_round, cfg.max_rounds) == (4, 8, 4)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"samples_per_round": 2}, "samples_per_round"),
        ({"algorithm": "ppo"}, "algorithm"),
        ({"group_sise": 4}, "group_sise"),
        ({"model": "/nonexistent/model"}, "model"),
        ({"lr": "fast"}, "lr"),
    ],
)
def test_invalid_config_names_the_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        TrainConfig.from_dict(data)
    assert exc.value.field == field
