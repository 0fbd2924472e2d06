"""The child process that trains one run for a worker (see ``workers.execution``):
``python -m workers.run_process RUN_ID LEASE_OWNER WORKER_PID``.

Exit status 0: the run's outcome is recorded (or the lease was lost and nothing more is to be
written). Anything else, a signal included, is a lost attempt for the worker to count.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def die_with(parent_pid: int) -> None:
    """SIGKILL this process when the worker that started it dies (Linux ``PR_SET_PDEATHSIG``;
    elsewhere a no-op), then check the worker did not die before that was set."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(3)


def main(argv: list[str]) -> int:
    run_id, owner, parent = int(argv[1]), argv[2], int(argv[3])
    die_with(parent)
    import workers.celery_app  # noqa: F401  (sys.path and django.setup(), as in the worker)
    from workers.execution import run_in_this_process

    run_in_this_process(run_id, owner)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
