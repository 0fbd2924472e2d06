"""``/report``: a report's data as tidy rows."""

from __future__ import annotations

from typing import Any

from dashboard import reports
from django.http import HttpRequest
from experiments import selectors as experiment_selectors
from experiments import services
from ninja import Query, Router

from api.schemas import ReportQuery

router = Router(tags=["reports"])


@router.get("/report", response=dict[str, Any])
def report(request: HttpRequest, query: Query[ReportQuery]) -> Any:
    """A report's data (the report page's figures and tables as tidy rows): the runs of each
    ``sweep`` and the ``runs`` named, grouped by algorithm with seeds as replicates."""
    ids = list(query.runs)
    for sweep_id in query.sweep:
        ids.extend(experiment_selectors.sweep_runs(sweep_id).values_list("pk", flat=True))
    chosen = experiment_selectors.runs_by_ids(list(dict.fromkeys(ids)))
    if not chosen:
        raise services.LaunchError("runs", "no runs: name a sweep or runs that exist")
    return reports.cached_report(chosen)

