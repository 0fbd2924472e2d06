"""The Celery app of the workers: ``celery -A workers.celery_app worker -P solo -Q cpu``.

platform/ goes on sys.path (it is no package: the name would shadow the standard ``platform``
module) and Django is set up before the tasks import the apps. Configuration comes from the Django
settings' ``CELERY_*`` names, shared with the web process's client (``webapp.celery``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "platform"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup()

from celery import Celery  # noqa: E402

app = Celery("rada")
app.config_from_object("django.conf:settings", namespace="CELERY")
# One run at a time per worker process: CUDA and fork don't mix, and a run owns its device.
app.conf.worker_pool = "solo"
app.conf.worker_concurrency = 1
app.conf.imports = ("workers.tasks",)
app.conf.worker_hijack_root_logger = False

import workers.registry  # noqa: E402,F401  (worker_ready / shutdown signal handlers)
