"""The API's errors as JSON: ``{"detail": "...", "errors": [{"field": ..., "reason": ...}]}``;
bad input is a 4xx naming the field, never a 5xx."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from experiments import services
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, Throttled, ValidationError
from webapp.throttles import TokensThrottled, retry_after

from trainer.config import ConfigError

# A body past the limit is read and dropped up to this many bytes before the 413 goes out, so a
# client still sending it reads the answer instead of a broken pipe; past it the connection
# closes (bounded work for a hostile client).
DRAIN_MAX_BYTES = 64 * 2**20


def drain(request: HttpRequest) -> None:
    """Read and drop what is left of the request's body, up to ``DRAIN_MAX_BYTES``."""
    stream = getattr(request, "_stream", None)
    left = DRAIN_MAX_BYTES
    try:
        while stream is not None and left > 0:
            chunk = stream.read(min(64 * 2**10, left))
            if not chunk:
                break
            left -= len(chunk)
    except OSError:  # the client gave up: nothing to answer
        pass


# A union's errors carry the member tried ("int", "function-after[...]"): not a field.
UNION_TAGS = {"int", "str", "float", "bool", "none", "list", "dict"}


def _loc_field(loc: Any) -> str:
    """A pydantic error location as a field name: ('query', 'limit') -> limit,
    ('body', 'config', 'seed') -> config.seed."""
    parts = [str(p) for p in loc if p not in ("query", "body", "path", "form", "file")]
    if parts and parts[0] == "payload":
        parts = parts[1:]
    parts = [p for p in parts if p not in UNION_TAGS and "[" not in p]
    return ".".join(parts) or "body"


def error_pairs(errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(field, reason) per field: a union's members each fail, and the last tried (the text
    one, for "id or name") says most."""
    by_field: dict[str, str] = {}
    for e in errors:
        by_field[_loc_field(e.get("loc", ()))] = e.get("msg", "invalid")
    return list(by_field.items())


def register_error_handlers(api: NinjaAPI) -> None:
    """Answer each error the routes raise in JSON, through ``api``'s renderer."""

    def error_response(request: HttpRequest, status: int, pairs: list[tuple[str, str]],
                       detail: str | None = None) -> HttpResponse:
        errors = [{"field": f, "reason": r} for f, r in pairs]
        text = detail or "; ".join(f"{f}: {r}" for f, r in pairs)
        return api.create_response(request, {"detail": text, "errors": errors}, status=status)

    def launch_error(request: HttpRequest, exc: services.LaunchError) -> HttpResponse:
        return error_response(request, 400, exc.pairs)

    def limit_reached(request: HttpRequest, exc: services.LimitReached) -> HttpResponse:
        # The run is fine; the user's share of the platform is full: 429, like a quota.
        return error_response(request, 429, exc.pairs)

    def conflict(request: HttpRequest, exc: services.Conflict) -> HttpResponse:
        return error_response(request, 409, exc.pairs)

    def throttled(request: HttpRequest, exc: Throttled) -> HttpResponse:
        wait = retry_after(exc.wait)
        what = (f"too many wrong API tokens from this address (at most "
                f"{settings.API_AUTH_FAILURE_RATE}, API_AUTH_FAILURE_RATE)"
                if isinstance(exc, TokensThrottled) else
                f"too many launches (at most {settings.LAUNCH_RATE} per user, LAUNCH_RATE)")
        response = error_response(request, 429, [("request", f"{what}: try again in "
                                                              f"{wait} s")])
        response["Retry-After"] = str(wait)
        return response

    def config_error(request: HttpRequest, exc: ConfigError) -> HttpResponse:
        return error_response(request, 400, [(exc.field, exc.reason)])

    def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc) or "forbidden"}, status=403)

    def not_found(request: HttpRequest, exc: ObjectDoesNotExist) -> HttpResponse:
        # Django's own text ("Run matching query does not exist.") is no sentence for a user.
        what = type(exc).__qualname__.removesuffix(".DoesNotExist").lower()
        return api.create_response(request, {"detail": f"no such {what or 'object'}: it does "
                                             "not exist, or was deleted meanwhile"}, status=404)

    def gone(request: HttpRequest, exc: services.Gone) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc)}, status=404)

    def unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return api.create_response(
            request, {"detail": "authentication needed: Authorization: Bearer <token> (create "
                                "one on /account/)"}, status=401)

    def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        return error_response(request, 422, error_pairs(exc.errors))

    def too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        drain(request)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(request, 413, [("body", (
            f"the body is larger than {limit / 2**20:.1f} MiB ({limit:,} bytes), the limit "
            "(DATA_UPLOAD_MAX_MEMORY_SIZE); a prompt file goes to POST /prompt-sets as a file"))])

    for exc_class, handler in ((services.LaunchError, launch_error),
                               (services.LimitReached, limit_reached),
                               (services.Conflict, conflict), (Throttled, throttled),
                               (services.Gone, gone),
                               (ConfigError, config_error),
                               (PermissionDenied, forbidden), (ObjectDoesNotExist, not_found),
                               (AuthenticationError, unauthorized), (ValidationError, invalid),
                               (RequestDataTooBig, too_large)):
        api.add_exception_handler(exc_class, handler)
