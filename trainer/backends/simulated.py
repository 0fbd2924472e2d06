"""The simulated backend: no model, each prompt has a pass rate and a response is a Bernoulli draw.

For budget planning, what-if studies and fast tests. A successful draw's text is the prompt's
answer and a failed one's a wrong answer, so the ordinary exact verifier scores them 1 and 0 and
the training loop needs no special case besides skipping the policy update (``model`` is None).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer.types import Generation, Prompt


def wrong_answer(answer: str) -> str:
    """A string no verifier accepts for ``answer``: a different integer when the answer is one
    (so numeric verifiers see a number, just the wrong one), else a marker."""
    try:
        return str(int(answer.strip()) + 1)
    except ValueError:
        return f"not {answer}" if answer else "wrong"


class SimulatedBackend:
    """``pass_rate`` of a prompt: ``prompt.metadata["pass_rate"]``, else ``default_pass_rate``
    (``config.simulated_pass_rate``). Draws are seeded per (seed, prompt id), so a prompt's
    responses do not depend on which other prompts are sampled alongside it."""

    model: Any = None
    tokenizer: Any = None

    def __init__(self, config: Any = None, prompts: Sequence[Prompt] | None = None, *,
                 default_pass_rate: float | None = None) -> None:
        if default_pass_rate is None:
            default_pass_rate = getattr(config, "simulated_pass_rate", 0.5)
        self.default_pass_rate = float(default_pass_rate)
        self.model = None
        self.tokenizer = None

    def pass_rate(self, prompt: Prompt) -> float:
        return float(prompt.metadata.get("pass_rate", self.default_pass_rate))

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        out: list[list[Generation]] = []
        for prompt, count in zip(prompts, counts, strict=True):
            rate = self.pass_rate(prompt)
            if greedy:
                # The greedy answer of a prompt the policy solves more often than not.
                hits = np.full(count, rate > 0.5)
            else:
                rng = np.random.default_rng([seed, zlib.crc32(prompt.id.encode())])
                hits = rng.random(count) < rate
            wrong = wrong_answer(prompt.answer)
            out.append([Generation(prompt_id=prompt.id, text=prompt.answer if h else wrong,
                                   prompt_token_ids=[], response_token_ids=[], logprobs=None)
                        for h in hits.tolist()])
        return out

    def sync_weights(self) -> None:
        """Nothing to sync: there are no weights."""

    def close(self) -> None:
        """Nothing to release: no engine of its own."""
