"""Reads of the experiments app (HackSoft styleguide): runs, prompt sets and sweeps, for the
dashboard, the API, the admin and the worker alike. Chart series and the pages' aggregates live
with the dashboard (``dashboard/selectors.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Case, Count, F, Q, QuerySet, Value, When
from django.db.models.functions import Left, Length

from experiments.models import Prompt, PromptSet, Run, Sweep


def run_list(*, status: str | None = None, algorithm: str | None = None,
             prompt_set_id: int | None = None, search: str | None = None,
             sweep_id: int | None = None, owner: str | None = None) -> QuerySet[Run]:
    """Runs, newest first, filtered (``search``: text in the name or model; ``owner``: a
    username); prompt set, owner and sweep fetched in the same query. The runs list and the
    API's ``GET /runs`` both read it."""
    qs = Run.objects.select_related("prompt_set", "owner", "sweep").defer("traceback")
    if status:
        qs = qs.filter(status=status)
    if algorithm:
        qs = qs.filter(algorithm=algorithm)
    if prompt_set_id:
        qs = qs.filter(prompt_set_id=prompt_set_id)
    if search:
        qs = qs.filter(Q(name__icontains=search) | Q(model__icontains=search))
    if sweep_id:
        qs = qs.filter(sweep_id=sweep_id)
    if owner:
        qs = qs.filter(owner__username=owner)
    return qs.order_by("-created_at")


def run_detail(run_id: int) -> Run:
    """One run with what its page and the API's run show (``Run.DoesNotExist`` when gone)."""
    return Run.objects.select_related("prompt_set", "eval_set", "owner", "cloned_from",
                                      "sweep").get(pk=run_id)


def runs_by_ids(ids: list[int]) -> list[Run]:
    """The runs of ``ids`` that exist, in the order given (compare, reports)."""
    by_id = {r.pk: r for r in Run.objects.select_related("prompt_set", "sweep").filter(
        pk__in=ids)}
    return [by_id[i] for i in ids if i in by_id]


def prompt_set_runs(prompt_set: PromptSet) -> list[Run]:
    """Runs that train or evaluate on ``prompt_set``."""
    return list(Run.objects.filter(Q(prompt_set=prompt_set) | Q(eval_set=prompt_set))
                .only("pk", "name").order_by("pk"))


def prompt_set_list() -> QuerySet[PromptSet]:
    return PromptSet.objects.select_related("owner").order_by("-created_at")


def prompt_set_choices(user_id: int | None = None) -> QuerySet[PromptSet]:
    """Prompt sets as a drop-down offers them, imported whole (``ready``): the platform's own
    (made by a command: no owner; or a staff member's) first, then ``user_id``'s, then everyone
    else's, each newest first; the owner fetched in the same query (every label names it)."""
    rank = Case(When(Q(owner__isnull=True) | Q(owner__is_staff=True), then=Value(0)),
                When(owner_id=user_id, then=Value(1)), default=Value(2))
    return (ready_prompt_sets().select_related("owner").annotate(_rank=rank)
            .order_by("_rank", "-created_at"))


# Where prompts are listed (a set's page, a prompt's history in a run, the API's set detail),
# each text is this many characters at most, cut in the database: a 49 MB prompt once made every
# view of its set return 51 MB. The whole text is on the prompt's own page (``prompt_in_set``).
PROMPT_PREVIEW_CHARS = 500


def with_previews(prompts: QuerySet[Prompt]) -> QuerySet[Prompt]:
    """``prompts`` without their texts and metadata, with ``text_preview`` / ``text_chars`` and
    ``answer_preview`` / ``answer_chars`` (the first PROMPT_PREVIEW_CHARS characters, and how
    many there are)."""
    return prompts.defer("text", "answer", "metadata").annotate(
        text_preview=Left("text", PROMPT_PREVIEW_CHARS), text_chars=Length("text"),
        answer_preview=Left("answer", PROMPT_PREVIEW_CHARS), answer_chars=Length("answer"))


def prompt_set_preview(prompt_set: PromptSet, limit: int = 20) -> QuerySet[Prompt]:
    """The set's first ``limit`` prompts, as previews (``with_previews``)."""
    return with_previews(Prompt.objects.filter(prompt_set=prompt_set).order_by("index"))[:limit]


def prompt_preview(prompt_set_id: int, prompt_id: int) -> Prompt:
    """One prompt of the set, as a preview; raises Prompt.DoesNotExist."""
    return with_previews(Prompt.objects.filter(prompt_set_id=prompt_set_id)).get(pk=prompt_id)


