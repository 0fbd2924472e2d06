"""Live workers, for ``/healthz``, and the sweep that re-enqueues runs of dead workers.

A busy ``-P solo`` worker cannot answer Celery's broadcast pings until its run ends, so each
worker process publishes itself from a thread instead: a Redis key ``rada:workers:<hostname>``
with its queues, refreshed every ``REGISTRY_INTERVAL`` seconds and expiring after three missed
refreshes. The same thread is the run sweep: once per lease period
(``RUN_LEASE_TIMEOUT_SECONDS``) it re-enqueues the runs of its queues whose lease went stale (the
worker that held it died) and the queued runs the broker never took (a launch while it was
down), and every queued run at the worker's start and after a broker restart (Redis's
``run_id`` changed: messages of a broker without persistence are gone). A timer in each worker
rather than Celery beat: beat is one more process to deploy and keep single, and a sweep where
the workers are needs nothing else to be up; duplicate messages are harmless (the lease).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import threading
import time
from typing import Any

import redis
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
from django.conf import settings
from django.db import connection
from webapp.celery import WORKER_REGISTRY_PREFIX

logger = logging.getLogger("workers.registry")

KEY_PREFIX = WORKER_REGISTRY_PREFIX
REGISTRY_INTERVAL = float(os.environ.get("RADA_WORKER_REGISTRY_INTERVAL", 5))

_state: dict[str, Any] = {}


def broker() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)


def _consumed_queues(sender: Any) -> list[str]:
    try:
        return sorted(q.name for q in sender.task_consumer.queues)
    except AttributeError:
        return sorted(sender.app.amqp.queues.consume_from or ["cpu"])


class RegistryThread(threading.Thread):
    def __init__(self, hostname: str, queues: list[str]) -> None:
        super().__init__(name="worker-registry", daemon=True)
        self.hostname, self.queues = hostname, queues
        self.stopping = threading.Event()
        self.key = f"{KEY_PREFIX}{hostname}"
        self.info = {"hostname": hostname, "queues": queues, "pid": os.getpid(),
                     "host": socket.gethostname(),
                     # What `platform` resolves to in a worker (tests check it is the stdlib).
                     "platform_system": platform.system(),
                     "platform_module": getattr(platform, "__file__", "")}

    def run(self) -> None:
        last_sweep = 0.0
        first = True
        broker_id = None
        while not self.stopping.is_set():
            try:
                client = broker()
                client.set(self.key, json.dumps(self.info), ex=max(int(REGISTRY_INTERVAL * 3), 3))
                restarted = broker_id is not None and client.info("server")["run_id"] != broker_id
                broker_id = client.info("server")["run_id"]
                now = time.monotonic()
                if first or restarted or now - last_sweep >= settings.RUN_LEASE_TIMEOUT_SECONDS:
                    from experiments.services import requeue_orphaned_runs

                    ids = requeue_orphaned_runs(self.queues, include_queued=first or restarted)
                    if ids:
                        logger.info("re-enqueued runs %s%s", ids,
                                    " (the broker restarted)" if restarted else "")
                    last_sweep, first = now, False
            except Exception:  # keep publishing through broker or database blips
                logger.exception("worker registry")
            finally:
                connection.close()
            self.stopping.wait(REGISTRY_INTERVAL)

    def stop(self) -> None:
        self.stopping.set()
        try:
            broker().delete(self.key)
        except redis.RedisError:
            pass


@worker_ready.connect
def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    hostname = getattr(sender, "hostname", None) or socket.gethostname()
    thread = RegistryThread(hostname, _consumed_queues(sender))
    thread.start()
    _state["thread"] = thread


@worker_shutdown.connect
def _on_worker_shutdown(**_: Any) -> None:
    thread = _state.pop("thread", None)
    if thread is not None:
        thread.stop()


@worker_shutting_down.connect
def _on_worker_shutting_down(**_: Any) -> None:
    # A clean shutdown (SIGTERM) hands the running run back instead of waiting hours for it:
    # its process stops at the next poll, keeps its checkpoint and re-queues the run.
    from workers.execution import hand_back_child

    hand_back_child()
