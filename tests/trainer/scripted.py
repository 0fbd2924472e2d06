"""A generation backend that replays scripted rewards: each prompt's responses are drawn, in
order, from its own list of 0/1 outcomes (1: the prompt's answer, 0: a wrong one), so the exact
verifier scores them as scripted. An outcome may also be (0/1, tokens): a response of that many
tokens (else 2), for overlong shaping. For hand-computed tests of the loop's sampling paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.backends.simulated import wrong_answer
from trainer.types import Generation, Prompt


class ScriptedBackend:
    model: Any = None
    tokenizer: Any = None

    def __init__(self, script: dict[str, Sequence[int]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.drawn: dict[str, int] = dict.fromkeys(self.script, 0)
        self.calls: list[list[str]] = []  # prompt ids of every generate call

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        self.calls.append([p.id for p in prompts])
        out = []
        for prompt, count in zip(prompts, counts, strict=True):
            start = self.drawn[prompt.id]
            outcomes = self.script[prompt.id][start:start + count]
            if len(outcomes) < count:
                raise AssertionError(f"script of {prompt.id} ran out after {start} samples")
            self.drawn[prompt.id] = start + count
            out.append([_generation(prompt, o) for o in outcomes])
        return out

    def sync_weights(self) -> None:
        pass

    def close(self) -> None:
        pass


def _generation(prompt: Prompt, outcome: int | tuple[int, int]) -> Generation:
    right, tokens = (outcome, 2) if isinstance(outcome, int) else outcome
    return Generation(prompt.id, prompt.answer if right else wrong_answer(prompt.answer), [],
                      [1, 2] if tokens == 2 else list(range(1, tokens + 1)))


def scripted_prompts(ids: Sequence[str]) -> list[Prompt]:
    return [Prompt(i, f"question {i}", "7", {}) for i in ids]
