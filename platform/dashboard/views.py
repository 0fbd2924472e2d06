"""Dashboard views: thin. Reads go through ``selectors``/``charts``, writes through ``services``.

Every view needs a signed-in user; anyone signed in reads, and the services refuse cancel, delete
and relaunch to anyone but the run's owner or staff (PermissionDenied -> 403).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.http import urlencode
from django.views.decorators.http import require_POST
from experiments import bundles, model_catalogue, preflight, services
from experiments import selectors as experiment_selectors
from experiments.models import Estimate, Prompt, PromptSet, Run, Sweep
from webapp.security import allows_webgl
from webapp.throttles import launch_wait
from webapp.uploads import accepts_files, rejected_files

from trainer import formatting as fmt
from trainer.budget import BUDGET, check_budget
from trainer.config import BUILTIN_MODEL, ConfigError
from trainer.preflight import ASYNC_COLUMNS, INTERVAL_NOTE, PREDICTION_COLUMNS

from . import charts, heatmap, params, reports, selectors
from .forms import BuiltinForm, LaunchForm, UploadForm, clone_diff, initial_from_run


def _run_or_404(run_id: int | None) -> Run:
    if run_id is None:
        raise Http404("no such run")
    try:
        return experiment_selectors.run_detail(run_id)
    except Run.DoesNotExist as exc:
        raise Http404("no such run") from exc


def _max_points(request: HttpRequest) -> int:
    return charts.points_level(params.get_int(request.GET, "points", min_value=1))


def _prompt_of_run_or_404(run: Run, prompt_id: int) -> Prompt:
    """A prompt of the run's own prompt set (an id from another set is not this run's
    prompt), as a preview: its text is not loaded."""
    try:
        return experiment_selectors.prompt_preview(run.prompt_set_id, prompt_id)
    except Prompt.DoesNotExist:
        raise Http404("no such prompt in this run's set") from None


def _heatmap_options(request: HttpRequest) -> dict[str, Any]:
    """The heatmap's order, search and row range (``charts.heatmap`` keywords); an order or
    range that does not parse is a 400."""
    return {"sort": params.require_choice(request.GET, "sort", heatmap.SORTS, "samples"),
            "query": params.get_text(request.GET, "q"),
            "rows": params.require_range(request.GET, "rows")}


# --- runs --------------------------------------------------------------------------------------

@dataclass
class RunFilters:
    """The runs list's filters as its form shows them (the query's values, "" when unset)."""

    status: str = ""
    algorithm: str = ""
    prompt_set: str = ""
    q: str = ""
    sweep: str = ""


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    prompt_set = params.get_id(request.GET, "prompt_set")
    sweep = params.get_id(request.GET, "sweep")
    filters = RunFilters(
        status=params.get_choice(request.GET, "status", Run.Status.values),
        algorithm=params.get_choice(request.GET, "algorithm", selectors.algorithm_labels()),
        prompt_set=str(prompt_set) if prompt_set else "", q=params.get_text(request.GET, "q"),
        sweep=str(sweep) if sweep else "")
    runs = list(experiment_selectors.run_list(
        status=filters.status, algorithm=filters.algorithm, prompt_set_id=prompt_set,
        search=filters.q, sweep_id=sweep)[:500])
    rows = selectors.group_sweeps(runs)
    for item in rows:
        if isinstance(item, selectors.SweepGroup):
            item.can_manage = services.can_modify_sweep(item.sweep, request.user)
    context = {"runs": runs, "rows": rows, "filters": filters,
               "statuses": Run.Status.choices, "algorithms": selectors.algorithm_labels(),
               "prompt_sets": experiment_selectors.prompt_set_list(),
               "any_active": any(r.status in Run.ACTIVE_STATUSES for r in runs),
               "poll_seconds": settings.RUN_LIST_POLL_SECONDS}
    if request.htmx:
        return render(request, "dashboard/_run_rows.html", context)
    return render(request, "dashboard/run_list.html", context)


@login_required
def run_launch(request: HttpRequest) -> HttpResponse:
    source: Run | None = None
    clone = request.GET.get("clone") or request.POST.get("cloned_from")
    if clone:
        source = _run_or_404(params.parse_id(clone))
    diff: list[tuple[str, Any]] | None = None
    estimate = None
    status = 200
    if request.method == "POST":
        action = request.POST.get("action", "launch")
        form = LaunchForm(request.POST, estimate=action.startswith("estimate"),
                          user=request.user)
        if form.is_valid() and action.startswith("estimate"):
            # The preflight: sample on a worker, shown under the form, which keeps its values.
            estimate = _request_estimate(request, form)
        elif form.is_valid():
            diff = clone_diff(form, source) if source else None
            # A clone is shown with its differences first and launched on confirmation.
            if source is None or request.POST.get("confirm") == "1":
                wait = launch_wait(request)
                if wait is not None:
                    form.add_error(None, _too_many(wait))
                    status = 429
                else:
                    try:
                        return _launch(request, form, source)
                    except services.LaunchError as exc:
                        form.add_launch_errors(exc.pairs)
    else:
        initial = initial_from_run(source) if source else {}
        prompt_set = params.get_id(request.GET, "prompt_set")
        if prompt_set:
            initial["prompt_set"] = prompt_set
        form = LaunchForm(initial=initial, user=request.user)
    return render(request, "dashboard/run_launch.html", status=status, context={
        "form": form, "source": source, "diff": diff, "builtin_model": BUILTIN_MODEL,
        "models": model_catalogue.offered_models(),
        "has_prompt_sets": experiment_selectors.ready_prompt_sets().exists(),
        **(_estimate_context(request, estimate, form.run_shape(), _form_budgets(form))
           if estimate else {})})


def _launch(request: HttpRequest, form: LaunchForm, source: Run | None) -> HttpResponse:
    """Launch the valid form's run, or its sweep when "sweep over" holds a grid."""
    d = form.cleaned_data
    common = {"eval_set": d["eval_set"], "queue": d["queue"], "retention": d["retention"]}
    if not d["sweep"]:
        run = services.launch_run(request.user, d["name"], form.config_dict(), d["prompt_set"],
                                  cloned_from=source, **common)
        return _launched(request, run, "Launched")
    sweep = services.launch_sweep(request.user, d["name"], form.config_dict(), d["sweep"],
                                  d["prompt_set"], **common)
    errors = [r.enqueue_error for r in sweep.launched_runs if r.enqueue_error]
    if errors:
        messages.error(request, (
            f"Launched sweep “{sweep.name}” ({fmt.count(len(sweep.launched_runs), 'run')}), but "
            "the broker "
            f"(Redis) is unreachable, so no worker has its runs yet ({errors[0].rstrip('.')}). "
            "They stay queued and start when the broker is back."))
    else:
        messages.success(request, f"Sweep “{sweep.name}”: "
                                  f"{fmt.count(len(sweep.launched_runs), 'run')} queued on "
                                  f"{d['queue']}.")
    return redirect(reverse("dashboard:run_list") + f"?sweep={sweep.pk}")


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    # The heatmap's order, search and row range travel in the page URL, so a view is a link.
    options = _heatmap_options(request)
    rows = options["rows"]
    shown = {"sort": request.GET.get("sort", ""), "q": options["query"],
             "rows": f"{rows[0]}-{rows[1]}" if rows else ""}
    placement = selectors.run_placement(run.pk)
    return render(request, "dashboard/run_detail.html", {
        **_status_context(request, run),
        "config": charts.run_config(run),
        # Where a world_size > 1 run executes (the "Across ranks" section's table).
        "placement": placement,
        "placement_nodes": len({r["node"] for r in placement}),
        # A rollout/train split: how many ranks generate and how many train (None: colocated).
        "placement_split": selectors.placement_split(placement),
        # A clone says how it differs from its source (a deleted source leaves nothing to say).
        "source_diff": selectors.config_diff([run.cloned_from, run]) if run.cloned_from else None,
        "chart_sections": [(section, [charts.RUN_CHARTS[n] for n in names])
                           for section, names in charts.sections_for(run)],
        "config_rows": sorted((run.config or {}).items()),
        "heatmap_sorts": heatmap.SORTS,
        "heatmap": {**options, "params": shown,
                    "query_string": urlencode({k: v for k, v in shown.items() if v})},
    })


