"""Backend hooks for the lifecycle tests (``RADA_BACKEND_HOOK``), applied inside worker
processes: they wrap the real backend that the real training loop drives.

- ``RADA_TEST_GENERATE_SLEEP`` (seconds): sleep before every generate call, so that a test can
  cancel, kill or redeliver while a run is mid-way;
- prompt metadata ``fail_after_calls: k``: the (k+1)-th generate call raises;
- prompt metadata ``kill_self_at_call: k``: the k-th generate call SIGKILLs its own process (a
  run that kills whatever executes it: out of memory, a segfault in a native library);
- ``RADA_TEST_CALL_LOG`` (a path): one line per generate call (``greedy`` or ``sample``), so a
  test can count the calls an execution made.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import Any


class PacedBackend:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = inner.model
        self.tokenizer = inner.tokenizer
        self.calls = 0
        self.sleep = float(os.environ.get("RADA_TEST_GENERATE_SLEEP", "0"))

    def generate(self, prompts: Sequence[Any], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> Any:
        self.calls += 1
        limit = prompts[0].metadata.get("fail_after_calls") if prompts else None
        if limit is not None and self.calls > int(limit):
            raise RuntimeError(f"injected failure at generate call {self.calls}")
        kill_at = prompts[0].metadata.get("kill_self_at_call") if prompts else None
        if kill_at is not None and self.calls >= int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        log = os.environ.get("RADA_TEST_CALL_LOG")
        if log:
            with open(log, "a") as fh:
                fh.write("greedy\n" if greedy else "sample\n")
        if self.sleep:
            time.sleep(self.sleep)
        return self.inner.generate(prompts, counts, seed=seed, greedy=greedy)

    def sync_weights(self) -> None:
        self.inner.sync_weights()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def paced(backend: Any, config: Any) -> PacedBackend:
    return PacedBackend(backend)
