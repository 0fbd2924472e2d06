"""One sampling budget for every algorithm (issue 31, "one budget for everyone").

A budget is responses per prompt of a step's batch: at budget b a step of B prompts draws
B x b responses, GRPO's B x n at n = b. Each algorithm's record says which of its config keys
make it draw that (``Algorithm.match_budget``) and in which sense (``budget_match``):

    exact   every step draws B x b            GRPO, VADE (group_size = b), PODS (pods_rollouts
                                              = b), Est (budget_per_prompt = b), GVM-RAFT
                                              (gvm_budget = b, both stages)
    cap     a step draws at most B x b        Seq-pos, Seq-balance (samples_per_round x
                                              max_rounds <= b); they spend less as prompts
                                              meet their exit rule; DPPO
                                              (group_size = b), less as its
                                              history prunes prompts
    batch   each generation batch draws b     DAPO (group_size = b); further batches while
            per prompt                        too few groups carry signal

So the budgets of "cap" and "batch" are matched in their bound, not in expectation: what they
spend is predicted from measured pass rates by the preflight (``trainer.preflight
.predict_at_budget``), which shows every algorithm's expected samples per step at the budget.
An algorithm whose record has no ``match_budget`` is refused by name, with its
``budget_note``. Tokens per step are not matched (only responses).

The platform's sweeps take ``budget`` as a pseudo-field (``budget=16``, crossed or paired with
``algorithm`` like any axis); each run's config gets its algorithm's keys for it, and the
budget itself is not stored in the config (it is what the keys say).
"""

from __future__ import annotations

from typing import Any

from trainer.algorithms import get_algorithm, is_algorithm
from trainer.config import MAX_SAMPLES_PER_PROMPT, TrainConfig
from trainer.validation import ConfigError

# The sweep's pseudo-field: responses per prompt of a step's batch.
BUDGET = "budget"
BUDGET_HELP = ("budget: responses per prompt of a step's batch (B x budget per step), set "
               "through each algorithm's own keys")


def check_budget(budget: Any) -> int:
    """``budget`` as an int within [1, MAX_SAMPLES_PER_PROMPT], or a ``ConfigError`` naming
    ``budget``."""
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise ConfigError(BUDGET, f"expected a whole number of responses per prompt, got "
                          f"{budget!r}")
    if not 1 <= budget <= MAX_SAMPLES_PER_PROMPT:
        raise ConfigError(BUDGET, f"must be within [1, {MAX_SAMPLES_PER_PROMPT:,}] responses "
                          f"per prompt, got {budget:,}")
    return budget


def budget_refusal(algorithm: str) -> str | None:
    """Why ``algorithm`` cannot be run at a matched budget (None: it can)."""
    record = get_algorithm(algorithm)
    if record.match_budget is not None:
        return None
    why = record.budget_note or "its record declares no match_budget"
    return f"{record.name} ({record.label}) cannot be run at a matched budget: {why}"


def budget_overrides(config: dict[str, Any], budget: Any) -> dict[str, Any]:
    """The config keys that put ``config``'s algorithm at ``budget`` responses per prompt, from
    its record's ``match_budget`` (the rest of ``config``, its n for instance, as given).
    ``ConfigError`` on ``budget`` when the budget is invalid, the algorithm cannot match one,
    or this config cannot at this budget. An unknown algorithm gets no keys: the config's own
    validation names it."""
    budget = check_budget(budget)
    name = config.get("algorithm", TrainConfig().algorithm)
    if not isinstance(name, str) or not is_algorithm(name):
        return {}
    refusal = budget_refusal(name)
    if refusal:
        raise ConfigError(BUDGET, refusal)
    record = get_algorithm(name)
    return dict(record.match_budget(TrainConfig.from_stored(config), budget))


def matched_config(config: dict[str, Any], budget: Any) -> dict[str, Any]:
    """``config`` with its algorithm's keys for ``budget`` set."""
    return {**config, **budget_overrides(config, budget)}
