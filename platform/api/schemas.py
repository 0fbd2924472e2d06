"""The API's request and response bodies and query parameters (pydantic, through ninja)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from experiments import selectors as experiment_selectors
from experiments.models import PromptSet, Run
from ninja import Schema
from pydantic import AfterValidator, Field

PAGE_MAX = 5000


def _no_nul(value: str) -> str:
    # PostgreSQL's text cannot hold NUL: refused here, with its field, not by the database.
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


class PromptSetOut(Schema):
    id: int
    name: str
    source: str
    description: str
    size: int
    owner: str | None
    created_at: dt.datetime
    status: str = Field(description="ready; importing (an upload still being parsed: poll "
                        "until it is ready or failed); failed (import_error says why, nothing "
                        "was stored)")
    import_rows: int = Field(description="prompts read so far while importing")
    import_fraction: float | None = Field(description="how far through the file, 0-1")
    import_error: str

    @staticmethod
    def resolve_owner(obj: PromptSet) -> str | None:
        return obj.owner.username if obj.owner_id else None

    @staticmethod
    def resolve_status(obj: PromptSet) -> str:
        from experiments.services.prompt_import import stalled

        return PromptSet.Status.FAILED if stalled(obj) else obj.status

    @staticmethod
    def resolve_import_error(obj: PromptSet) -> str:
        from experiments.services.prompt_import import stalled

        return ("the import stopped (the web server restarted while it ran); upload the file "
                "again") if stalled(obj) else obj.import_error


class PromptOut(Schema):
    id: int
    index: int
    text: str
    answer: str
    metadata: dict[str, Any]


def _preview(text: str, chars: int) -> str:
    return text + (f"… ({chars:,} characters)" if chars > len(text) else "")


class PromptPreviewOut(Schema):
    """A prompt as lists show it: texts past PROMPT_PREVIEW_CHARS characters cut, with
    "… (N characters)"; the whole prompt at ``/prompt-sets/{id}/prompts/{index}``."""

    id: int
    index: int
    text: str
    text_chars: int
    answer: str
    answer_chars: int
    truncated: bool

    @staticmethod
    def resolve_text(obj: Any) -> str:
        return _preview(obj.text_preview, obj.text_chars)

    @staticmethod
    def resolve_answer(obj: Any) -> str:
        return _preview(obj.answer_preview, obj.answer_chars)

    @staticmethod
    def resolve_truncated(obj: Any) -> bool:
        return bool(obj.text_chars > len(obj.text_preview)
                    or obj.answer_chars > len(obj.answer_preview))


class PromptSetDetail(PromptSetOut):
    preview: list[PromptPreviewOut] = Field(description="the first 20 prompts, as previews")
    runs: list[int] = Field(description="runs that train or evaluate on the set")

    @staticmethod
    def resolve_preview(obj: PromptSet) -> list[Any]:
        return list(experiment_selectors.prompt_set_preview(obj))

    @staticmethod
    def resolve_runs(obj: PromptSet) -> list[int]:
        return [r.pk for r in experiment_selectors.prompt_set_runs(obj)]


class RunOut(Schema):
    id: int
    name: str
    algorithm: str
    status: str
    owner: str
    prompt_set: int = Field(validation_alias="prompt_set_id")
    eval_set: int | None = Field(None, validation_alias="eval_set_id")
    sweep: int | None = Field(None, validation_alias="sweep_id")
    cloned_from: int | None = Field(None, validation_alias="cloned_from_id")
    # The retry that took this run's place in its sweep (POST /runs/{id}/retry); its sweep's
    # status, runs, compare and report count that run instead of this one.
    replaced_by: int | None = Field(None, validation_alias="replaced_by_id")
    model: str
    seed: int
    queue: str
    retention: str
    total_steps: int
    current_step: int
    current_round: int
    samples_spent: int
    latest_real_reward: float | None
    cancel_requested: bool
    # What a running run waits for before it trains ("waiting for 8 GPUs on the Ray cluster
    # (4 free, 6 in all)"), or the phase of its start ("starting 2 ranks (1 of 2 ready): rank 1
    # building the vLLM engine"); empty otherwise.
    waiting_for: str
    # Each tracker the run is mirrored to (config ``mirror``): target, the tracker's run id,
    # link, last_step and last_eval_step delivered, lost (events it could not take), error.
    mirror_state: list[dict[str, Any]]
    error: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @staticmethod
    def resolve_owner(obj: Run) -> str:
        return obj.owner.username


class RunDetail(RunOut):
    config: dict[str, Any]


class SweepOut(Schema):
    id: int
    name: str
    owner: str
    grid: list[dict[str, Any]]
    base_config: dict[str, Any]
    created_at: dt.datetime
    status: str
    summary: str
    counts: dict[str, int]
    runs: list[int]


class SweepLaunched(SweepOut):
    enqueue_errors: list[str]


class StepOut(Schema):
    step: int
    real_reward: float | None = Field(description="mean over prompts of the mean reward of "
                                      "each prompt's first n samples (0-1; comparable to GRPO)")
    kept_reward: float | None = Field(description="mean reward of the kept responses (0-1)")
    samples: int = Field(description="responses generated this step")
    tokens: int = Field(description="response tokens generated this step")
    wall_seconds: float = Field(description="seconds of training up to this step")
    metrics: dict[str, Any] = Field(description="every metric the trainer recorded (names and "
                                    "units: trainer.types.STEP_METRICS); null where not finite")


class RoundOut(Schema):
    step: int
    round: int = Field(description="1-based sampling round")
    active_prompts: int = Field(description="prompts sampled in this round")
    samples: int = Field(description="responses drawn in this round")
    positives: int = Field(description="positive responses among them")
    finished: int = Field(description="prompts whose exit rule was met after this round")
    tokens: int = Field(description="response tokens generated in this round")


class EvalOut(Schema):
    step: int = Field(description="0: before training")
    metrics: dict[str, Any] = Field(description="greedy_accuracy, avg@k, pass@k... (fractions, "
                                    "0-1) and counts such as prompts and k")


class PromptStepOut(Schema):
    step: int
    prompt_id: int = Field(description="the prompt's id in the run's prompt set")
    samples: int
    positives: int
    negatives: int
    rounds: int = Field(description="rounds in which the prompt was sampled")
    exit_round: int | None = Field(description="round after which its exit rule was met; null: "
                                   "unresolved")
    missing: str = Field(description="unresolved for lack of 'positives' or 'negatives'")
    kept_positives: int
    kept_negatives: int
    baseline: float = Field(description="mean reward of the prompt's whole pool")
    tokens: int
    p_hat: float | None = Field(description="Pass rate the step's allocation was planned from "
                                "(Est: its estimate before the step; GVM-RAFT: its first "
                                "stage's)")
    allocated: int | None = Field(description="Samples allocated this step (Est: all of them; "
                                  "GVM-RAFT: its second stage's)")


class SampleOut(Schema):
    step: int
    prompt_id: int
    index: int = Field(description="position in the prompt's pool this step (0-based)")
    round: int
    response: str | None = Field(description="null where the retention policy dropped it")
    tokens: int
    reward: float
    kept: bool = Field(description="kept for the policy update")
    advantage: float | None = Field(description="null when not kept")
    verifier_error: str
    weight: float = Field(description="its weight in the policy loss, set by the algorithm "
                          "(1 unless it weights samples)")
    policy_version: int | None = Field(
        default=None, description="optimiser steps applied to the weights that generated it "
        "(asynchronous training, max_policy_lag > 0); null: the step's own weights")
    reward_components: dict[str, float | None] | None = Field(
        default=None, description="each reward component's score by name, where the run "
        "combines rewards (its config's rewards); a component that failed is null, its error "
        "in verifier_error; null: the verifier alone")


class PromptStepPage(Schema):
    items: list[PromptStepOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null: last")


class SamplePage(Schema):
    items: list[SampleOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null: last")


class CancelOut(Schema):
    cancelled: int


class Me(Schema):
    id: int
    username: str
    is_staff: bool


class LaunchBody(Schema):
    """A launch. ``config`` holds TrainConfig fields (the keys of ``python -m trainer run``'s
    TOML); ``prompts``/``eval_prompts`` are set from the prompt sets and ignored here."""

    name: Text
    prompt_set: int | Text = Field(description="id or name")
    config: dict[str, Any] = Field(default_factory=dict)
    eval_set: int | Text | None = Field(None, description="id or name")
    queue: Text = "cpu"
    retention: Text = "all"


class SweepBody(LaunchBody):
    grid: str | list[Any] | dict[str, Any] = Field(
        description='"algorithm=grpo,ada-balance;seed=0..2" (paired fields: "(algorithm, '
                    'group_size)=(ada-balance, 4), (grpo, 16); seed=0..2"), a list of '
                    '{"field", "values"} or {"fields", "values"} (paired, values a list of '
                    'lists), or a mapping field -> values (a paired key "(algorithm, '
                    'group_size)"); the pseudo-field budget (responses per prompt) puts every '
                    'algorithm at one sampling budget: "algorithm=grpo,dapo,ada-balance,pods,'
                    'vade; budget=16"')


class RunFilters(Schema):
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | None = None
    algorithm: Text | None = Field(None, max_length=32)
    prompt_set: int | None = Field(None, ge=1, le=2**63 - 1)
    sweep: int | None = Field(None, ge=1, le=2**63 - 1)
    owner: Text | None = Field(None, max_length=150, description="username")
    q: Text | None = Field(None, max_length=200, description="text in the name or model")
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=10**9)


class PageQuery(Schema):
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(1000, ge=1, le=PAGE_MAX)
    step: int | None = Field(None, ge=0, le=2**31 - 1)
    prompt: int | None = Field(None, ge=0, le=2**63 - 1)


class SampleQuery(PageQuery):
    kept: bool | None = None


DbId = Annotated[int, Field(ge=1, le=2**63 - 1)]


class ReportQuery(Schema):
    sweep: list[DbId] = Field(default_factory=list, max_length=100)
    runs: list[DbId] = Field(default_factory=list, max_length=500)