def _status_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    return {"run": run, "eta": selectors.run_eta(run), "queue_place": selectors.queue_place(run),
            "poll_seconds": settings.DASHBOARD_POLL_SECONDS,
            "can_manage": services.can_modify_run(run, request.user),
            # A failed or cancelled run of a sweep: "Retry in the sweep" takes its place.
            "retryable": services.retryable(run),
            "active": run.status in Run.ACTIVE_STATUSES,
            "algorithm_label": selectors.algorithm_label(run.algorithm),
            "skipped": selectors.skipped_updates(run)}


@login_required
def run_status(request: HttpRequest, run_id: int) -> HttpResponse:
    """The live part of the run page (title, actions, status card), polled by htmx while the
    run is queued or running and swapped whole: Delete appears the moment a run finishes."""
    return render(request, "dashboard/_run_live.html",
                  _status_context(request, _run_or_404(run_id)))


@login_required
def run_chart(request: HttpRequest, run_id: int, name: str) -> HttpResponse:
    run = _run_or_404(run_id)
    if name not in charts.RUN_CHARTS:
        raise Http404("no such chart")
    # A finished run's figures are final: keep the encoded JSON (the heatmap's is 400 KiB at
    # paper scale, and re-encoding it costs more than the rest of the request). The key holds
    # only what changes the figure, so a client cannot grow the cache by varying the query: a
    # searched or zoomed heatmap is not kept (it is built from the cached cells in tens of ms),
    # its five orders are.
    options = _heatmap_options(request) if name == "heatmap" else {}
    if name in charts.FULL_RESOLUTION_CHARTS:
        key, points = f"chart.{name}", charts.MAX_POINTS
    else:
        points = _max_points(request)
        key = f"chart.{name}.{points}"

    def figure() -> bytes:
        return json.dumps(charts.run_chart(run, name, points, **options)).encode()

    if options.get("query") or options.get("rows"):
        return HttpResponse(figure(), content_type="application/json")
    if options:
        key += f".{options['sort']}"
    body = selectors.cached_for_finished(key, [run], figure)
    return HttpResponse(body, content_type="application/json")


