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
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),  # must be > 1
        ({"clip_ratio_c": 0.5}, "clip_ratio_c"),
        ({"max_num_gen_batches": -1}, "max_num_gen_batches"),  # 0: no limit (verl)
        ({"dapo_filter_metric": "reward"}, "dapo_filter_metric"),
        ({"positive_metric": "accuracy"}, "positive_metric"),
        ({"dapo_fewer_groups": "skip"}, "dapo_fewer_groups"),
        ({"drop_unresolved": "yes"}, "drop_unresolved"),
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


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"K_pos": -1}, "K_pos"),
        ({"K_neg": "two"}, "K_neg"),
        ({"algorithm": "ada-pos", "K_pos": 0, "K_neg": 0}, "K_pos"),
        ({"algorithm": "ada-balance", "K_pos": 20, "K_neg": 13}, "K_pos"),  # > M x N = 32
        # Est's own checks (its options' bounds apply to every config; the checks across them
        # to Est's alone: test_est_checks_are_ests_own).
        ({"algorithm": "ada-est", "budget_per_prompt": 1}, "budget_per_prompt"),  # < N_min 2
        ({"algorithm": "ada-est", "budget_per_prompt": 40}, "budget_per_prompt"),  # > N_max 32
        ({"algorithm": "ada-est", "est_min_samples": 9, "est_max_samples": 8},
         "est_max_samples"),
        ({"est_weight": "sqrt"}, "est_weight"),
        ({"est_lambda": 1.5}, "est_lambda"),
        ({"est_alpha": -1.0}, "est_alpha"),
        ({"algorithm": "ada-est", "est_alpha": 0.0, "est_beta": 0.0}, "est_beta"),
        ({"est_eps": 0.0}, "est_eps"),
    ],
)
def test_invalid_v3_fields_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        TrainConfig.from_dict(data)
    assert exc.value.field == field


def test_est_checks_are_ests_own() -> None:
    """Est's options are declared by its module (``Algorithm.options``): every config holds
    them and checks their bounds, but only an Est run checks that an allocation can meet its
    budget, which says nothing about a GRPO run."""
    odd = {"budget_per_prompt": 40, "est_min_samples": 9, "est_max_samples": 8}
    assert TrainConfig.from_dict({"algorithm": "grpo", **odd}).budget_per_prompt == 40
    errors = TrainConfig.dict_errors({"algorithm": "ada-est", **odd})
    assert [e.field for e in errors] == ["est_max_samples"]
    # Read as fields are, given or not; stored and cloned under the same keys.
    c = TrainConfig(algorithm="ada-est", est_alpha=2.0)
    assert (c.est_alpha, c.est_beta) == (2.0, 16.0)
    assert {"est_alpha": 2.0, "est_beta": 16.0}.items() <= c.to_dict().items()
    assert TrainConfig.from_stored(c.to_dict()) == c
    assert TrainConfig(algorithm="ada-est", est_alpha=1.0) == TrainConfig(algorithm="ada-est")
    with pytest.raises(ConfigError, match="est_alpah.*did you mean 'est_alpha'"):
        TrainConfig.from_dict({"est_alpah": 2.0})


def test_exit_counts_default_to_the_v1_rules() -> None:
    assert TrainConfig(algorithm="ada-pos").exit_counts == (1, 0)
    assert TrainConfig(algorithm="ada-balance", group_size=6).exit_counts == (3, 3)
    assert TrainConfig(algorithm="ada-balance", group_size=5).exit_counts == (2, 3)
    assert TrainConfig(algorithm="ada-pos", K_pos=16).validate().exit_counts == (16, 0)
    assert TrainConfig(algorithm="ada-balance", K_pos=8, K_neg=8).validate().exit_counts == (8, 8)
    # Est samples once: M >= n does not apply, and K counts are not used.
    TrainConfig(algorithm="ada-est", samples_per_round=2, group_size=4).validate()
    assert TrainConfig(algorithm="ada-est").max_samples_per_prompt == 32


def test_v3_cross_field_checks_stay_quiet_when_their_inputs_are_invalid() -> None:
    # M = 0 is one error (on samples_per_round), not a second one about K_pos's cap.
    errors = TrainConfig(algorithm="ada-balance", samples_per_round=0).errors()
    assert {e.field for e in errors} == {"samples_per_round"}
    assert "budget_per_prompt" not in {
        e.field for e in TrainConfig(est_min_samples=0).errors()}


def test_dual_clip_default_and_optimizer_steps() -> None:
    cfg = TrainConfig()
    assert cfg.clip_ratio_c == 3.0  # verl's default
    assert TrainConfig(clip_ratio_c=1.01).validate().clip_ratio_c == 1.01
    # Whole batch: one optimiser step; the paper's 512 / 128: 4; a remainder is a 5th step.
    assert cfg.optimizer_steps == 1
    assert TrainConfig(batch_size=512, ppo_mini_batch_size=128).optimizer_steps == 4
    assert TrainConfig(batch_size=32, ppo_mini_batch_size=7, ppo_epochs=2).optimizer_steps == 10


def test_world_size_needs_the_vllm_backend() -> None:
    assert TrainConfig().world_size == 1  # one process unless asked
    TrainConfig(world_size=2, backend="vllm").validate()
    for backend in ("hf", "simulated"):
        with pytest.raises(ConfigError) as exc:
            TrainConfig(world_size=2, backend=backend).validate()
        assert exc.value.field == "world_size" and backend in exc.value.reason
    # The ranks shard a frozen reference (issue 34 item 6): every KL option is allowed.
    TrainConfig(world_size=2, backend="vllm", kl_coef=0.1, kl_loss_type="k3+",
                use_kl_in_reward=True, kl_ctrl_type="adaptive").validate()
    assert {e.field for e in TrainConfig(world_size=0).errors()} == {"world_size"}
    assert {e.field for e in TrainConfig(fsdp_bucket_mb=0).errors()} == {"fsdp_bucket_mb"}
    # One process: hf and a KL penalty stay as they were.
    TrainConfig(world_size=1, backend="hf", kl_coef=0.1).validate()


def test_vllm_sleep_mode_resolves_per_device() -> None:
    assert TrainConfig().resolved(device="cuda")["vllm_sleep_mode"] is True
    assert TrainConfig().resolved(device="cpu")["vllm_sleep_mode"] is False
    assert TrainConfig().resolved()["vllm_sleep_mode"] is None  # device not known yet
    assert TrainConfig(vllm_sleep_mode=False).resolved(device="cuda")["vllm_sleep_mode"] is False
    with pytest.raises(ConfigError) as exc:
        TrainConfig(vllm_sleep_mode="yes").validate()  # type: ignore[arg-type]
    assert exc.value.field == "vllm_sleep_mode"
