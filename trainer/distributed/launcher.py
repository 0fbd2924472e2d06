"""Start a run's ranks on Ray and take them down: the placement group, one ``RankActor`` per
bundle, the rendezvous (rank 0's node and a free port there), calls to every rank, and the
teardown when the run ends or a rank dies.

With ``rollout_ranks`` = R > 0 the ranks split (``placement.rank_roles``): ranks [0, T) train
and form their own process group (rendezvous on rank 0), ranks [T, world_size) generate and
form theirs (on rank T: their engines' external launcher needs one), and train rank 0 with the
rollout ranks form a third group that carries the weights after each update (a store on rank
0's node). ``train`` and ``rollout`` list the ranks each kind of call goes to."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from trainer.config import TrainConfig
from trainer.distributed.rank_phases import PHASE_POLL_S, current_phases, start_text
from trainer.errors import Wrapped
from trainer.types import StopRequested

# A rank that does not finish starting (torch import, model load, engine build) in this long is
# reported as stuck rather than waited on for ever.
START_TIMEOUT_S = 900.0


class RankFailed(Wrapped):
    """A rank died or raised; every rank has been torn down. Its text leads with where
    ("rank 1 of 2 failed in begin_run; every rank was stopped") and ends with the rank's own
    reason in plain text (``trainer.errors.reason`` puts the reason first)."""


def uses_gpu(config: TrainConfig, cluster_gpus: float | None) -> bool:
    """Ranks on GPUs: ``device = cuda``, or ``auto`` where there are GPUs (the cluster's, or
    this machine's for a private local Ray)."""
    if config.device == "cpu":
        return False
    if config.device == "cuda":
        return True
    if cluster_gpus is not None:
        return cluster_gpus >= 1
    import torch

    return torch.cuda.is_available()


class RankGroup:
    """``config.world_size`` ranks on Ray, started and ready (engines built unless
    ``engine=False``). ``seconds`` holds how long connecting, placing and starting took;
    ``start_log`` each rank's phases, (rank, phase) in the order they began. Each phase of
    the start is said as it begins (``trainer.phases.say_phase``: the run's page shows it)."""

    def __init__(self, config: TrainConfig, *, engine: bool = True) -> None:
        import os

        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from trainer.distributed.actor import RankActor, StopFlag
        from trainer.distributed.placement import (
            ROLLOUT,
            TRAIN,
            connect,
            placement_group,
            rank_roles,
            stop_wanted,
        )
        from trainer.phases import say_phase

        t0 = time.perf_counter()
        n = config.world_size
        remote = bool(os.environ.get("RAY_ADDRESS"))
        self.cluster = None
        self.pg = None
        self.actors: list[Any] = []
        self.seconds: dict[str, float] = {}
        self.trained = False  # an update ran on these ranks (a later run starts them afresh)
        self.start_log: list[tuple[int, str]] = []
        self._stopping = threading.Lock()  # the engine thread's calls may fail at once too
        # Which ranks train and which generate (both: every rank, when colocated).
        self.roles = rank_roles(n, config.rollout_ranks)
        self.train = [i for i, r in enumerate(self.roles) if r != ROLLOUT]
        self.rollout = [i for i, r in enumerate(self.roles) if r != TRAIN]
        try:
            gpu = uses_gpu(config, None) if not remote else None
            say_phase(f"connecting to the Ray cluster at {os.environ['RAY_ADDRESS']}" if remote
                      else "starting Ray (a private one for this run)")
            self.cluster = connect(n, bool(gpu))
            if gpu is None:
                gpu = uses_gpu(config, ray.cluster_resources().get("GPU", 0.0))
            self.gpu = gpu
            self.seconds["ray_connect"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            say_phase(f"placing {n} ranks on the Ray cluster")
            self.pg = placement_group(self.roles, gpu)
            self.seconds["placement"] = time.perf_counter() - t1
            self.stop_flag = StopFlag.remote()
            say_phase(start_text(current_phases(n, [])))
            self.actors = [RankActor.options(
                num_cpus=1, num_gpus=1 if gpu else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.pg, placement_group_bundle_index=i)).remote() for i in range(n)]
            t2 = time.perf_counter()
            # A cancel while the ranks start abandons them (stop_wanted): nothing trained yet.
            masters, transfer = self._rendezvous()
            # The ranks run on the device their bundle gave them.
            rank_config = dataclasses.replace(config, device="cuda" if gpu else "cpu")
            said = [""]

            def say_rank_phases() -> None:
                try:
                    self.start_log = ray.get(self.stop_flag.phases.remote(), timeout=10)
                except Exception:  # noqa: BLE001 - words for the page; a dead rank is seen
                    return         # where its own call fails, not here
                text = start_text(current_phases(n, self.start_log))
                if text != said[0]:
                    say_phase(text)
                    said[0] = text

            started = self._get([a.start.remote(rank_config.to_dict(), i, n, *masters[i],
                                                self.stop_flag, engine, transfer)
                                 for i, a in enumerate(self.actors)], timeout=START_TIMEOUT_S,
                                abandon_if=stop_wanted, what="start",
                                every_poll=(PHASE_POLL_S, say_rank_phases))
            say_rank_phases()
            self.seconds["ranks_start"] = time.perf_counter() - t2
            self.seconds["engine_build"] = max(s.get("engine_build", 0.0) for s in started)
        except BaseException:
            self.stop()
            raise

    def _rendezvous(self) -> tuple[list[tuple[str, int]], tuple[str, int] | None]:
        """Each rank's process group rendezvous (address, port) and, split, the weight
        transfer's (train rank 0's node)."""
        from trainer.distributed.placement import stop_wanted

        n = len(self.actors)
        if self.train == self.rollout:  # colocated: one group of every rank, on rank 0
            (addr, ports), = self._get([self.actors[0].rendezvous.remote(1)],
                                       timeout=START_TIMEOUT_S, abandon_if=stop_wanted,
                                       what="address")
            return [(addr, ports[0])] * n, None
        first = self.rollout[0]
        (addr, ports), (roll_addr, roll_ports) = self._get(
            [self.actors[0].rendezvous.remote(2), self.actors[first].rendezvous.remote(1)],
            timeout=START_TIMEOUT_S, abandon_if=stop_wanted, what="address", on=[0, first])
        masters = [(addr, ports[0]) if i in self.train else (roll_addr, roll_ports[0])
                   for i in range(n)]
        return masters, (addr, ports[1])

    # --- calls ---------------------------------------------------------------------------------
    def _get(self, refs: Sequence[Any], *, timeout: float | None = None,
             should_stop: Callable[[], bool] | None = None,
             abandon_if: Callable[[], bool] | None = None, what: str = "a call",
             every_poll: tuple[float, Callable[[], None]] | None = None,
             on: Sequence[int] | None = None) -> list[Any]:
        """The results of ``refs`` (one per rank of ``on``, every rank by default, in rank
        order; ``what`` names the call for an error); the driver's ``should_stop`` is relayed
        to the ranks while they run. A rank that died or raised tears every rank down
        (``RankFailed``). ``abandon_if`` (for calls that change no state, like the ranks'
        start) kills the ranks at once when it fires, without waiting for the calls, and raises
        ``StopRequested``. ``every_poll`` (seconds, f) calls f at most that often while calls
        are pending (the start's phases)."""
        import ray

        from trainer.distributed.actor import StoppedCall

        deadline = None if timeout is None else time.monotonic() + timeout
        n = len(self.actors)
        flagged = False
        pending = list(refs)
        failed = "a rank"
        polled = time.monotonic()
        try:
            while pending:
                # One at a time: a rank that failed is seen at once, not after the others
                # (which may be waiting for it in a collective for ever).
                done, pending = ray.wait(pending, num_returns=1, timeout=0.2)
                if done:
                    where = refs.index(done[0])
                    failed = f"rank {on[where] if on is not None else where} of {n}"
                    ray.get(done)
                    failed = "a rank"
                if pending and abandon_if is not None and abandon_if():
                    self.stop(close=False)
                    raise StopRequested("the ranks' start", clean=True)
                if every_poll is not None and pending and \
                        time.monotonic() - polled >= every_poll[0]:
                    every_poll[1]()
                    polled = time.monotonic()
                if not flagged and should_stop is not None and pending and should_stop():
                    self.stop_flag.set.remote()
                    flagged = True
                if deadline is not None and time.monotonic() > deadline and pending:
                    raise TimeoutError(f"{len(pending)} of {len(refs)} ranks did not answer "
                                       f"within {timeout:.0f} s")
            results = ray.get(list(refs))
        except (ray.exceptions.RayError, TimeoutError) as exc:
            self.stop()
            raise RankFailed(f"{failed} failed in {what}; every rank was stopped", exc) from exc
        if flagged:
            self.stop_flag.clear.remote()
        stopped = [r for r in results if isinstance(r, StoppedCall)]
        if stopped:
            raise StopRequested(stopped[0].where, clean=all(s.clean for s in stopped))
        return results

    def call_all(self, method: str, *args: Any,
                 should_stop: Callable[[], bool] | None = None,
                 on: Sequence[int] | None = None, **kwargs: Any) -> list[Any]:
        """``method(*args, **kwargs)`` on every rank of ``on`` (every rank by default) at once
        (the collective calls: update, sync, save, load), one result per rank."""
        ranks = range(len(self.actors)) if on is None else on
        return self._get([self.actors[i].call.remote(method, *args, **kwargs) for i in ranks],
                         should_stop=should_stop, what=method, on=on)

    def call_each(self, method: str, per_rank: Sequence[tuple[tuple[Any, ...], dict[str, Any]]],
                  on: Sequence[int] | None = None) -> list[Any]:
        """``method`` on the k-th rank of ``on`` (every rank by default) with ``per_rank[k]``'s
        (args, kwargs), all at once."""
        ranks = range(len(self.actors)) if on is None else on
        return self._get([self.actors[i].call.remote(method, *args, **kwargs)
                          for i, (args, kwargs) in zip(ranks, per_rank, strict=True)],
                         what=method, on=on)

    def submit(self, method: str, *args: Any, on: Sequence[int], transfer: bool = False,
               **kwargs: Any) -> list[Any]:
        """``method`` on every rank of ``on`` without waiting: the calls' refs, for ``wait``.
        ``transfer``: on each rank's transfer thread (``RankActor.call_transfer``), beside
        the call its main thread runs."""
        return [(self.actors[i].call_transfer if transfer else self.actors[i].call).remote(
            method, *args, **kwargs) for i in on]

    def wait(self, refs: Sequence[Any], *, what: str, on: Sequence[int]) -> list[Any]:
        """The results of ``submit``'s calls (a failed rank tears every rank down, as
        ``call_all``)."""
        return self._get(refs, what=what, on=on)

    def where(self) -> list[dict[str, Any]]:
        """Each rank's Ray node and PID."""
        return self._get([a.where.remote() for a in self.actors], what="where")

    def peak_memory(self) -> list[dict[str, float]]:
        return self._get([a.peak_memory.remote() for a in self.actors], what="peak_memory")

    # --- teardown ------------------------------------------------------------------------------
    def stop(self, *, close: bool = True) -> None:
        """Close every engine and process group, kill the actors, free the placement group and
        leave Ray (stopping it when it is this run's own). Safe to call twice. ``close=False``
        kills the actors without closing first (a rank busy starting would only take the close
        after its start). The engine thread's call and the update's may both fail at once and
        stop together: one of them does it."""
        with self._stopping:
            self._stop(close)

    def _stop(self, close: bool) -> None:
        import ray

        if self.actors:
            refs = [a.close.remote() for a in self.actors] if close else []
            try:
                if refs:
                    ray.wait(refs, num_returns=len(refs), timeout=30)
            except Exception:  # noqa: BLE001 - a dead actor has nothing left to close
                pass
            for actor in self.actors:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            self.actors = []
        if self.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001 - the cluster may be gone already
                pass
            self.pg = None
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
