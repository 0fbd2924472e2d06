"""The API's errors as JSON: ``{"detail": "...", "errors": [{"field": ..., "reason": ...}]}``;
bad input is a 4xx naming the field, never a 5xx."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.http import HttpRequest, HttpResponse
from experiments import services
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, ValidationError

from trainer.config import ConfigError

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

    def config_error(request: HttpRequest, exc: ConfigError) -> HttpResponse:
        return error_response(request, 400, [(exc.field, exc.reason)])

    def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc) or "forbidden"}, status=403)

    def not_found(request: HttpRequest, exc: ObjectDoesNotExist) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc) or "not found"}, status=404)

    def unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return api.create_response(
            request, {"detail": "authentication needed: Authorization: Bearer <token> (create "
                                "one on /account/)"}, status=401)

    def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        return error_response(request, 422, error_pairs(exc.errors))

    for exc_class, handler in ((services.LaunchError, launch_error), (ConfigError, config_error),
                               (PermissionDenied, forbidden), (ObjectDoesNotExist, not_found),
                               (AuthenticationError, unauthorized), (ValidationError, invalid)):
        api.add_exception_handler(exc_class, handler)
