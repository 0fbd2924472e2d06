"""What a run is doing before its first step, in words, for whoever shows it.

A run's start can take a while before any step: a 2-rank run on CPU spends 25-45 s starting
Ray, its rank processes, their models and vLLM engines; a 1-rank vLLM run 10-50 s building its
engine. The code doing the start says each phase as it begins (``say_phase``); the platform's
worker listens (``reporting_phases``) and shows it on the run's page as what the run waits for
(``Run.waiting_for``, the channel the wait for GPUs on a Ray cluster uses:
``workers.placement_wait``); the CLI prints it. Nothing listens by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Report = Callable[[str], None]
_report: Report | None = None


@contextmanager
def reporting_phases(report: Report) -> Iterator[None]:
    """While inside, every ``say_phase(text)`` calls ``report(text)``."""
    global _report
    before = _report
    _report = report
    try:
        yield
    finally:
        _report = before


def say_phase(text: str) -> None:
    """The start's current phase ("starting Ray (a private one for this run)", "placing 2
    ranks on the Ray cluster", "starting 2 ranks (1 of 2 ready): rank 1 building the vLLM
    engine"); "" when there is nothing more to say."""
    if _report is not None:
        _report(text)