@login_required
def run_export(request: HttpRequest, run_id: int) -> FileResponse:
    """The run's Parquet bundle (the same as the API's ``/runs/{id}/export``)."""
    run = _run_or_404(run_id)
    return FileResponse(bundles.bundle_file(run), as_attachment=True,
                        filename=bundles.bundle_filename(run), content_type="application/zip")


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


def _too_many(wait: int) -> str:
    return (f"Too many launches: try again in {wait} s (at most {settings.LAUNCH_RATE} per "
            "user, LAUNCH_RATE).")


def _throttled(request: HttpRequest, back: str) -> HttpResponse | None:
    """A relaunch or retry past ``LAUNCH_RATE``: the message, and back where it came from."""
    wait = launch_wait(request)
    if wait is None:
        return None
    messages.error(request, _too_many(wait))
    return redirect(back)


@login_required
@require_POST
def run_relaunch(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    if (refused := _throttled(request, reverse("dashboard:run_detail", args=[run.pk]))):
        return refused
    try:
        new = services.relaunch_run(run, request.user)
    except services.LimitReached as exc:
        messages.error(request, f"Cannot relaunch {run.name}: {exc.reason}")
        return redirect("dashboard:run_detail", run_id=run.pk)
    except services.LaunchError as exc:
        # The config no longer validates (bounds changed since, a model directory is gone...):
        # the launch form shows it as a clone, where the field can be fixed.
        messages.error(request, f"Cannot relaunch {run.name}: {exc}. Fix it below.")
        return redirect(reverse("dashboard:run_launch") + f"?clone={run.pk}")
    return _launched(request, new, "Relaunched as")


@login_required
@require_POST
def run_retry(request: HttpRequest, run_id: int) -> HttpResponse:
    """A failed or cancelled run of a sweep, run again in its place (``services.retry_run``)."""
    run = _run_or_404(run_id)
    if (refused := _throttled(request, reverse("dashboard:run_detail", args=[run.pk]))):
        return refused
    try:
        new = services.retry_run(run, request.user)
    except services.LaunchError as exc:
        messages.error(request, f"Cannot retry {run.name}: {exc.reason}")
        return redirect("dashboard:run_detail", run_id=run.pk)
    return _launched(request, new, f"Retried in sweep “{run.sweep.name}” (in the place of run "
                                   f"{run.pk}) as")


def _launched(request: HttpRequest, run: Run, what: str) -> HttpResponse:
    if run.enqueue_error:
        messages.error(request, (
            f"{what} “{run.name}”, but the broker (Redis) is unreachable, so no worker has the "
            f"run yet ({run.enqueue_error.rstrip('.')}). It stays queued and starts when the "
            "broker is back (workers put queued runs back on the queue)."))
    else:
        messages.success(request, f"{what} “{run.name}”: queued on {run.queue}.")
    return redirect("dashboard:run_detail", run_id=run.pk)


@login_required
@require_POST
def sweep_cancel(request: HttpRequest, sweep_id: int) -> HttpResponse:
    """Cancel-all. From the runs list (htmx) the page reloads to show the new statuses."""
    try:
        sweep = experiment_selectors.sweep_get(sweep_id)
    except Sweep.DoesNotExist as exc:
        raise Http404("no such sweep") from exc
    n = services.cancel_sweep(sweep, request.user)
    messages.info(request, f"Sweep {sweep.name}: cancel requested for "
                           f"{fmt.count(n, 'unfinished run')} "
                           "(queued ones stop at once, running ones after their current round).")
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Refresh": "true"})
    return redirect(reverse("dashboard:run_list") + f"?sweep={sweep.pk}")


# --- prompts -----------------------------------------------------------------------------------

@login_required
def prompt_history(request: HttpRequest, run_id: int, prompt_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    prompt = _prompt_of_run_or_404(run, prompt_id)
    before = params.get_int(request.GET, "before", min_value=0)
    if before is None and request.GET.get("before"):
        return HttpResponseBadRequest("before must be a step number")
    history = selectors.prompt_history(run, prompt, before_step=before)
    words = selectors.outcome_words(run)
    return render(request, "dashboard/prompt_history.html",
                  {"run": run, "prompt": prompt, **history,
                   "preview_chars": experiment_selectors.PROMPT_PREVIEW_CHARS,
                   "answer_note": selectors.answer_note(run.prompt_set, prompt),
                   "estimator": words["label"],
                   "summary_rows": _summary_rows(history["all_steps"], words)})


def _summary_rows(steps: list[tuple[Any, ...]], words: dict[str, Any]) -> str:
    """The all-steps table body. A prompt of a 600-step run has 600 rows; Django's template loop
    takes ~100 ms for them, format_html_join a few (values are escaped all the same)."""
    return format_html_join(
        "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{} / {}</td><td>{}</td></tr>",
        ((s[0], s[1], s[2], s[3], s[4],
          selectors.prompt_step_outcome(s[5], s[6], s[10], s[11], **words), s[7], s[8],
          f"{s[9]:.3f}")
         for s in steps))


@login_required
def prompt_chart(request: HttpRequest, run_id: int, prompt_id: int) -> JsonResponse:
    run = _run_or_404(run_id)
    prompt = _prompt_of_run_or_404(run, prompt_id)
    return JsonResponse(charts.prompt_pass_rate(run, prompt.pk))


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
                    if ps.status == PromptSet.Status.READY:
                        messages.success(request, f"Imported {fmt.count(ps.size, 'prompt')} "
                                                  f"into {ps.name}.")
                    else:  # a large file: its page follows the import
                        messages.info(request, f"Importing {f.name} into {ps.name}: the "
                                               "whole file is checked before any prompt is "
                                               "stored.")
                    return redirect("dashboard:prompt_set_detail", set_id=ps.pk)
        else:
            builtin = BuiltinForm(request.POST, prefix="builtin")
            if builtin.is_valid():
                d = builtin.cleaned_data
                try:
                    ps = services.create_builtin_prompt_set(
                        request.user, d["name"], num_prompts=d["num_prompts"],
                        min_digits=d["min_digits"], max_digits=d["max_digits"], seed=d["seed"],
                        task=d["task"])
                except services.LaunchError as exc:
                    builtin.add_error(exc.field if exc.field in builtin.fields else None,
                                      exc.reason)
                else:
                    messages.success(request, f"Generated {fmt.count(ps.size, 'prompt')} "
                                              f"into {ps.name}.")
                    return redirect("dashboard:prompt_set_detail", set_id=ps.pk)
    return render(request, "dashboard/prompt_sets.html", {
        "sets": experiment_selectors.prompt_set_list(), "upload": upload, "builtin": builtin,
        "max_mib": settings.PROMPT_UPLOAD_MAX_BYTES / 2**20,
        "max_rows": f"{settings.PROMPT_UPLOAD_MAX_ROWS:,}",
        "max_prompt_chars": f"{settings.PROMPT_MAX_CHARS:,}"})


@login_required
def prompt_set_detail(request: HttpRequest, set_id: int) -> HttpResponse:
    ps = get_object_or_404(PromptSet.objects.select_related("owner"), pk=set_id)
    return render(request, "dashboard/prompt_set_detail.html", {
        "set": ps, "import": _import_state(ps),
        "prompts": (experiment_selectors.prompt_set_preview(ps)
                    if ps.status == PromptSet.Status.READY else []),
        "preview_chars": experiment_selectors.PROMPT_PREVIEW_CHARS,
        "answer_note": selectors.answer_note(ps)})


@login_required
def prompt_set_status(request: HttpRequest, set_id: int) -> HttpResponse:
    """The import's progress card, polled by the set's page while it imports; once the import
    has ended the page reloads (the prompts, or why the file was refused)."""
    ps = get_object_or_404(PromptSet, pk=set_id)
    state = _import_state(ps)
    response = render(request, "dashboard/_prompt_set_import.html", {"set": ps, "import": state})
    if state["status"] != PromptSet.Status.IMPORTING:
        response["HX-Refresh"] = "true"
    return response


def _import_state(ps: PromptSet) -> dict[str, Any]:
    """How the set's import stands, in words for the page: importing (rows, how far), ready,
    or failed with the reason (an importer that stopped giving signs of life failed too)."""
    from experiments.services.prompt_import import stalled

    if stalled(ps):
        return {"status": PromptSet.Status.FAILED,
                "error": "the import stopped (the web server restarted while it ran); upload "
                         "the file again"}
    percent = None if ps.import_fraction is None else round(100 * ps.import_fraction)
    return {"status": ps.status, "error": ps.import_error, "rows": ps.import_rows,
            "percent": percent,
            "poll_seconds": max(settings.DASHBOARD_POLL_SECONDS, 1.0)}


@login_required
def prompt_detail(request: HttpRequest, set_id: int, index: int) -> HttpResponse:
    """One prompt of a set, whole: its text, answer and metadata (lists show previews)."""
    ps = get_object_or_404(PromptSet, pk=set_id)
    try:
        prompt = experiment_selectors.prompt_in_set(ps.pk, index)
    except Prompt.DoesNotExist:
        raise Http404("no such prompt in this set") from None
    return render(request, "dashboard/prompt_detail.html", {
        "set": ps, "prompt": prompt,
        "metadata": json.dumps(prompt.metadata, indent=2, ensure_ascii=False),
        "answer_note": selectors.answer_note(ps, prompt)})


# --- compare -----------------------------------------------------------------------------------

# The compare table's "final" reward columns: the mean of each run's last this many steps.
FINAL_STEPS = 10


def _compare_runs(request: HttpRequest) -> tuple[list[Run], list[int]]:
    """The runs the query names (``runs`` in order, then each ``sweep``'s runs) and the ids
    that name no run."""
    ids = params.get_ids(request.GET, "runs")
    for sweep_id in params.get_ids(request.GET, "sweep"):
        ids.extend(experiment_selectors.sweep_runs(sweep_id).values_list("pk", flat=True))
    ids = list(dict.fromkeys(ids))
    runs = experiment_selectors.runs_by_ids(ids)
    found = {r.pk for r in runs}
    return runs, [i for i in ids if i not in found]


def _compare_view(request: HttpRequest, runs: list[Run]) -> tuple[str, str]:
    """The x axis and the metric (a value that names neither is a 400, not a silent default);
    without ``x``, steps, or wall time when the runs' max_policy_lag differ."""
    return (params.require_choice(request.GET, "x", charts.X_AXES, charts.default_x_axis(runs)),
            params.require_choice(request.GET, "metric", charts.COMPARE_METRICS, "real_reward"))


def _missing_note(missing: list[int]) -> str:
    ids = ", ".join(str(i) for i in missing)
    return (f"No run with id {ids}" if len(missing) == 1 else f"No runs with ids {ids}") + (
        " (deleted, or a mistyped link).")


@login_required
@allows_webgl  # its pass-rate scatter is a scattergl chart
def compare(request: HttpRequest) -> HttpResponse:
    runs, missing = _compare_runs(request)
    x, metric = _compare_view(request, runs)
    if missing:
        messages.warning(request, _missing_note(missing))
    if len(runs) < 2:
        messages.warning(request, f"Compare needs two or more runs; {len(runs)} "
                         f"{'was' if len(runs) == 1 else 'were'} found. Select them here.")
        return redirect("dashboard:run_list")
    runs_query = "&".join(f"runs={r.pk}" for r in runs)
    groups = selectors.seed_groups(runs)
    return render(request, "dashboard/compare.html", {
        "runs": runs, "query": runs_query, "groups": groups,
        "any_left_out": any(g.left_out for g in groups),
        "scatter": selectors.scatter_pair(groups),
        "final": selectors.final_metrics(runs, FINAL_STEPS), "final_steps": FINAL_STEPS,
        "diff": selectors.config_diff(runs), "x_axes": charts.X_AXES,
        "metrics": charts.COMPARE_METRICS, "x": x, "metric": metric,
        "x_by_lag": "x" not in request.GET and charts.default_x_axis(runs) == "wall",
        "held_out_axes": charts.HELD_OUT_AXES, "held_out_caption": charts.HELD_OUT_CAPTION,
        "algorithm_labels": selectors.algorithm_labels(),
    })


def _compare_runs_or_404(request: HttpRequest, least: int) -> list[Run]:
    """The runs a chart of the compare page draws: those that exist (the page itself names the
    missing ones)."""
    runs, _missing = _compare_runs(request)
    if len(runs) < least:
        raise Http404(f"need {least} or more runs")
    return runs


@login_required
def compare_chart(request: HttpRequest) -> JsonResponse:
    runs = _compare_runs_or_404(request, 1)
    x, metric = _compare_view(request, runs)
    return JsonResponse(charts.compare(runs, x, metric, _max_points(request)))


@login_required
def compare_held_out(request: HttpRequest) -> JsonResponse:
    """Held-out accuracy against wall time or samples (``x``: wall, samples)."""
    runs = _compare_runs_or_404(request, 1)
    x = params.require_choice(request.GET, "x", charts.HELD_OUT_AXES, "wall")
    return JsonResponse(charts.held_out(runs, x, _max_points(request)))


@login_required
def compare_scatter(request: HttpRequest) -> JsonResponse:
    runs = _compare_runs_or_404(request, 2)
    pair = selectors.scatter_pair(selectors.seed_groups(runs))
    fig = charts.pass_rate_scatter(pair)
    if pair is not None:
        fig["prompt_url"] = reverse("dashboard:prompt_history", args=[pair[0].pk, 0])
    return JsonResponse(fig)


# --- launch preflight (estimates) ---------------------------------------------------------------

# The estimate service's parameters as the launch form names them.
ESTIMATE_FIELDS = {"samples_per_prompt": "estimate_samples", "num_prompts": "estimate_prompts"}


def _request_estimate(request: HttpRequest, form: LaunchForm) -> Estimate | None:
    d = form.cleaned_data
    try:
        return preflight.request_estimate(
            request.user, form.config_dict(), d["prompt_set"], queue=d["queue"],
            samples_per_prompt=d["estimate_samples"] or preflight.DEFAULT_K,
            num_prompts=d["estimate_prompts"] or preflight.DEFAULT_PROMPTS,
            seed=d.get("seed") or 0, again=request.POST.get("action") == "estimate-again")
    except services.LaunchError as exc:
        form.add_launch_errors([(ESTIMATE_FIELDS.get(f, f), r) for f, r in exc.pairs])
        return None


def _run_shape(request: HttpRequest) -> dict[str, int | None]:
    """B, n, M and N asked for in the query (those absent or malformed: the estimate's own)."""
    return {name: params.get_int(request.GET, name, min_value=low, max_value=high)
            for name, low, high in (("batch_size", 1, 1_000_000), ("group_size", 2, 256),
                                    ("samples_per_round", 1, 256), ("max_rounds", 1, 64))}


# Budgets one estimate panel predicts every algorithm at, at most (each a simulation of all).
MAX_PANEL_BUDGETS = 4


def _budgets(request: HttpRequest) -> list[int]:
    """The matched budgets asked for in the query (``budget=16``, repeatable; malformed or out
    of bounds ones are left out)."""
    out: list[int] = []
    for raw in request.GET.getlist(BUDGET)[:MAX_PANEL_BUDGETS]:
        try:
            out.append(check_budget(int(raw)))
        except (ValueError, ConfigError):
            continue
    return list(dict.fromkeys(out))


def _form_budgets(form: LaunchForm) -> list[int]:
    """The budgets the launch form's sweep crosses (``budget=16``): the preflight shows every
    algorithm at each."""
    values: list[int] = []
    for fields, axis_values in getattr(form, "cleaned_data", {}).get("sweep") or []:
        if fields == BUDGET:
            values += axis_values
        elif isinstance(fields, tuple) and BUDGET in fields:  # paired: (algorithm, budget)
            values += [row[fields.index(BUDGET)] for row in axis_values]
    return list(dict.fromkeys(values))[:MAX_PANEL_BUDGETS]


def _estimate_or_404(estimate_id: int) -> Estimate:
    try:
        return Estimate.objects.select_related("prompt_set", "owner").get(pk=estimate_id)
    except Estimate.DoesNotExist as exc:
        raise Http404("no such estimate") from exc


def _estimate_context(request: HttpRequest, estimate: Estimate,
                      shape: dict[str, Any] | None = None,
                      budgets: list[int] | None = None) -> dict[str, Any]:
    """What the estimate panel shows: progress, or the measured pass rates, warnings and the
    predictions for a run of ``shape`` (B, n, M, N; the requesting config's by default), and
    every algorithm at each matched budget of ``budgets`` (the query's by default)."""
    shape = preflight.run_shape(estimate, shape)
    budgets = _budgets(request) if budgets is None else budgets
    finished = estimate.status == Estimate.Status.SUCCEEDED
    rows = preflight.estimate_predictions(estimate, shape) if finished else []
    at_budget = [(b, b * shape["batch_size"],
                  [{**r, "label": selectors.algorithm_label(r["algorithm"])}
                   for r in preflight.budget_predictions(estimate, b, shape["batch_size"])])
                 for b in budgets] if finished else []
    return {
        "estimate": estimate, "shape": shape,
        "shape_query": urlencode({**shape, BUDGET: budgets}, doseq=True),
        "budget_tables": at_budget, "by_key": {c.key: c for c in PREDICTION_COLUMNS},
        "estimate_active": estimate.status in Estimate.ACTIVE_STATUSES,
        "can_cancel_estimate": services.can_modify_run(estimate, request.user),
        "summary": preflight.estimate_summary(estimate) if finished else None,
        "predictions": [{**r, "label": selectors.algorithm_label(r["algorithm"],
                                                                 r["group_size"])}
                        for r in rows],
        "bxn": shape["batch_size"] * shape["group_size"], "poll_seconds": 1,
        "columns": PREDICTION_COLUMNS, "interval_note": INTERVAL_NOTE,
        "async_prediction": preflight.estimate_async(estimate, shape) if finished else None,
        "async_columns": ASYNC_COLUMNS,
    }


@login_required
def estimate_detail(request: HttpRequest, estimate_id: int) -> HttpResponse:
    estimate = _estimate_or_404(estimate_id)
    shape = _run_shape(request)
    return render(request, "dashboard/estimate_detail.html",
                  _estimate_context(request, estimate, shape))


@login_required
def estimate_panel(request: HttpRequest, estimate_id: int) -> HttpResponse:
    """The live panel; htmx polls it while the sample is queued or running."""
    estimate = _estimate_or_404(estimate_id)
    shape = _run_shape(request)
    return render(request, "dashboard/_estimate.html", _estimate_context(request, estimate, shape))


@login_required
def estimate_chart(request: HttpRequest, estimate_id: int, name: str) -> JsonResponse:
    estimate = _estimate_or_404(estimate_id)
    if name not in charts.ESTIMATE_CHARTS:
        raise Http404("no such chart")
    # The charts draw the run's shape; the matched-budget tables are the panel's alone.
    context = _estimate_context(request, estimate, _run_shape(request), budgets=[])
    return JsonResponse(charts.estimate_chart(name, estimate, context))


@login_required
@require_POST
def estimate_cancel(request: HttpRequest, estimate_id: int) -> HttpResponse:
    estimate = preflight.cancel_estimate(_estimate_or_404(estimate_id), request.user)
    if request.htmx:
        return render(request, "dashboard/_estimate.html", _estimate_context(
            request, estimate, _run_shape(request)))
    return redirect("dashboard:estimate_detail", estimate_id=estimate.pk)


def _show_estimate(request: HttpRequest, back: str, config: dict[str, Any],
                   prompt_set: PromptSet, **options: Any) -> HttpResponse:
    """Request an estimate and open its page; settings that no longer validate (a model
    directory gone, bounds changed) go back to ``back`` with the reason."""
    try:
        estimate = preflight.request_estimate(request.user, config, prompt_set, **options)
    except services.LaunchError as exc:
        messages.error(request, f"Cannot estimate: {exc}")
        return redirect(back)
    return redirect("dashboard:estimate_detail", estimate_id=estimate.pk)


@login_required
@require_POST
def estimate_again(request: HttpRequest, estimate_id: int) -> HttpResponse:
    """Sample the same settings once more (the model may have changed since)."""
    old = _estimate_or_404(estimate_id)
    return _show_estimate(request, reverse("dashboard:estimate_detail", args=[old.pk]),
                          old.config, old.prompt_set, queue=old.queue,
                          samples_per_prompt=old.samples_per_prompt,
                          num_prompts=old.num_prompts, seed=old.seed, again=True)


@login_required
@require_POST
def run_estimate(request: HttpRequest, run_id: int) -> HttpResponse:
    """The preflight of a run's settings (for a run that finished: what would a rerun spend?)."""
    run = _run_or_404(run_id)
    return _show_estimate(request, reverse("dashboard:run_detail", args=[run.pk]), run.config,
                          run.prompt_set, queue=run.queue, seed=run.seed)


# --- reports -----------------------------------------------------------------------------------

def _report_query(request: HttpRequest) -> str:
    """The run selection of a report URL (``sweep`` and ``runs``), for its figure and CSV
    links."""
    return urlencode([(k, v) for k in ("sweep", "runs") for v in request.GET.getlist(k)])


def _report_name(request: HttpRequest, runs: list[Run]) -> tuple[str, str]:
    """(title, file-name stem) of a report: the sweep's name for one sweep, else the runs'."""
    if (len(request.GET.getlist("sweep")) == 1 and not request.GET.getlist("runs")
            and runs[0].sweep_id):
        return f"sweep {runs[0].sweep.name}", f"report-sweep-{runs[0].sweep_id}"
    return fmt.count(len(runs), "run"), "report-runs-" + "-".join(str(r.pk) for r in runs[:8])


@login_required
def report(request: HttpRequest) -> HttpResponse:
    runs, _ = _compare_runs(request)
    if not runs:
        messages.warning(request, "Choose a sweep, or select runs, for a report.")
        return redirect("dashboard:run_list")
    data = reports.cached_report(runs)
    groups = selectors.seed_groups(runs)
    title, stem = _report_name(request, runs)
    return render(request, "dashboard/report.html", {
        "title": title, "stem": stem, "query": _report_query(request),
        "family_sweep": runs[0].sweep_id if stem.startswith("report-sweep-") else None,
        "groups": groups, "any_left_out": any(g.left_out for g in groups),
        "figures": [(n, reports.SECTIONS[n]) for n in reports.FIGURES],
        "tables": [(n, reports.SECTIONS[n], data["rows"][n]) for n in reports.TABLES],
        "any_active": any(r.status in Run.ACTIVE_STATUSES for r in runs),
    })


@login_required
def sweep_family(request: HttpRequest, sweep_id: int) -> HttpResponse:
    """The family report: every method of one sweep side by side, under the report's figures
    of accuracy against cost, pass@k, zero-advantage groups and samples against difficulty, and
    its cost table (``reports.FAMILY``); each figure and table downloads as the report's do."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    runs = experiment_selectors.runs_by_ids(
        list(experiment_selectors.sweep_runs(sweep.pk).values_list("pk", flat=True)))
    if not runs:
        messages.warning(request, f"Sweep {sweep.name} has no runs to report on.")
        return redirect("dashboard:run_list")
    data = reports.cached_report(runs)
    groups = selectors.seed_groups(runs)
    sections = [(n, reports.SECTIONS[n], data["rows"][n], look)
                for n, look in reports.FAMILY.items()]
    return render(request, "dashboard/family.html", {
        "sweep": sweep, "stem": f"family-sweep-{sweep.pk}", "query": f"sweep={sweep.pk}",
        "groups": groups, "any_left_out": any(g.left_out for g in groups), "sections": sections,
        "any_active": any(r.status in Run.ACTIVE_STATUSES for r in runs),
    })


def _report_data(request: HttpRequest, name: str, names: tuple[str, ...]
                 ) -> tuple[dict[str, Any], list[Run]]:
    if name not in names:
        raise Http404("no such figure or table")
    runs, _ = _compare_runs(request)
    if not runs:
        raise Http404("no runs")
    return reports.cached_report(runs), runs


@login_required
def report_figure(request: HttpRequest, name: str) -> JsonResponse:
    data, _ = _report_data(request, name, reports.FIGURES)
    return JsonResponse(reports.figure(data, name))


@login_required
def report_csv(request: HttpRequest, name: str) -> HttpResponse:
    """A figure's or table's numbers, as the report computed them."""
    data, runs = _report_data(request, name, tuple(reports.SECTIONS))
    _, stem = _report_name(request, runs)
    return HttpResponse(reports.to_csv(data, name), content_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition":
                                 f'attachment; filename="{stem}-{name}.csv"'})
