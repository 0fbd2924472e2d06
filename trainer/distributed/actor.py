"""The thin Ray actor around a ``Rank``, and the driver's stop flag the ranks read.

Everything a rank does is ``Rank``'s (``trainer.distributed.rank``); the actor only builds it
once the master address is known and forwards calls. A ``StopRequested`` inside a rank comes
back as a value, so that the driver re-raises it as itself (a Ray task error would wrap it).

A rank's calls run one at a time, in the order the driver made them (Ray's default group of
one thread), except ``call_transfer``: a concurrency group of its own, one more thread, so
that a rollout rank receives a staged push (``Rank.receive_staged``) while its main thread
generates.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from trainer.distributed.rank_phases import READY


@ray.remote(num_cpus=0)
class StopFlag:
    """The driver's cancel, read by every rank before each mini-batch; and each rank's phase
    while the ranks start, read by the driver to say what the run waits for (one actor for
    both: every actor is a process of its own)."""

    def __init__(self) -> None:
        self.value = False
        self.log: list[tuple[int, str]] = []  # (rank, phase), as each phase began

    def set_phase(self, rank: int, phase: str) -> None:
        self.log.append((rank, phase))

    def phases(self) -> list[tuple[int, str]]:
        return list(self.log)

    def set(self) -> None:
        self.value = True

    def clear(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        return self.value


@ray.remote(concurrency_groups={"transfer": 1})
class RankActor:
    def __init__(self) -> None:
        self.rank: Any = None

    def address(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0's become the rendezvous)."""
        ip, ports = self.rendezvous(1)
        return ip, ports[0]

    def rendezvous(self, count: int) -> tuple[str, list[int]]:
        """This node's address and ``count`` distinct free ports on it: a process group's
        rendezvous (rank 0's; rank T's for the rollout ranks) and the weight transfer's."""
        from trainer.distributed.placement import free_ports

        ip = ray.util.get_node_ip_address()
        return ip, free_ports(ip, count)

    def where(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "ip": ray.util.get_node_ip_address()}

    def start(self, config: dict[str, Any], rank: int, world_size: int, master_addr: str,
              master_port: int, stop_flag: Any, engine: bool = True,
              transfer: tuple[str, int] | None = None) -> dict[str, float]:
        def phase(text: str) -> None:
            stop_flag.set_phase.remote(rank, text)

        phase("importing torch")
        import torch

        from trainer.distributed.rank import Rank

        # Ray gives an actor one thread (OMP_NUM_THREADS=1); a CPU rank gets its bundle's CPU.
        torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources()
                                         .get("CPU", 1))))
        self.rank = Rank(config, rank=rank, world_size=world_size, master_addr=master_addr,
                         master_port=master_port, engine=engine, transfer=transfer,
                         should_stop=lambda: ray.get(stop_flag.is_set.remote()),
                         on_phase=phase)
        # Waited for: the calls of one caller run in order, so once the start returns the
        # driver reads every phase of it.
        ray.get(stop_flag.set_phase.remote(rank, READY))
        return dict(self.rank.seconds)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from trainer.types import StopRequested

        try:
            return getattr(self.rank, method)(*args, **kwargs)
        except StopRequested as exc:
            return StoppedCall(exc.where, exc.clean)

    @ray.method(concurrency_group="transfer")
    def call_transfer(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``call`` on the transfer thread, beside whatever the main thread runs."""
        return self.call(method, *args, **kwargs)

    def peak_memory(self) -> dict[str, float]:
        """This process's peak resident memory and, on a GPU, its peak allocation (MiB)."""
        import resource

        import torch

        out = {"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        if torch.cuda.is_available():
            out["gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
        return out

    def close(self) -> None:
        if self.rank is not None:
            self.rank.close()
            self.rank = None


class StoppedCall:
    """A rank's call that stopped on the driver's request (``StopRequested`` as a value)."""

    def __init__(self, where: str, clean: bool) -> None:
        self.where, self.clean = where, clean
