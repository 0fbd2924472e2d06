"""The REST API, version 1 (django-ninja): ``/api/v1/``, its OpenAPI schema at
``/api/v1/openapi.json`` and its docs page at ``/api/v1/docs``.

Thin, like the dashboard's views: writes go through ``experiments.services``, reads through the
selectors, and the same rules hold (anyone signed in reads; cancel, delete and relaunch are for a
run's owner or staff). A request authenticates with ``Authorization: Bearer <token>`` (tokens are
made on the account page) or, for the docs page's "Try it out", the browser's session.

Errors are JSON: ``{"detail": "...", "errors": [{"field": ..., "reason": ...}]}``; bad input is a
4xx naming the field, never a 5xx (``api.errors``). The bodies are in ``api.schemas``, the
routes one module per resource in ``api.routes``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.operation import Operation
from ninja.security import HttpBearer, session
from webapp.throttles import FailedTokenThrottle

from api.errors import register_error_handlers
from api.routes import account, prompt_sets, reports, runs, sweeps
from api.services import user_for_token


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        # Wrong tokens are throttled per address (429 with Retry-After): a token is 256
        # random bits, but guessing at full speed still costs a database lookup each.
        throttle = FailedTokenThrottle()
        throttle.check(request)
        user = user_for_token(token)
        if user is None:
            throttle.failed()
        return user


class SessionAuth(session.SessionAuth):
    """The browser's session (the docs page's "Try it out"), CSRF-checked as ninja does, but
    only for a request that has a session to forge: a request with a Bearer token (which failed
    the token check) or without a session cookie is simply not signed in, a 401, not a 403
    "CSRF check Failed" (browsers never add an Authorization header by themselves)."""

    def __call__(self, request: HttpRequest) -> Any:
        if "authorization" in request.headers or self.param_name not in request.COOKIES:
            return None
        return super().__call__(request)


class PlatformAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        # ninja names an operation after its module; the routes moved into api.routes, and a
        # client generated from the schema keeps its method names: "api_api_<function>" still.
        return f"api_api_{operation.view_func.__name__}"


api = PlatformAPI(
    title="Reinforce-Ada platform API", version="1", urls_namespace="api-v1",
    description="Runs, sweeps, prompt sets and their records. Authenticate with "
                "`Authorization: Bearer <token>`; create a token on your account page (/account/).",
    auth=[TokenAuth(), SessionAuth()])
register_error_handlers(api)

# In this order: the schema lists the paths as they are added.
api.add_router("", account.router)
api.add_router("", reports.router)
api.add_router("/prompt-sets", prompt_sets.router)
api.add_router("/runs", runs.router)
api.add_router("/sweeps", sweeps.router)


def urls() -> Any:
    """The API's URL patterns; the upload operation accepts files up to the prompt-set limit
    (``webapp.uploads``: every other path refuses files while the body streams in)."""
    from webapp.uploads import accepts_files

    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if str(pattern.pattern) == "prompt-sets":
            accepts_files("PROMPT_UPLOAD_MAX_BYTES")(pattern.callback)
    return patterns, app_name, namespace
