from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.config import TrainConfig
from trainer.model import (
    MODEL_DIR_ENV,
    ModelNotFoundError,
    build_tiny_model,
    builtin_model_dir,
    load_policy,
    resolve_device,
    save_checkpoint,
)
from trainer.tokenizer import build_tokenizer


def test_tiny_model_size_and_architecture() -> None:
    tok = build_tokenizer()
    model = build_tiny_model(tok)
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.7e6 < n_params < 0.9e6
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tok)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight


def test_build_is_seeded_and_leaves_global_rng_alone() -> None:
    tok = build_tokenizer()
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(tok, seed=5)
    assert torch.equal(torch.rand(1), expected)
    b = build_tiny_model(tok, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_checkpoint_loads_with_from_pretrained(tmp_path: Path) -> None:
    tok = build_tokenizer()
    model = build_tiny_model(tok)
    save_checkpoint(model, tok, tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    ids = torch.tensor([tok("1+2=")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits, atol=1e-6)


def test_load_policy_from_dir_and_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = build_tokenizer()
    save_checkpoint(build_tiny_model(tok), tok, tmp_path / "m")
    model, loaded_tok = load_policy(TrainConfig(model=str(tmp_path / "m"), device="cpu"))
    assert model.device.type == "cpu" and loaded_tok.padding_side == "left"
    assert model.dtype == torch.float32  # the trained policy keeps full-precision weights
    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "m"))
    assert builtin_model_dir() == tmp_path / "m"
    model, _ = load_policy(TrainConfig(device="cpu"))
    assert model.config.model_type == "qwen2"


def test_missing_builtin_model_says_how_to_make_it(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "absent"))
    with pytest.raises(ModelNotFoundError, match="python -m trainer warmstart"):
        load_policy(TrainConfig(device="cpu"))


def test_device_selection() -> None:
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            resolve_device("cuda")


def test_a_saved_builtin_tokenizer_loads_back_as_itself(tmp_path: Path) -> None:
    """Spaces survive a checkpoint: transformers' AutoTokenizer would take Qwen2's class for
    this directory, whose byte-level pre-tokenizer drops every space of a prompt ("12 + 3" was
    encoded as "12+3"), so uploaded prompt sets with spaces reached the built-in model mangled."""
    from trainer.model import is_builtin_tokenizer, load_model_dir

    tok = build_tokenizer()
    save_checkpoint(build_tiny_model(tok), tok, tmp_path / "m")
    assert is_builtin_tokenizer(tmp_path / "m") and not is_builtin_tokenizer(tmp_path)
    _, loaded = load_model_dir(tmp_path / "m", "cpu")
    for text in ("12 + 3 = ", "753 363", "1+2="):
        assert loaded(text)["input_ids"] == tok(text)["input_ids"], text
        ids = loaded(text, add_special_tokens=False)["input_ids"]
        assert loaded.decode(ids) == text
    assert loaded.padding_side == "left" and loaded.pad_token_id == tok.pad_token_id
