"""One process at a time: an exclusive ``flock`` on a lock file, held for a ``with`` block.

The built-in model's warm start (``trainer.warmstart.warmstart_atomic``: workers starting
together train it once) and the embedded servers' start-or-attach (``scripts/services.py``)
both take it. Standard library only, so that a set-up script can import it without the
trainer's dependencies.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created, with its folder, if missing; never
    truncated) until the block ends; another process taking it waits."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
