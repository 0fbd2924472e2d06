"""Request throttles, on django-ninja's (``ninja.throttling``: a history of request times per
key in the cache, which is the shared Redis of ``CACHE_URL`` in a deployment, so every web
process counts together). Past a rate the answer is 429 with ``Retry-After``.

- ``FailedTokenThrottle``: wrong API tokens per client address (``API_AUTH_FAILURE_RATE``).
  Checked before a token is looked at, so while an address is throttled even a right token
  is refused: otherwise the 429 would tell a guess that hit from one that missed.
- ``LaunchRate`` (``LaunchThrottle`` on the API's routes): launches per user
  (``LAUNCH_RATE``): runs, sweeps, relaunches and retries, through the API and the dashboard
  alike.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import Throttled
from ninja.throttling import BaseThrottle, SimpleRateThrottle


class TokensThrottled(Throttled):
    """Too many wrong tokens from this address (a launch throttle raises plain ``Throttled``)."""


class FailedTokenThrottle(SimpleRateThrottle):
    scope = "api_auth_failures"

    def __init__(self) -> None:
        super().__init__(settings.API_AUTH_FAILURE_RATE)

    def get_cache_key(self, request: HttpRequest) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def check(self, request: HttpRequest) -> None:
        """Raise ``Throttled`` while this address has had its share of wrong tokens."""
        self.key = self.get_cache_key(request)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) >= (self.num_requests or 0):
            raise TokensThrottled(wait=self.wait())

    def failed(self) -> None:
        """Count a wrong token against the address ``check`` saw."""
        self.throttle_success()


class LaunchRate(SimpleRateThrottle):
    scope = "launches"

    def __init__(self) -> None:
        super().__init__(settings.LAUNCH_RATE)

    def get_cache_key(self, request: HttpRequest) -> str:
        # The API's user is request.auth (a token's or the session's); the dashboard's is
        # request.user.
        user = getattr(request, "auth", None) or getattr(request, "user", None)
        ident = user.pk if user is not None and user.is_authenticated else \
            self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class LaunchThrottle(BaseThrottle):
    """``LaunchRate`` for a route (``throttle=LaunchThrottle()``). The route's instance lives
    as long as the process and serves every thread: each request gets its own ``LaunchRate``
    (which keeps the request's history on itself) and the setting as it is now."""

    def __init__(self) -> None:
        self._local = threading.local()

    def allow_request(self, request: HttpRequest) -> bool:
        self._local.rate = LaunchRate()
        return self._local.rate.allow_request(request)

    def wait(self) -> float | None:
        return self._local.rate.wait()


def launch_wait(request: HttpRequest) -> int | None:
    """For the dashboard's views: None when a launch may go ahead (and it is counted), else
    the seconds to wait."""
    throttle = LaunchRate()
    if throttle.allow_request(request):
        return None
    return retry_after(throttle.wait())


def retry_after(wait: Any) -> int:
    """``Retry-After``'s whole seconds (RFC 9110), at least 1."""
    return max(1, math.ceil(wait)) if wait is not None else 1
