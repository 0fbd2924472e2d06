"""A rank's start, phase by phase: the phases each rank says as it begins them (``RANK_PHASES``,
then ``READY``), logged on the driver's ``StopFlag`` actor, and the driver's words for where the
ranks are (``start_text``: "starting 2 ranks (1 of 2 ready): rank 1 building the vLLM engine").

The rank actors (``actor``) say them and the launcher reads them: both import this module, which
imports neither (no Ray, no torch).
"""

from __future__ import annotations

from collections.abc import Sequence

# A rank's phases in the order it goes through them (``RankActor.start``, ``Rank.__init__``;
# no engine: no "building the vLLM engine"), each logged on the ``StopFlag`` actor as it
# begins; READY once started.
READY = "ready"
RANK_PHASES = ("starting up", "importing torch", "joining the process group",
               "loading the model", "building the vLLM engine", "sharding the policy")


def current_phases(world_size: int, log: Sequence[tuple[int, str]]) -> list[str]:
    """Each rank's latest phase in ``log`` ((rank, phase) in the order they began)."""
    phases = [RANK_PHASES[0]] * world_size
    for rank, phase in log:
        phases[rank] = phase
    return phases


# How often the driver reads the ranks' phases while they start.
PHASE_POLL_S = 1.0


def start_text(phases: Sequence[str]) -> str:
    """The ranks' start in words, from each rank's phase: "starting 2 ranks (0 of 2 ready):
    loading the model" while they are in step, "starting 2 ranks (1 of 2 ready): rank 1
    building the vLLM engine", "rank 0 loading the model, rank 1 importing torch" (the least
    advanced first); beyond 4 ranks, counted by phase ("5 loading the model, 3 building the
    vLLM engine")."""
    n = len(phases)
    waiting = [(i, p) for i, p in enumerate(phases) if p != READY]
    head = f"starting {n} ranks ({n - len(waiting)} of {n} ready)"
    if not waiting:
        return head
    if len(waiting) > 1 and len({p for _, p in waiting}) == 1:
        return f"{head}: {waiting[0][1]}"
    order = {p: k for k, p in enumerate(RANK_PHASES)}
    waiting.sort(key=lambda item: (order.get(item[1], len(order)), item[0]))
    if len(waiting) <= 4:
        return head + ": " + ", ".join(f"rank {i} {p}" for i, p in waiting)
    counts: dict[str, int] = {}
    for _, p in waiting:
        counts[p] = counts.get(p, 0) + 1
    return head + ": " + ", ".join(f"{c} {p}" for p, c in counts.items())
