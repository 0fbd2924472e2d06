"""The example configs under configs/ load and validate, and the study's three differ only in
the algorithm (docs/study-algorithms.md compares them as the same run but for that)."""

from pathlib import Path

import pytest

from trainer.config import TrainConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# Paths a paper preset leaves for the user to edit (their model and data).
PLACEHOLDERS = ("model", "prompts", "eval_prompts")


def _with_local_paths(path: Path, tmp_path: Path) -> dict:
    """A paper preset's settings with its placeholder paths pointed at real (empty) files."""
    import tomllib

    data = tomllib.loads(path.read_text())
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "train.jsonl").write_text("")
    (tmp_path / "test.jsonl").write_text("")
    return data | {"model": str(tmp_path / "model"), "prompts": str(tmp_path / "train.jsonl"),
                   "eval_prompts": str(tmp_path / "test.jsonl")}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_config_validates(path: Path, tmp_path: Path) -> None:
    if not path.name.startswith("paper-"):
        TrainConfig.from_toml(path)
        return
    # As shipped, the only errors are the placeholder paths, each named; with the user's
    # paths filled in, it validates.
    import tomllib

    errors = TrainConfig.dict_errors(tomllib.loads(path.read_text()))
    assert sorted(e.field for e in errors) == sorted(PLACEHOLDERS)
    TrainConfig.from_dict(_with_local_paths(path, tmp_path))


PAPER = {"batch_size": 512, "ppo_mini_batch_size": 128, "lr": 1e-6, "warmup_steps": 10,
         "weight_decay": 0.0, "clip_eps_low": 0.2, "clip_eps_high": 0.28, "clip_ratio_c": 10.0,
         "group_size": 4, "samples_per_round": 8, "max_rounds": 4, "max_new_tokens": 2048,
         "entropy_coef": 0.0, "eval_k": 32, "temperature": 1.0, "backend": "vllm",
         "device": "cuda", "kl_coef": 0.0,
         # scripts/run_reinforce_ada.sh: NGPUS=8, enable_gradient_checkpointing=True; the
         # engine sleeps during the update so that the 1.5B's shard and engine fit together.
         "world_size": 8, "activation_checkpointing": True, "vllm_sleep_mode": True,
         "fsdp_bucket_mb": 64}


def test_paper_presets_are_the_authors_settings(tmp_path: Path) -> None:
    configs = {}
    for a in ("grpo", "ada-pos", "ada-balance"):
        (tmp_path / a).mkdir()
        c = TrainConfig.from_dict(_with_local_paths(CONFIGS / f"paper-{a}.toml", tmp_path / a))
        assert c.algorithm == a
        assert {k: getattr(c, k) for k in PAPER} == PAPER
        assert c.optimizer_steps == 4  # 512 prompts in mini-batches of 128
        assert c.use_std_normalization == (a == "grpo")
        configs[a] = c
    for a, c in configs.items():
        diff = set(configs["grpo"].diff(c)) - {"model", "prompts", "eval_prompts"}
        assert diff <= {"algorithm", "std_normalize"}, (a, diff)


def test_paper_dapo_is_paper_grpo_with_the_recipes_generation_batch(tmp_path: Path) -> None:
    (tmp_path / "grpo").mkdir()
    (tmp_path / "dapo").mkdir()
    grpo = TrainConfig.from_dict(_with_local_paths(CONFIGS / "paper-grpo.toml", tmp_path / "grpo"))
    dapo = TrainConfig.from_dict(_with_local_paths(CONFIGS / "paper-dapo.toml", tmp_path / "dapo"))
    assert dapo.algorithm == "dapo" and {k: getattr(dapo, k) for k in PAPER} == PAPER
    # verl's DAPO recipe: gen_prompt_bsz = 3 x train_prompt_bsz, max_num_gen_batches = 10.
    assert dapo.dapo_gen_batch_size == 3 * dapo.batch_size and dapo.max_num_gen_batches == 10
    diff = set(grpo.diff(dapo)) - {"model", "prompts", "eval_prompts"}
    assert diff == {"algorithm", "dapo_gen_batch_size"}


def test_study_configs_differ_only_in_algorithm() -> None:
    configs = {a: TrainConfig.from_toml(CONFIGS / f"tiny-{a}.toml")
               for a in ("grpo", "dapo", "ada-pos", "ada-balance", "ada-est")}
    for a, c in configs.items():
        assert c.algorithm == a
        assert set(configs["grpo"].diff(c)) <= {"algorithm"}
    assert configs["grpo"].eval_every > 0
