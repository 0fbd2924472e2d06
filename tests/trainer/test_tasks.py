import pytest

from trainer.model import TINY_ARCH
from trainer.tasks import (
    LONG_MAX_OPERANDS,
    LONG_MIN_OPERANDS,
    arithmetic_long_prompts,
    arithmetic_prompts,
    carries,
    reversed_sum,
    running_sums_answer,
)
from trainer.tokenizer import build_tokenizer
from trainer.verifiers import exact_verifier


def test_answers_are_reversed_sums() -> None:
    assert reversed_sum(57, 68) == "521"
    assert reversed_sum(0, 0) == "0"
    for p in arithmetic_prompts(50, seed=3):
        a, b = map(int, p.text.rstrip("=").split("+"))
        assert p.answer == str(a + b)[::-1]
        assert p.id == f"arith-{a}+{b}"


def test_seeded_distinct_and_within_digit_range() -> None:
    first = arithmetic_prompts(200, min_digits=2, max_digits=3, seed=7)
    assert first == arithmetic_prompts(200, min_digits=2, max_digits=3, seed=7)
    assert len({p.text for p in first}) == 200
    for p in first:
        a, b = p.text.rstrip("=").split("+")
        assert 2 <= len(a) <= 3 and 2 <= len(b) <= 3


def test_exact_digits_and_exclusion() -> None:
    train = arithmetic_prompts(500, seed=0)
    held_out = arithmetic_prompts(100, seed=1, exact_digits=3, exclude={p.text for p in train})
    assert not {p.text for p in held_out} & {p.text for p in train}
    assert all(p.metadata["digits"] == 3 for p in held_out)


def test_metadata_and_capacity() -> None:
    assert carries(57, 68) == 2 and carries(1, 2) == 0
    assert len(arithmetic_prompts(100, max_digits=1)) == 100  # every 1-digit pair
    with pytest.raises(ValueError, match="cannot draw"):
        arithmetic_prompts(101, max_digits=1)


def test_long_answers_are_the_running_sums() -> None:
    assert running_sums_answer([12, 345, 6]) == "753 363"
    assert running_sums_answer([57, 68]) == reversed_sum(57, 68)  # k = 2: the built-in task
    for p in arithmetic_long_prompts(200, seed=3):
        operands = [int(x) for x in p.text.rstrip("=").split("+")]
        sums = [sum(operands[:i + 1]) for i in range(1, len(operands))]
        assert p.answer == " ".join(str(s)[::-1] for s in sums)
        assert exact_verifier(p.answer, p.answer) == 1.0
        assert exact_verifier(p.answer.replace(" ", "", 1), p.answer) == 0.0 or \
            len(operands) == 2
        assert p.metadata["operands"] == len(operands) and p.id == f"arithl-{p.text[:-1]}"


def test_long_prompts_are_seeded_distinct_and_encodable() -> None:
    first = arithmetic_long_prompts(300, 1, 3, seed=7)
    assert first == arithmetic_long_prompts(300, 1, 3, seed=7)
    assert first != arithmetic_long_prompts(300, 1, 3, seed=8)
    assert len({p.text for p in first}) == 300
    tok = build_tokenizer()
    for p in first:
        ids = tok(p.text + p.answer)["input_ids"]
        assert tok.unk_token_id not in ids  # every character is in the tokenizer's vocabulary
        assert len(ids) + 1 <= TINY_ARCH["max_position_embeddings"]  # + EOS
        assert all(1 <= len(x) <= 3 for x in p.text.rstrip("=").split("+"))


def test_long_answer_lengths_vary_as_claimed() -> None:
    prompts = arithmetic_long_prompts(2000, 1, 3, seed=0)
    tok = build_tokenizer()
    lengths = [len(tok(p.answer, add_special_tokens=False)["input_ids"]) for p in prompts]
    by_k: dict[int, list[int]] = {}
    for p, n in zip(prompts, lengths, strict=True):
        by_k.setdefault(p.metadata["operands"], []).append(n)
    assert sorted(by_k) == list(range(LONG_MIN_OPERANDS, LONG_MAX_OPERANDS + 1))
    # 2 operands: the built-in task's 1-4 tokens; 8 operands: 7 sums of 1-4 digits + 6 spaces.
    assert min(by_k[2]) == 1 and max(by_k[2]) <= 4
    assert 13 <= min(by_k[8]) and max(by_k[8]) <= 34 and max(lengths) >= 30
    means = [sum(v) / len(v) for _, v in sorted(by_k.items())]
    assert means == sorted(means) and means[-1] > 5 * means[0]


def test_long_prompts_reject_bad_ranges() -> None:
    with pytest.raises(ValueError, match="max_digits <= 4"):
        arithmetic_long_prompts(10, 1, 5)
    with pytest.raises(ValueError, match="min_operands"):
        arithmetic_long_prompts(10, min_operands=1)
    assert len(arithmetic_long_prompts(100, 1, 1, min_operands=2, max_operands=2)) == 100
    with pytest.raises(ValueError, match="cannot draw"):
        arithmetic_long_prompts(101, 1, 1, min_operands=2, max_operands=2)
