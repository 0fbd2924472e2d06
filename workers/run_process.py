"""The child process that does one run's (or one preflight estimate's) work for a worker, so
that a crash of the work (OOM, a segfault in a native library) kills the child, not the worker:
``python -m workers.run_process RUN_ID LEASE_OWNER WORKER_PID`` (see ``workers.execution``), or
``python -m workers.run_process estimate ESTIMATE_ID LEASE_OWNER WORKER_PID``
(``workers.preflight``).

Exit status 0: the outcome is recorded (or the lease was lost and nothing more is to be
written). 75 (``EXIT_OUTAGE``): the database stayed unreachable past the recorder's retry
window; the worker waits for it and hands the run back, no attempt counted. Anything else, a
signal included, is a lost attempt for the worker to handle. After 0 or 75 the process ends at
once (``end_now``), without the interpreter's finalization.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from typing import NoReturn


def die_with(parent_pid: int) -> None:
    """SIGKILL this process when the worker that started it dies (Linux ``PR_SET_PDEATHSIG``;
    elsewhere a no-op), then check the worker did not die before that was set."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(3)


def main(argv: list[str]) -> int:
    kind, args = ("estimate", argv[2:]) if argv[1] == "estimate" else ("run", argv[1:])
    work_id, owner, parent = int(args[0]), args[1], int(args[2])
    die_with(parent)
    import workers.celery_app  # noqa: F401  (sys.path and django.setup(), as in the worker)

    if kind == "estimate":
        from workers.preflight import estimate_in_this_process

        estimate_in_this_process(work_id, owner)
    else:
        from workers.execution import (
            EXIT_OUTAGE,
            OUTAGE,
            on_sigterm_hand_back,
            run_in_this_process,
        )

        # The worker's clean shutdown: stop at the next poll and hand the run back.
        signal.signal(signal.SIGTERM, on_sigterm_hand_back)
        if run_in_this_process(work_id, owner) == OUTAGE:
            return EXIT_OUTAGE
    return 0


def end_now(code: int) -> NoReturn:
    """Exit with ``code`` once the outcome is recorded, skipping the interpreter's
    finalization: tearing down torch's, vLLM's and Django's modules took 2-10 s (measured on 2
    shared cores) while the worker waited to take its next run. What that would have done is
    done here or needs no doing: the database connections are closed and the logs flushed;
    the backend (engine, Ray, temporary weights) was closed by the run; the verifier's helper
    dies with this process (``PR_SET_PDEATHSIG``); file locks are the kernel's."""
    from django.db import connections

    connections.close_all()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    # An exception out of main ends the normal way (its traceback printed): a lost attempt.
    end_now(main(sys.argv))
