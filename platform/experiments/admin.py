"""Admin: list and filter runs, prompt sets, prompts and estimates. Per-step records are not
registered: millions of rows per run make admin changelists useless; the dashboard shows them.

Deleting a run or a prompt set goes through the same services as the dashboard (the run's lock,
its records, its checkpoint folder; a set in use is refused). Django's own delete would walk the
cascade in Python, loading every sample row to list and delete it, and leave checkpoints behind.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from experiments import selectors, services
from experiments.models import Estimate, Prompt, PromptSet, Run, Sweep


class ServiceDeleteAdmin(admin.ModelAdmin):
    """Deletes through ``delete_service(obj, user)``; the confirmation page lists the objects
    themselves (and, as protected, what ``protected_by(obj)`` says must go first), never the
    cascade of their records."""

    def delete_service(self, obj: Any, user: Any) -> None:
        raise NotImplementedError

    def protected_by(self, obj: Any) -> list[Any]:
        return []

    def get_deleted_objects(self, objs: Any, request: HttpRequest
                            ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        objs = list(objs)
        perms_needed = set() if self.has_delete_permission(request) else {
            str(self.opts.verbose_name)}
        protected = [f"{type(p)._meta.verbose_name}: {p}" for obj in objs
                     for p in self.protected_by(obj)]
        return ([f"{self.opts.verbose_name}: {obj}" for obj in objs],
                {str(self.opts.verbose_name_plural): len(objs)}, perms_needed, protected)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.delete_service(obj, request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_service(obj, request.user)


@admin.register(Run)
class RunAdmin(ServiceDeleteAdmin):
    list_display = ("id", "name", "algorithm", "status", "queue", "prompt_set", "model", "seed",
                    "current_step", "total_steps", "samples_spent", "latest_real_reward",
                    "owner", "created_at")
    list_filter = ("status", "algorithm", "queue", "retention", "prompt_set", "owner")
    search_fields = ("name", "model", "error")
    list_select_related = ("prompt_set", "owner")
    date_hierarchy = "created_at"
    readonly_fields = ("config", "lease_owner", "heartbeat_at", "attempts", "current_step",
                       "current_round", "samples_spent", "latest_real_reward", "error",
                       "traceback", "created_at", "started_at", "finished_at")
    raw_id_fields = ("cloned_from", "sweep")

    def delete_service(self, obj: Run, user: Any) -> None:
        services.delete_run(obj, user)


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    """Deleting a sweep keeps its runs (``Run.sweep`` is SET_NULL: one UPDATE)."""

    list_display = ("id", "name", "owner", "created_at")
    list_filter = ("owner",)
    search_fields = ("name",)
    list_select_related = ("owner",)
    readonly_fields = ("grid", "base_config", "created_at")


class PromptInline(admin.TabularInline):
    model = Prompt
    fields = ("index", "text", "answer")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False  # a set is used whole (runs' records point at its prompts)
    show_change_link = True
    # A set may hold a million prompts: the inline shows the first page only.
    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        qs = super().get_queryset(request)
        ids = list(qs.order_by("index").values_list("pk", flat=True)[:50])
        return qs.filter(pk__in=ids)


@admin.register(PromptSet)
class PromptSetAdmin(ServiceDeleteAdmin):
    list_display = ("name", "source", "size", "owner", "created_at")
    list_filter = ("source", "owner")
    search_fields = ("name", "description")
    inlines = [PromptInline]

    def delete_service(self, obj: PromptSet, user: Any) -> None:
        services.delete_prompt_set(obj, user)

    def protected_by(self, obj: PromptSet) -> list[Any]:
        return selectors.prompt_set_runs(obj)


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("id", "prompt_set", "index", "short_text", "answer")
    list_filter = ("prompt_set",)
    search_fields = ("text", "answer")
    list_select_related = ("prompt_set",)
    raw_id_fields = ("prompt_set",)

    def has_delete_permission(self, request: HttpRequest, obj: Prompt | None = None) -> bool:
        return False  # a set is used whole; delete the set

    @admin.display(description="text")
    def short_text(self, obj: Prompt) -> str:
        return obj.text[:80]


@admin.register(Estimate)
class EstimateAdmin(admin.ModelAdmin):
    """Launch preflights: what was sampled and how it ended (the dashboard shows the figures)."""

    list_display = ("id", "prompt_set", "model", "queue", "samples_per_prompt", "num_prompts",
                    "status", "prompts_done", "owner", "created_at")
    list_filter = ("status", "queue", "prompt_set", "owner")
    search_fields = ("model", "error")
    list_select_related = ("prompt_set", "owner")
    readonly_fields = ("config", "key", "results", "predictions", "lease_owner", "heartbeat_at",
                       "prompts_done", "tokens", "time_generation", "time_scoring", "error",
                       "traceback", "created_at", "started_at", "finished_at")
