import pytest

from trainer.tasks import arithmetic_prompts, carries, reversed_sum


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
