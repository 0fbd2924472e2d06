"""Container health check of a worker: healthy while a worker process on this host publishes
itself in the registry (workers/registry.py). Celery's ``inspect ping`` cannot be used: a busy
``-P solo`` worker answers it only between runs.

    python -m workers.healthcheck     (exit status 0: healthy)
"""

from __future__ import annotations

import json
import os
import socket
import sys

import redis

KEY_PREFIX = "rada:workers:"  # webapp.celery.WORKER_REGISTRY_PREFIX (no Django set-up here)


def main() -> int:
    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"], socket_timeout=5)
    host = socket.gethostname()
    for key in client.scan_iter(f"{KEY_PREFIX}*"):
        raw = client.get(key)
        if raw and json.loads(raw).get("host") == host:
            return 0
    print(f"no live worker registered for host {host}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
