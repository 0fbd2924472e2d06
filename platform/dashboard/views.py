"""Dashboard views: thin. Reads go through ``selectors``/``charts``, writes through ``services``.

Every view needs a signed-in user; anyone signed in reads, and the services refuse cancel, delete
and relaunch to anyone but the run's owner or staff (PermissionDenied -> 403).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html_join
from django.views.decorators.http import require_POST
from experiments import services
from experiments.models import Prompt, PromptSet, Run
from webapp.uploads import accepts_files, rejected_files

from trainer.config import BUILTIN_MODEL, ConfigError

from . import charts, params, selectors
from .forms import BuiltinForm, LaunchForm, UploadForm, clone_diff, initial_from_run

POLL_SECONDS = 2


def _run_or_404(run_id: int | None) -> Run:
    if run_id is None:
        raise Http404("no such run")
    try:
        return selectors.run_detail(run_id)
    except Run.DoesNotExist as exc:
        raise Http404("no such run") from exc


def _max_points(request: HttpRequest) -> int:
    return charts.points_level(params.get_int(request.GET, "points", min_value=1))


# --- runs --------------------------------------------------------------------------------------

@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    prompt_set = params.get_id(request.GET, "prompt_set")
    filters = selectors.RunFilters(
        status=params.get_choice(request.GET, "status", Run.Status.values),
        algorithm=params.get_choice(request.GET, "algorithm", selectors.ALGORITHM_LABELS),
        prompt_set=str(prompt_set) if prompt_set else "", q=params.get_text(request.GET, "q"))
    runs = list(selectors.run_list(filters)[:500])
    context = {"runs": runs, "filters": filters, "statuses": Run.Status.choices,
               "algorithms": selectors.ALGORITHM_LABELS, "prompt_sets": selectors.prompt_sets(),
               "any_active": any(r.status in Run.ACTIVE_STATUSES for r in runs)}
    if request.htmx:
        return render(request, "dashboard/_run_rows.html", context)
    return render(request, "dashboard/run_list.html", context)


@login_required
def run_launch(request: HttpRequest) -> HttpResponse:
    source: Run | None = None
    clone = request.GET.get("clone") or request.POST.get("cloned_from")
    if clone:
        source = _run_or_404(params.parse_id(clone))
    diff: list[tuple[str, Any, Any]] | None = None
    if request.method == "POST":
        form = LaunchForm(request.POST)
        if form.is_valid():
            diff = clone_diff(form, source) if source else None
            # A clone is shown with its differences first and launched on confirmation.
            if source is None or request.POST.get("confirm") == "1":
                try:
                    run = services.launch_run(
                        request.user, form.cleaned_data["name"], form.config_dict(),
                        form.cleaned_data["prompt_set"], eval_set=form.cleaned_data["eval_set"],
                        queue=form.cleaned_data["queue"],
                        retention=form.cleaned_data["retention"], cloned_from=source)
                except (ConfigError, services.LaunchError) as exc:
                    form.add_config_error(exc)
                else:
                    return _launched(request, run, "Launched")
    else:
        initial = initial_from_run(source) if source else {}
        prompt_set = params.get_id(request.GET, "prompt_set")
        if prompt_set:
            initial["prompt_set"] = prompt_set
        form = LaunchForm(initial=initial)
    return render(request, "dashboard/run_launch.html", {
        "form": form, "source": source, "diff": diff, "builtin_model": BUILTIN_MODEL,
        "has_prompt_sets": PromptSet.objects.exists()})


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    return render(request, "dashboard/run_detail.html", {
        **_status_context(request, run),
        "charts": charts.charts_for(run),
        "config_rows": sorted((run.config or {}).items()),
    })


def _status_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    return {"run": run, "eta": selectors.run_eta(run), "poll_seconds": POLL_SECONDS,
            "can_manage": services.can_modify_run(run, request.user),
            "active": run.status in Run.ACTIVE_STATUSES,
            "algorithm_label": selectors.ALGORITHM_LABELS.get(run.algorithm, run.algorithm)}


@login_required
def run_status(request: HttpRequest, run_id: int) -> HttpResponse:
    """The live header of the run page; htmx polls it while the run is queued or running."""
    return render(request, "dashboard/_run_status.html",
                  _status_context(request, _run_or_404(run_id)))


@login_required
def run_chart(request: HttpRequest, run_id: int, name: str) -> HttpResponse:
    run = _run_or_404(run_id)
    if name not in charts.RUN_CHARTS:
        raise Http404("no such chart")
    # A finished run's figures are final: keep the encoded JSON (the heatmap's is 340 KiB at
    # paper scale, and re-encoding it costs more than the rest of the request). The key holds
    # only what changes the figure, so a client cannot grow the cache by varying the query.
    if name in charts.FULL_RESOLUTION_CHARTS:
        key, points = f"chart.{name}", charts.MAX_POINTS
    else:
        points = _max_points(request)
        key = f"chart.{name}.{points}"
    body = selectors.cached_for_finished(
        key, [run], lambda: json.dumps(charts.run_chart(run, name, points)).encode())
    return HttpResponse(body, content_type="application/json")


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    services.request_cancel(run, request.user)
    if request.htmx:
        return run_status(request, run_id)
    messages.info(request, "Cancel requested: the run stops after its current round.")
    return redirect("dashboard:run_detail", run_id=run.pk)


@login_required
@require_POST
def run_delete(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    services.delete_run(run, request.user)
    messages.info(request, f"Run {run.name} deleted.")
    return redirect("dashboard:run_list")


@login_required
@require_POST
def run_relaunch(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    try:
        new = services.relaunch_run(run, request.user)
    except services.LaunchError as exc:
        # The config no longer validates (bounds changed since, a model directory is gone...):
        # the launch form shows it as a clone, where the field can be fixed.
        messages.error(request, f"Cannot relaunch {run.name}: {exc}. Fix it below.")
        return redirect(reverse("dashboard:run_launch") + f"?clone={run.pk}")
    return _launched(request, new, "Relaunched as")


def _launched(request: HttpRequest, run: Run, what: str) -> HttpResponse:
    if run.enqueue_error:
        messages.error(request, (
            f"{what} “{run.name}”, but the broker (Redis) is unreachable, so no worker has the "
            f"run yet ({run.enqueue_error.rstrip('.')}). It stays queued and starts when the "
            "broker is back (workers put queued runs back on the queue)."))
    else:
        messages.success(request, f"{what} “{run.name}”: queued on {run.queue}.")
    return redirect("dashboard:run_detail", run_id=run.pk)


# --- prompts -----------------------------------------------------------------------------------

@login_required
def prompt_history(request: HttpRequest, run_id: int, prompt_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    prompt = get_object_or_404(Prompt, pk=prompt_id)
    before = params.get_int(request.GET, "before", min_value=0)
    if before is None and request.GET.get("before"):
        return HttpResponseBadRequest("before must be a step number")
    history = selectors.prompt_history(run, prompt, before_step=before)
    return render(request, "dashboard/prompt_history.html",
                  {"run": run, "prompt": prompt, **history,
                   "summary_rows": _summary_rows(history["all_steps"])})


def _summary_rows(steps: list[tuple[Any, ...]]) -> str:
    """The all-steps table body. A prompt of a 600-step run has 600 rows; Django's template loop
    takes ~100 ms for them, format_html_join a few (values are escaped all the same)."""
    def outcome(exit_round: int | None, missing: str) -> str:
        if exit_round is None:
            return "unresolved" + (f" (missing {missing})" if missing else "")
        return f"eliminated after round {exit_round}"

    return format_html_join(
        "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{} / {}</td><td>{}</td></tr>",
        ((s[0], s[1], s[2], s[3], s[4], outcome(s[5], s[6]), s[7], s[8], f"{s[9]:.3f}")
         for s in steps))


@login_required
def prompt_chart(request: HttpRequest, run_id: int, prompt_id: int) -> JsonResponse:
    run = _run_or_404(run_id)
    return JsonResponse(charts.prompt_pass_rate(run, prompt_id))


@login_required
@accepts_files("PROMPT_UPLOAD_MAX_BYTES")
def prompt_sets(request: HttpRequest) -> HttpResponse:
    upload = UploadForm(prefix="upload")
    builtin = BuiltinForm(prefix="builtin")
    if request.method == "POST":
        if "upload-name" in request.POST:
            upload = UploadForm(request.POST, request.FILES, prefix="upload",
                                rejected=rejected_files(request).get("upload-file", ""))
            if upload.is_valid():
                f = upload.cleaned_data["file"]
                try:
                    ps = services.create_prompt_set_from_upload(
                        request.user, upload.cleaned_data["name"], f, f.name)
                except services.LaunchError as exc:
                    target = "name" if exc.field == "name" else "file"
                    prefix = "" if target == "name" else UploadForm.REJECTED
                    upload.add_error(target, prefix + exc.reason)
                else:
                    messages.success(request, f"Imported {ps.size} prompts into {ps.name}.")
                    return redirect("dashboard:prompt_set_detail", set_id=ps.pk)
        else:
            builtin = BuiltinForm(request.POST, prefix="builtin")
            if builtin.is_valid():
                d = builtin.cleaned_data
                try:
                    ps = services.create_builtin_prompt_set(
                        request.user, d["name"], num_prompts=d["num_prompts"],
                        min_digits=d["min_digits"], max_digits=d["max_digits"], seed=d["seed"])
                except services.LaunchError as exc:
                    builtin.add_error(exc.field if exc.field in builtin.fields else None,
                                      exc.reason)
                else:
                    messages.success(request, f"Generated {ps.size} prompts into {ps.name}.")
                    return redirect("dashboard:prompt_set_detail", set_id=ps.pk)
    return render(request, "dashboard/prompt_sets.html", {
        "sets": selectors.prompt_sets(), "upload": upload, "builtin": builtin,
        "max_mib": settings.PROMPT_UPLOAD_MAX_BYTES / 2**20,
        "max_rows": f"{settings.PROMPT_UPLOAD_MAX_ROWS:,}"})


@login_required
def prompt_set_detail(request: HttpRequest, set_id: int) -> HttpResponse:
    ps = get_object_or_404(PromptSet, pk=set_id)
    return render(request, "dashboard/prompt_set_detail.html",
                  {"set": ps, "prompts": selectors.prompt_set_preview(ps)})


# --- compare -----------------------------------------------------------------------------------

def _compare_runs(request: HttpRequest) -> list[Run]:
    return selectors.runs_by_ids(params.get_ids(request.GET, "runs"))


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    runs = _compare_runs(request)
    if len(runs) < 2:
        messages.warning(request, "Select two or more runs to compare.")
        return redirect("dashboard:run_list")
    query = "&".join(f"runs={r.pk}" for r in runs)
    return render(request, "dashboard/compare.html", {
        "runs": runs, "query": query, "final": selectors.final_metrics(runs),
        "diff": selectors.config_diff(runs), "x_axes": charts.X_AXES,
        "metrics": charts.COMPARE_METRICS,
        "algorithm_labels": selectors.ALGORITHM_LABELS,
    })


@login_required
def compare_chart(request: HttpRequest) -> JsonResponse:
    runs = _compare_runs(request)
    if not runs:
        raise Http404("no runs")
    return JsonResponse(charts.compare(runs, request.GET.get("x", "step"),
                                       request.GET.get("metric", "real_reward"),
                                       _max_points(request)))


@login_required
def compare_scatter(request: HttpRequest) -> JsonResponse:
    runs = _compare_runs(request)
    if len(runs) < 2:
        raise Http404("need two runs")
    fig = charts.pass_rate_scatter(runs[0], runs[1])
    fig["prompt_url"] = reverse("dashboard:prompt_history", args=[runs[0].pk, 0])
    return JsonResponse(fig)
