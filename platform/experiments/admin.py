"""Admin: list and filter runs, prompt sets and prompts. Per-step records are not registered:
millions of rows per run make admin changelists useless; the dashboard shows them."""

from __future__ import annotations

from django.contrib import admin

from experiments.models import Prompt, PromptSet, Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
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
    raw_id_fields = ("cloned_from",)


class PromptInline(admin.TabularInline):
    model = Prompt
    fields = ("index", "text", "answer")
    readonly_fields = fields
    extra = 0
    max_num = 0
    show_change_link = True
    # A set may hold a million prompts: the inline shows the first page only.
    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        qs = super().get_queryset(request)
        ids = list(qs.order_by("index").values_list("pk", flat=True)[:50])
        return qs.filter(pk__in=ids)


@admin.register(PromptSet)
class PromptSetAdmin(admin.ModelAdmin):
    list_display = ("name", "source", "size", "owner", "created_at")
    list_filter = ("source", "owner")
    search_fields = ("name", "description")
    inlines = [PromptInline]


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("id", "prompt_set", "index", "short_text", "answer")
    list_filter = ("prompt_set",)
    search_fields = ("text", "answer")
    list_select_related = ("prompt_set",)
    raw_id_fields = ("prompt_set",)

    @admin.display(description="text")
    def short_text(self, obj: Prompt) -> str:
        return obj.text[:80]
