"""Settings for a deployment behind a TLS-terminating proxy (docker-compose.yml uses them:
``DJANGO_SETTINGS_MODULE=webapp.settings_production``). ``python manage.py check --deploy`` is
clean with them.

The proxy must set ``X-Forwarded-Proto: https`` (and pass ``Host``); ``CSRF_TRUSTED_ORIGINS``
lists the origins users type, e.g. ``https://rada.example.org``, comma-separated. Plain HTTP is
redirected to HTTPS, except ``/healthz`` (health checks from inside the network).
"""

from __future__ import annotations

import os

from webapp.settings import *  # noqa: F403

DEBUG = False

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = os.environ.get("SECURE_SSL_REDIRECT", "1") == "1"
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 365 * 24 * 3600))
SECURE_HSTS_INCLUDE_SUBDOMAINS = os.environ.get("SECURE_HSTS_INCLUDE_SUBDOMAINS", "1") == "1"
SECURE_HSTS_PRELOAD = os.environ.get("SECURE_HSTS_PRELOAD", "1") == "1"
# The containers' health checks ask for /healthz with Host: localhost from inside the container;
# ALLOWED_HOSTS holds the public name, and Django answers any other Host with 400.
if "localhost" not in ALLOWED_HOSTS:  # noqa: F405
    ALLOWED_HOSTS = [*ALLOWED_HOSTS, "localhost"]  # noqa: F405
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",")
                        if o.strip()]