def prompt_in_set(prompt_set_id: int, index: int) -> Prompt:
    """The set's prompt at ``index`` (0-based), whole; raises Prompt.DoesNotExist."""
    return Prompt.objects.get(prompt_set_id=prompt_set_id, index=index)


def prompt_sets_holding_names() -> QuerySet[PromptSet]:
    """The sets whose names are taken: all but a failed import's and one whose importer stopped
    giving signs of life (``services.prompt_import.stalled``), which give their names up to the
    next upload."""
    import datetime as dt

    from django.conf import settings
    from django.utils import timezone

    cutoff = timezone.now() - dt.timedelta(seconds=settings.PROMPT_IMPORT_STALE_SECONDS)
    stalled = Q(status=PromptSet.Status.IMPORTING) & (
        Q(import_updated_at__lt=cutoff)
        | Q(import_updated_at__isnull=True, created_at__lt=cutoff))
    return PromptSet.objects.exclude(status=PromptSet.Status.FAILED).exclude(stalled)


def ready_prompt_sets() -> QuerySet[PromptSet]:
    """Sets a run may use: imported whole."""
    return PromptSet.objects.filter(status=PromptSet.Status.READY)


def prompt_set_prompts(prompt_set_id: int) -> QuerySet[Prompt]:
    """All prompts of a set in file order (what a worker hands to the trainer)."""
    return Prompt.objects.filter(prompt_set_id=prompt_set_id).order_by("index")


# --- sweeps -------------------------------------------------------------------------------------

# The order a sweep's status line lists its runs in: what needs attention first.
SWEEP_STATUS_ORDER = (Run.Status.RUNNING, Run.Status.QUEUED, Run.Status.FAILED,
                      Run.Status.CANCELLED, Run.Status.SUCCEEDED)


@dataclass
class SweepStatus:
    """How many of a sweep's runs are in each status, and what that adds up to."""

    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def active(self) -> int:
        return sum(self.counts.get(s, 0) for s in Run.ACTIVE_STATUSES)

    @property
    def summary(self) -> str:
        """E.g. "3 running, 5 queued, 1 failed"."""
        return ", ".join(f"{self.counts[s]} {s}" for s in SWEEP_STATUS_ORDER
                         if self.counts.get(s)) or "no runs"

    @property
    def status(self) -> str:
        """running while any run runs, else queued while any waits; once all are finished,
        failed if any failed, cancelled if any was cancelled, else succeeded."""
        for s in SWEEP_STATUS_ORDER[:4]:
            if self.counts.get(s):
                return s
        return Run.Status.SUCCEEDED if self.total else "empty"


def sweep_statuses(sweep_ids: list[int]) -> dict[int, SweepStatus]:
    """Each sweep's run counts per status, in one grouped query; a run a retry replaced is
    counted as its retry (``sweep_runs``)."""
    out = {sid: SweepStatus() for sid in sweep_ids}
    for sid, status, n in (Run.objects.filter(sweep_id__in=sweep_ids, replaced_by__isnull=True)
                           .values_list("sweep_id", "status").annotate(n=Count("id"))
                           .order_by()):
        out[sid].counts[status] = n
    return out


def sweep_list(*, owner_id: int | None = None) -> QuerySet[Sweep]:
    """Sweeps, newest first, with their run count."""
    qs = Sweep.objects.select_related("owner").annotate(
        run_count=Count("runs", filter=Q(runs__replaced_by__isnull=True)))
    if owner_id:
        qs = qs.filter(owner_id=owner_id)
    return qs.order_by("-created_at")


def sweep_get(sweep_id: int) -> Sweep:
    return Sweep.objects.select_related("owner").get(pk=sweep_id)


def sweep_runs(sweep_id: int, *, replaced: bool = False) -> QuerySet[Run]:
    """A sweep's runs in the order the grid expanded them: one per point of the grid, a run
    that a retry took the place of left out (``replaced``: those too, each before its retry).
    The sweep's status, compare, report, its API and ``rada wait`` read these."""
    qs = Run.objects.filter(sweep_id=sweep_id)
    if not replaced:
        qs = qs.filter(replaced_by__isnull=True)
    return (qs.select_related("prompt_set", "owner").defer("traceback")
            .order_by(F("sweep_index").asc(nulls_last=True), "pk"))
