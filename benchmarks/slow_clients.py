"""Slow clients against the web tier (issue 32, item 1): gunicorn alone, as docker-compose.yml ran
it before the proxy, and gunicorn behind nginx with the repository's config, as it runs now.
Connections from 127.0.0.1 send a request's header, or a sign-in form's body, one byte every
--every seconds while /healthz is probed every half second from 127.0.0.2; it reports how many
probes were answered (a probe gets 5 s), the slowest answer, and how the slow connections
ended. It measures and asserts nothing
(tests/platform/test_proxy.py asserts).

    python scripts/services.py exec --instance bench -- python benchmarks/slow_clients.py \\
        --clients 8,24,48 --every 5 --seconds 30

gunicorn runs as compose runs it (3 workers of 4 threads, webapp.settings_production) against
the servers in the environment; nginx is Debian's (scripts/ensure_nginx.sh), with compose's
values for everything but ports and folders. Figures: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.proxy import (  # noqa: E402
    ROOT,
    Server,
    SlowClients,
    nginx_path,
    probe,
    probes_during,
    start_gunicorn,
    start_nginx,
)


def attack(port: int, clients: int, body: bool, every: float, seconds: float) -> str:
    probe(port, timeout=30)  # the workers have booted
    slow = SlowClients(port, header=0 if body else clients, body=clients if body else 0,
                       every=every).start()
    time.sleep(min(2.0, every))  # every connection open and dribbling
    try:
        # From another address than the slow clients': a health check, another user.
        answers = list(probes_during(port, seconds, every=0.5, timeout=5.0, source="127.0.0.2"))
    finally:
        slow.stop()
    ok = [t for status, t in answers if status == 200]
    slowest = f"{max(t for _, t in answers):.2f} s" if answers else "-"
    refused = sum(1 for a in slow.answers if a.startswith(b"HTTP/1.1 429"))
    return (f"{len(ok)} of {len(answers)} probes answered 200, slowest {slowest}; of the slow "
            f"connections {slow.closed_by_server} closed by the server ({refused} with 429)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="8,24,48")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between two bytes")
    parser.add_argument("--seconds", type=float, default=30.0, help="probing time per case")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("run it under scripts/services.py exec (DATABASE_URL, CELERY_BROKER_URL)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings_production",
           "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "localhost",
           "PYTHONUNBUFFERED": "1"}
    env.pop("DEBUG", None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        web = start_gunicorn(env, folder, threads=4, workers=3)
        proxy: Server | None = None
        try:
            if nginx_path():
                proxy = start_nginx(web.port, folder, ROOT / "static")
            else:
                print("nginx is not installed (scripts/ensure_nginx.sh): gunicorn alone only")
            for n in (int(x) for x in args.clients.split(",")):
                for body in (False, True):
                    kind = "bodies" if body else "headers"
                    what = f"{n} slow {kind}, a byte every {args.every:g} s"
                    print(f"gunicorn alone, {what}: "
                          f"{attack(web.port, n, body, args.every, args.seconds)}", flush=True)
                    if proxy is not None:
                        print(f"nginx + gunicorn, {what}: "
                              f"{attack(proxy.port, n, body, args.every, args.seconds)}",
                              flush=True)
        finally:
            if proxy is not None:
                proxy.stop()
            web.stop()


if __name__ == "__main__":
    main()
