"""The Content-Security-Policy header on every response.

Scripts may come only from this server's static files (no inline script, no ``eval``, no
``on...=`` attribute): a name or prompt that slipped past escaping could not run script. The
pages keep to it: their scripts are files under ``static/`` (htmx and plotly.js are served
locally), and data reaches them in ``data-`` attributes and ``application/json`` blocks, which a
policy does not govern. Inline styles stay allowed (plotly.js draws with them; see settings).
``tests/browser/test_csp_browser.py`` loads the pages and their charts under the header and
finds no violation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def policy_header(policy: dict[str, str]) -> str:
    return "; ".join(f"{k} {v}" for k, v in policy.items())


def allows_webgl(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """For a page drawing a WebGL chart (``scattergl``: tens of thousands of points, which SVG
    draws too slowly): plotly.js compiles its shaders with ``Function``, so the page's policy
    adds ``'unsafe-eval'``. Inline script stays refused, so injected markup still cannot run."""
    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> HttpResponse:
        response = view(*args, **kwargs)
        policy = dict(settings.CONTENT_SECURITY_POLICY)
        policy["script-src"] += " 'unsafe-eval'"
        response.headers["Content-Security-Policy"] = policy_header(policy)
        return response
    return wrapped


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = policy_header(settings.CONTENT_SECURITY_POLICY)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # A view that sets its own (``allows_webgl``) keeps it.
        response.headers.setdefault("Content-Security-Policy", self.policy)
        return response


def client_address(request: HttpRequest) -> str | None:
    """The address of the client behind ``NUM_PROXIES`` trusted proxies, as the API's throttles
    (django-ninja) count it: the entry that many places from the right of X-Forwarded-For (the
    production nginx overwrites the header with the address it saw), else ``REMOTE_ADDR``. The
    sign-in lock (django-axes, ``AXES_CLIENT_IP_CALLABLE``) uses it too: without it the lock
    behind the proxy would be per user name only, since every request comes from nginx."""
    remote = request.META.get("REMOTE_ADDR")
    proxies = int(getattr(settings, "NINJA_NUM_PROXIES", 0) or 0)
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if proxies <= 0 or not forwarded:
        return remote
    hops = [h.strip() for h in forwarded.split(",") if h.strip()]
    return hops[-min(proxies, len(hops))] if hops else remote
