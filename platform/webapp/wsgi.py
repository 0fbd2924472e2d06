"""WSGI entry for gunicorn: `gunicorn --pythonpath platform webapp.wsgi`."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "platform"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
