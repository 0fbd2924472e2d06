from pathlib import Path

from transformers import AutoTokenizer

from trainer.tokenizer import build_tokenizer


def test_round_trip_is_one_token_per_character() -> None:
    tok = build_tokenizer()
    ids = tok("12+345=")["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) == 1 + len("12+345=")
    assert tok.decode(ids, skip_special_tokens=True) == "12+345="
    assert tok.decode(tok("9 - 1", add_special_tokens=False)["input_ids"]) == "9 - 1"


def test_special_tokens_and_left_padding() -> None:
    tok = build_tokenizer()
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    batch = tok(["1+2=", "123+45="], padding=True)
    assert batch["input_ids"][0][:3] == [tok.pad_token_id] * 3
    assert batch["attention_mask"][0] == [0, 0, 0, 1, 1, 1, 1, 1]


def test_unknown_characters_map_to_unk() -> None:
    tok = build_tokenizer()
    assert tok("x", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]


def test_save_and_load_with_auto_tokenizer(tmp_path: Path) -> None:
    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "57+68="
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded.get_vocab() == tok.get_vocab()
    assert (loaded.pad_token, loaded.bos_token, loaded.eos_token) == ("<pad>", "<s>", "</s>")
    assert loaded.padding_side == "left"
    assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text
