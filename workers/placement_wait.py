"""A distributed run (``world_size > 1``) whose ranks the Ray cluster cannot place yet waits
visibly (``Run.waiting_for``: "waiting for 8 GPUs on the Ray cluster (4 free, 6 in all)"),
cancellably, and outside the wall-time limit (the trainer's clock starts after its ranks are up).

There is one wait: the trainer's own placement (``trainer.distributed.placement.placement_group``),
which on the platform runs under the waiter installed here instead of its CLI timeout. The
bundles it waits for are the ones the ranks take (one CPU per rank, and one GPU per rank when the
ranks run on GPUs: ``trainer.distributed.launcher.uses_gpu``). A run on a private local Ray (no
``RAY_ADDRESS``) does not wait: that Ray is started with exactly the run's ranks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from trainer.distributed import placement

logger = logging.getLogger("workers.placement_wait")


# The custom resources a rollout/train split's bundles ask for where the nodes advertise them
# (docker-compose.yml's ray-rollout / ray-train), and the ranks that take them: the placement's
# own table (trainer.distributed.placement imports nothing heavy at module level).
ROLE_RESOURCES = {resource: role for role, resource in placement.ROLE_RESOURCES.items()}


def waiting_text(need: dict[str, int], free: dict[str, float], total: dict[str, float]
                 ) -> str:
    """What the run waits for, in words; "" when every rank has its bundle. Every bundle takes
    one CPU (and one GPU on GPUs); a split's rollout and train ranks each take one of their
    role's resource too, which only their role's nodes have, so each role is counted apart."""
    for resource, role in ROLE_RESOURCES.items():
        have = math.floor(free.get(resource, 0.0))
        if resource in need and have < need[resource]:
            return (f"waiting for {need[resource]:,} GPUs for {role} ranks (nodes with "
                    f"{resource}) on the Ray cluster ({have:,} free, "
                    f"{math.floor(total.get(resource, 0.0)):,} in all)")
    key = "GPU" if "GPU" in need else "CPU"
    have = min(math.floor(free.get(k, 0.0)) for k in need if k not in ROLE_RESOURCES)
    if have >= need[key]:
        return ""
    return (f"waiting for {need[key]:,} {key}s on the Ray cluster ({have:,} free, "
            f"{math.floor(total.get(key, 0.0)):,} in all)")


@contextmanager
def visible_wait(should_stop: Callable[[], bool], report: Callable[[str], None]
                 ) -> Iterator[None]:
    """While inside, a placement that cannot be satisfied yet reports what it waits for on
    every change ("" once placed, or on the way out) and gives up when ``should_stop`` fires
    (the placement then raises ``StopRequested``); so does the ranks' start after it. Each
    phase of the start ("starting Ray", "starting 2 ranks (1 of 2 ready): rank 1 building the
    vLLM engine": ``trainer.phases``) is reported the same way, so the run's page says what
    the run is doing before its first step."""
    from trainer.distributed.placement import waiting_with
    from trainer.phases import reporting_phases

    said = ""

    def phase(text: str) -> None:
        nonlocal said
        if text != said:
            report(text)
            said = text

    def waiter(need: dict[str, int] | None) -> bool:
        nonlocal said
        text = ""
        if need is not None:
            import ray

            total = ray.cluster_resources()
            text = waiting_text(need, ray.available_resources(), total)
            if not text:  # enough is free but another placement took it first, or is placing
                key = "GPU" if "GPU" in need else "CPU"
                text = f"placing {need[key]:,} ranks on the Ray cluster"
        if text != said:
            report(text)
            said = text
            if text:
                logger.info("%s", text)
        return need is None or not should_stop()

    try:
        with waiting_with(waiter, should_stop), reporting_phases(phase):
            yield
    finally:
        if said:
            report("")
