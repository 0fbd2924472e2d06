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
        ({"tis_cap": 0.5}, "tis_cap"),
        ({"rollout_dtype": "fp8"}, "rollout_dtype"),
        ({"vllm_gpu_memory_utilization": 1.5}, "vllm_gpu_memory_utilization"),
        ({"vllm_kv_cache_gib": -1.0}, "vllm_kv_cache_gib"),
    ],
)
def test_invalid_config_names_the_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        TrainConfig.from_dict(data)
    assert exc.value.field == field


def test_vllm_backend_is_valid_on_cpu() -> None:
    """vLLM's CPU build runs the engine on this machine: the vllm backend is no GPU-only
    choice (whether vLLM is installed is the worker's business, checked when the run starts)."""
    cfg = TrainConfig.from_dict({"backend": "vllm", "device": "cpu", "tis_cap": 2.0})
    assert (cfg.backend, cfg.device, cfg.tis_cap) == ("vllm", "cpu", 2.0)
