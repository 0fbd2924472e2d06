"""Project-level views: the health check, the favicon, the 400 page, the 500/503 page."""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.views.decorators.http import require_GET


@require_GET
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico whatever the page's <link rel=icon> says."""
    return HttpResponseRedirect(static("favicon.ico"))


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400 with the reason when it is the user's to fix (``BadRequest``, e.g. a query parameter
    that does not parse: ``dashboard.params.BadParameter``); suspicious requests get no detail."""
    reason = str(exception) if isinstance(exception, BadRequest) else ""
    return render(request, "400.html", {"reason": reason}, status=400)


# Seconds a client is told to wait before retrying while the database is unreachable.
RETRY_AFTER_SECONDS = 10
OUTAGE = ("the database is unreachable (restarting, or down): nothing was changed; try again "
          f"in {RETRY_AFTER_SECONDS} seconds")


def server_error(request: HttpRequest) -> HttpResponse:
    """500, or 503 while the database is unreachable (an outage is the server's, and passes):
    JSON in the API's shape under /api/, a page saying so elsewhere. Built without the database
    or the templates' context (the user, the session), which may be what failed."""
    exc = sys.exc_info()[1]
    outage = isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DatabaseError) and "connection" in str(exc).lower())
    status = 503 if outage else 500
    detail = OUTAGE if outage else "server error: the failure is logged for the operator"
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": detail}, status=status)
    else:
        title = "Service unavailable" if outage else "Server error"
        response = HttpResponse(
            f"<!doctype html><html lang=en><meta charset=utf-8><title>{title}</title>"
            f"<h1>{title}</h1><p>{detail}.</p></html>", status=status)
    if outage:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Database, broker and live workers per queue, as JSON; 503 when the database or the broker
    is down. No sign-in: load balancers and compose health checks call it. Worker hostnames and
    error texts (which name hosts, ports and users) are for staff only; others get the status,
    the ok flags and the worker counts."""
    from webapp.celery import live_workers

    body: dict[str, Any] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        body["database"] = {"ok": True}
    except Exception as exc:  # noqa: BLE001 - any failure means "down", reported as such
        body["database"] = {"ok": False, "error": str(exc)[:500]}
    workers: list[dict[str, Any]] = []
    try:
        workers = live_workers()
        body["broker"] = {"ok": True}
    except Exception as exc:  # noqa: BLE001
        body["broker"] = {"ok": False, "error": str(exc)[:500]}
    per_queue = {q: 0 for q in settings.RUN_QUEUES}
    for w in workers:
        for q in w.get("queues", []):
            per_queue[q] = per_queue.get(q, 0) + 1
    body["workers"] = per_queue
    body["worker_names"] = sorted(w.get("hostname", "") for w in workers)
    ok = body["database"]["ok"] and body["broker"]["ok"]
    body["status"] = "ok" if ok else "error"
    if not request.user.is_staff:
        body.pop("worker_names")
        for part in ("database", "broker"):
            body[part].pop("error", None)
    return JsonResponse(body, status=200 if ok else 503)
