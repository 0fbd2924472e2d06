"""A distributed run (``world_size > 1``) on a shared Ray cluster (``RAY_ADDRESS``) waits here,
before its ranks are started, until the cluster has a bundle free for every rank: visibly
(``Run.waiting_for``: "waiting for 8 GPUs on the Ray cluster (4 free, 6 in all)"), cancellable,
and outside the wall-time limit (the trainer's clock starts after it).

A run on a private local Ray (no ``RAY_ADDRESS``) does not wait: that Ray is started with
exactly the run's ranks. The bundles counted are the ones ``trainer.distributed`` asks for: one
CPU per rank, and one GPU per rank when the ranks run on GPUs (``device = cuda``, or ``auto`` on
a cluster that has GPUs). Free bundles can still be taken by another run between this check and
the placement; the placement then waits for them in its turn.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

from trainer.config import TrainConfig

logger = logging.getLogger("workers.placement_wait")

POLL_SECONDS = 2.0


def ranks_need(config: TrainConfig, cluster: dict[str, float]) -> dict[str, int]:
    """Ray resources the run's ranks take: {"CPU": n} or {"CPU": n, "GPU": n}."""
    n = config.world_size
    gpu = config.device == "cuda" or (config.device == "auto" and cluster.get("GPU", 0) >= 1)
    return {"CPU": n, "GPU": n} if gpu else {"CPU": n}


def waiting_text(need: dict[str, int], free: dict[str, float], total: dict[str, float]
                 ) -> str:
    """What the run waits for, in words; "" when every rank has its bundle."""
    key = "GPU" if "GPU" in need else "CPU"
    have = min(math.floor(free.get(k, 0.0)) for k in need)
    if have >= need[key]:
        return ""
    return (f"waiting for {need[key]:,} {key}s on the Ray cluster ({have:,} free, "
            f"{math.floor(total.get(key, 0.0)):,} in all)")


def wait_for_ranks(config: TrainConfig, should_stop: Callable[[], bool],
                   report: Callable[[str], None], poll_seconds: float = POLL_SECONDS) -> bool:
    """Block until the cluster named by ``RAY_ADDRESS`` has the run's bundles free (True), or
    ``should_stop`` fires first (False). ``report`` gets the waiting text on every change
    ("" at the end). Returns True at once when there is nothing to wait for."""
    address = os.environ.get("RAY_ADDRESS", "")
    if config.world_size <= 1 or not address:
        return True
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": False}
    if address.split(":")[0] in ("127.0.0.1", "localhost"):
        # A cluster on this machine's loopback: the driver's node is that address too (Ray
        # otherwise takes the machine's outside address and finds no node there).
        kwargs["_node_ip_address"] = "127.0.0.1"
    ray.init(**kwargs)
    said = None
    try:
        while True:
            total = ray.cluster_resources()
            text = waiting_text(ranks_need(config, total), ray.available_resources(), total)
            if text != said:
                report(text)
                said = text
                if text:
                    logger.info("%s", text)
            if not text:
                return True
            if should_stop():
                return False
            time.sleep(poll_seconds)
    finally:
        # The trainer connects again for the run itself; this driver's session ends here.
        ray.shutdown()
        if said:
            report("")
