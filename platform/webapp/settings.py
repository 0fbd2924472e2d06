"""Settings of the Reinforce-Ada experiment platform. Configuration comes from the environment:
DATABASE_URL (PostgreSQL only), CELERY_BROKER_URL (Redis), CACHE_URL (default: the broker's Redis),
CHECKPOINT_ROOT, SECRET_KEY, DEBUG."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parents[2]

SECRET_KEY = os.environ.get("SECRET_KEY", "dev-only-insecure-key-change-me")
DEBUG = os.environ.get("DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "experiments",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if not os.environ.get("DATABASE_URL"):
    raise RuntimeError("DATABASE_URL is not set: the platform runs on PostgreSQL only "
                       "(`make run` and `make test` start an embedded server for you)")
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60)}
if not DATABASES["default"]["ENGINE"].endswith("postgresql"):
    raise RuntimeError("DATABASE_URL must point to PostgreSQL")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "var" / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
# The dashboard caches finished runs' chart data and live runs' heatmap aggregates. A shared
# cache (Redis) makes a run's first expensive aggregation happen once per deployment instead of
# once per gunicorn worker. Keys are prefixed; nothing ever flushes the database, so the broker's
# Redis database can hold them (CACHE_URL puts them elsewhere).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ.get("CACHE_URL", CELERY_BROKER_URL),
        "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "rada"),
        "TIMEOUT": 6 * 3600,
    }
}
# A run is long: a worker takes one task at a time (prefetch 1) and acknowledges it only when the
# run ends, so a worker that dies mid-run leaves the task to be redelivered.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Redis redelivers a task still unacknowledged after visibility_timeout, even to a second worker
# while the first is still running it; the run lease (below) turns such copies into no-ops.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", 3600)),
    "unacked_restore_interval": int(os.environ.get("CELERY_UNACKED_RESTORE_INTERVAL", 10)),
    "unacked_restore_throttle": int(os.environ.get("CELERY_UNACKED_RESTORE_THROTTLE", 10)),
}
RUN_QUEUES = ("cpu", "gpu")
# The run lease: a worker executing a run refreshes heartbeat_at every RUN_HEARTBEAT_SECONDS; a
# lease whose heartbeat is older than RUN_LEASE_TIMEOUT_SECONDS belongs to a dead worker and may be
# taken over. The timeout must exceed the longest stall of a live worker's heartbeat thread.
RUN_LEASE_TIMEOUT_SECONDS = float(os.environ.get("RUN_LEASE_TIMEOUT_SECONDS", 60))
RUN_HEARTBEAT_SECONDS = float(os.environ.get("RUN_HEARTBEAT_SECONDS",
                                             max(RUN_LEASE_TIMEOUT_SECONDS / 6, 0.5)))
CHECKPOINT_ROOT = Path(os.environ.get("CHECKPOINT_ROOT", BASE_DIR / "var" / "checkpoints"))
# Largest prompt file accepted by the upload form.
PROMPT_UPLOAD_MAX_BYTES = int(os.environ.get("PROMPT_UPLOAD_MAX_BYTES", 50 * 1024 * 1024))
DATA_UPLOAD_MAX_MEMORY_SIZE = PROMPT_UPLOAD_MAX_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
