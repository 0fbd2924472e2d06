"""The account page: the user's API tokens, created (the token shown once) and revoked."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from experiments.services import LaunchError

from api import services
from api.models import ApiToken


@never_cache  # the page shows a new token once: no copy of it in any cache
@login_required
def account(request: HttpRequest) -> HttpResponse:
    new_token, error = "", ""
    if request.method == "POST":
        try:
            token, new_token = services.create_token(request.user, request.POST.get("name", ""))
        except LaunchError as exc:
            error = exc.reason
        else:
            messages.success(request, f"Token “{token.name}” created. Copy it now: it is "
                                      "shown only this once.")
    tokens = ApiToken.objects.filter(user=request.user)
    return render(request, "api/account.html", {
        "tokens": tokens, "new_token": new_token, "error": error,
        "api_root": request.build_absolute_uri("/api/v1/"),
        "name": request.POST.get("name", "") if error else ""})


@login_required
@require_POST
def revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(pk=token_id, user=request.user).first()
    if token is None:
        raise Http404("no such token")
    services.revoke_token(token, request.user)
    messages.info(request, f"Token “{token.name}” revoked: requests with it are refused.")
    return redirect("account")
