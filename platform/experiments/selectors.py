"""Reads of the experiments app for pages, the admin and the worker (HackSoft styleguide).
Chart series live with the dashboard; these are the run-lifecycle and prompt-set reads."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from experiments.models import Checkpoint, Prompt, PromptSet, Run


def run_list(*, status: str | None = None, algorithm: str | None = None,
             prompt_set_id: int | None = None, search: str | None = None,
             owner_id: int | None = None) -> QuerySet[Run]:
    """Runs, newest first, filtered; prompt set and owner fetched in the same query."""
    qs = Run.objects.select_related("prompt_set", "owner").defer("traceback")
    if status:
        qs = qs.filter(status=status)
    if algorithm:
        qs = qs.filter(algorithm=algorithm)
    if prompt_set_id:
        qs = qs.filter(prompt_set_id=prompt_set_id)
    if owner_id:
        qs = qs.filter(owner_id=owner_id)
    if search:
        qs = qs.filter(Q(name__icontains=search) | Q(model__icontains=search))
    return qs


def prompt_set_runs(prompt_set: PromptSet) -> list[Run]:
    """Runs that train or evaluate on ``prompt_set``."""
    return list(Run.objects.filter(Q(prompt_set=prompt_set) | Q(eval_set=prompt_set))
                .only("pk", "name").order_by("pk"))


def run_get(run_id: int) -> Run:
    return Run.objects.select_related("prompt_set", "eval_set", "owner", "cloned_from").get(
        pk=run_id)


def run_progress(run_id: int) -> dict[str, object]:
    """The small live part of a run page: status, step, round, samples, reward, error."""
    run = Run.objects.only(
        "status", "current_step", "current_round", "total_steps", "samples_spent",
        "latest_real_reward", "cancel_requested", "heartbeat_at", "started_at", "finished_at",
        "error").get(pk=run_id)
    return {"status": run.status, "current_step": run.current_step,
            "current_round": run.current_round, "total_steps": run.total_steps,
            "progress": run.progress, "samples_spent": run.samples_spent,
            "latest_real_reward": run.latest_real_reward,
            "cancel_requested": run.cancel_requested, "heartbeat_at": run.heartbeat_at,
            "started_at": run.started_at, "finished_at": run.finished_at, "error": run.error}


def run_checkpoints(run_id: int) -> QuerySet[Checkpoint]:
    return Checkpoint.objects.filter(run_id=run_id).order_by("step")


def prompt_set_list() -> QuerySet[PromptSet]:
    return PromptSet.objects.select_related("owner").order_by("-created_at")


def prompt_set_preview(prompt_set: PromptSet, limit: int = 20) -> QuerySet[Prompt]:
    return Prompt.objects.filter(prompt_set=prompt_set).order_by("index")[:limit]


def prompt_set_prompts(prompt_set_id: int) -> QuerySet[Prompt]:
    """All prompts of a set in file order (what a worker hands to the trainer)."""
    return Prompt.objects.filter(prompt_set_id=prompt_set_id).order_by("index")
