"""Where a distributed run's ranks go: the Ray cluster ``RAY_ADDRESS`` names, or a private local
Ray started for this run alone, and a placement group of ``world_size`` bundles on it (one GPU
each on GPUs, one CPU each on CPU), one per rank in rank order, each asking for its role's
resources (``rank_roles``, ``bundle_resources``).

A private Ray is started as ``ray start --head --block`` in a session of its own, and a reaper
process (``python -m trainer.distributed.placement reap ...``, in yet another session) watches
the driver: Ray's agents re-parent to PID 1 and ignore SIGTERM once a driver that called
``ray.init()`` is SIGKILLed (measured), so when the driver dies, however it dies, the reaper
kills every process of the Ray session (SIGKILL: ``kill_session``). ``ray stop`` is never used:
it stops every Ray on the machine, other runs' included.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Not trainer.model's: the reaper must start without importing torch.
REPO_ROOT = Path(__file__).resolve().parents[2]
# Ray's files (sessions, sockets, logs) under the repository's var/, not /tmp/ray and ~/.ray;
# short, because a Unix socket path holds at most 107 bytes.
RAY_TEMP_ROOT = REPO_ROOT / "var" / "ray"
LOCAL_IP = "127.0.0.1"
# How long a run waits for its bundles before saying the cluster is too small, unless a waiter
# is installed (``waiting_with``): the platform's runs wait visibly and cancellably instead.
PLACEMENT_TIMEOUT_S = 120.0
PLACEMENT_POLL_S = 2.0

# Called while the placement group waits, with the resources the ranks need in all
# ({"CPU": n[, "GPU": n][, "rada_rollout": r][, "rada_train": t]}); it returns False to give
# up (the run was cancelled), and is called once more with None when the group is placed after
# a wait.
Waiter = Callable[[dict[str, int] | None], bool]
_waiter: Waiter | None = None
# Polled while the ranks start after their placement (torch, the model, the engine: minutes for
# a large model): True abandons the start (the run was cancelled, or its worker shuts down).
_should_stop: Callable[[], bool] | None = None


@contextmanager
def waiting_with(waiter: Waiter, should_stop: Callable[[], bool] | None = None
                 ) -> Iterator[None]:
    """While inside, ``placement_group`` waits as long as ``waiter`` says (no timeout), and
    the ranks' start is abandoned as soon as ``should_stop`` says so (``stop_wanted``)."""
    global _waiter, _should_stop
    before = _waiter, _should_stop
    _waiter, _should_stop = waiter, should_stop
    try:
        yield
    finally:
        _waiter, _should_stop = before


def stop_wanted() -> bool:
    """Whether the installed ``should_stop`` asks to abandon the ranks' start."""
    return _should_stop is not None and _should_stop()


def ray_environment(local: bool) -> dict[str, str]:
    """Variables the driver, Ray and the ranks need: no usage report to Ray's servers, the
    repository importable in every worker, and on a private local Ray vLLM's own address
    (it otherwise probes an outside address to learn it)."""
    env = {"RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT),
                                                     os.environ.get("PYTHONPATH", "")) if p)}
    if local:
        env["VLLM_HOST_IP"] = LOCAL_IP
    return env


def free_port(host: str = LOCAL_IP) -> int:
    return free_ports(host, 1)[0]


def free_ports(host: str = LOCAL_IP, count: int = 1) -> list[int]:
    """``count`` distinct free ports of this machine, ``host`` (held open together while they
    are chosen, so that no two are the same). Free on every address, not ``host``'s alone: the
    process groups' stores listen on all of them, so a port another process listens on at
    another address (127.0.0.1 beside the node's address) failed a rank's start with
    EADDRINUSE."""
    del host  # the caller runs on the machine it names; the wildcard covers its addresses
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


# What each rank does (``rollout_ranks``): "train+rollout" (colocated: a shard and an engine),
# "train" (a shard and the optimiser, no engine), "rollout" (an engine, no shard).
COLOCATED, TRAIN, ROLLOUT = "train+rollout", "train", "rollout"
# The custom Ray resources a cluster advertises on the nodes meant for each role (a node started
# with ``ray start --resources '{"rada_rollout": N}'`` hosts up to N rollout ranks).
ROLE_RESOURCES = {ROLLOUT: "rada_rollout", TRAIN: "rada_train"}


def rank_roles(world_size: int, rollout_ranks: int) -> list[str]:
    """Each rank's role: all colocated when ``rollout_ranks`` is 0; else ranks [0, T) train and
    [T, world_size) generate, T = world_size - rollout_ranks (train rank 0 is rank 0, which
    writes the checkpoints)."""
    if rollout_ranks <= 0:
        return [COLOCATED] * world_size
    if rollout_ranks >= world_size:
        raise ValueError(f"rollout_ranks {rollout_ranks} leaves no rank of {world_size} to train")
    return [TRAIN] * (world_size - rollout_ranks) + [ROLLOUT] * rollout_ranks


def bundle_resources(role: str, use_gpu: bool, cluster_resources: dict[str, float]
                     ) -> dict[str, float]:
    """One rank's bundle: a CPU (and a GPU on GPUs), plus one unit of its role's custom resource
    (``ROLE_RESOURCES``) when the cluster advertises that resource on some node, so that rollout
    ranks land on the nodes labelled for rollout and train ranks on those for training. Each
    label is taken on its own: a cluster that labels only its rollout nodes keeps them for
    rollout ranks and lets train ranks go anywhere; one that labels neither places as if there
    were no roles. Colocated ranks ask for neither."""
    bundle: dict[str, float] = {"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}
    label = ROLE_RESOURCES.get(role)
    if label is not None and cluster_resources.get(label, 0.0) > 0:
        bundle[label] = 1
    return bundle


@dataclass
class LocalRay:
    """A private single-node Ray for one run: its ``ray start --block`` process (a session
    leader), the reaper watching the driver, and the address to connect to."""

    address: str
    head: subprocess.Popen[bytes]
    reaper: subprocess.Popen[bytes]
    temp_dir: Path
    log: Path = field(default_factory=Path)

    @classmethod
    def start(cls, num_cpus: int, num_gpus: int = 0) -> LocalRay:
        RAY_TEMP_ROOT.mkdir(parents=True, exist_ok=True)
        port = free_port()
        env = {**os.environ, **ray_environment(local=True)}
        ray_cli = Path(sys.executable).with_name("ray")
        log = RAY_TEMP_ROOT / f"head-{os.getpid()}-{port}.log"
        cmd = [str(ray_cli), "start", "--head", "--block", f"--node-ip-address={LOCAL_IP}",
               f"--port={port}", f"--temp-dir={RAY_TEMP_ROOT}", "--include-dashboard=false",
               "--disable-usage-stats", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}"]
        with open(log, "wb") as out:
            head = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        reaper = subprocess.Popen(
            [sys.executable, "-m", "trainer.distributed.placement", "reap", str(os.getpid()),
             str(head.pid)], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        local = cls(address=f"{LOCAL_IP}:{port}", head=head, reaper=reaper,
                    temp_dir=RAY_TEMP_ROOT, log=log)
        local._wait_ready(port)
        return local

    def _wait_ready(self, port: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.head.poll() is not None:
                self.stop()
                raise RuntimeError(f"the local Ray head exited ({self.head.returncode}); its "
                                   f"log: {self.log}")
            try:
                with socket.create_connection((LOCAL_IP, port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the local Ray head did not listen on port {port} within "
                           f"{timeout:.0f} s; its log: {self.log}")

    def processes(self) -> list[int]:
        """Every process of this Ray: the head's tree and its session (agents that
        re-parented to PID 1 stay in the session)."""
        return session_processes(self.head.pid)

    def stop(self) -> None:
        """Stop this Ray and every process it started; the reaper then exits."""
        kill_session(self.head.pid)
        for proc in (self.head, self.reaper):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def session_processes(leader: int) -> list[int]:
    """PIDs of ``leader``'s process tree and of every process in its session."""
    import psutil

    pids: set[int] = set()
    try:
        pids.update(p.pid for p in psutil.Process(leader).children(recursive=True))
        pids.add(leader)
    except psutil.NoSuchProcess:
        pass
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == leader:
                pids.add(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
    pids.discard(os.getpid())
    return sorted(pids)


def kill_session(leader: int, grace: float = 0.0) -> None:
    """SIGKILL every process of ``leader``'s session and tree, then those started meanwhile
    (a worker the raylet was spawning), and wait for them. With ``grace`` > 0, SIGTERM first
    and that many seconds to act on it. No grace by default: a private Ray's processes ignore
    SIGTERM or outlast any grace worth waiting (measured: 8 of its 9 processes alive 3 s after
    one, so the 3 s it had were spent on every stop), and nothing of it needs flushing (its
    object store is memory; its session folder holds logs)."""
    import psutil

    def signal_all(pids: list[int], sig: signal.Signals) -> list[psutil.Process]:
        procs = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                proc.send_signal(sig)
                procs.append(proc)
            except psutil.NoSuchProcess:
                continue
        return procs

    procs = signal_all(session_processes(leader), signal.SIGTERM if grace > 0 else
                       signal.SIGKILL)
    if grace > 0:
        _, alive = psutil.wait_procs(procs, timeout=grace)
        procs = signal_all([p.pid for p in alive], signal.SIGKILL)
    # Processes started while we were killing (a worker the raylet was spawning).
    late = signal_all(session_processes(leader), signal.SIGKILL)
    psutil.wait_procs([*procs, *late], timeout=10)


def reap(driver: int, leader: int, interval: float = 0.5) -> None:
    """The reaper's loop: once ``driver`` is gone (or ``leader`` stopped), kill ``leader``'s
    session and exit."""
    import psutil

    try:
        born = psutil.Process(driver).create_time()
    except psutil.NoSuchProcess:
        born = None
    while True:
        try:
            alive = born is not None and psutil.Process(driver).create_time() == born
        except psutil.NoSuchProcess:
            alive = False
        if not alive or not psutil.pid_exists(leader):
            break
        time.sleep(interval)
    kill_session(leader)


@dataclass
class Cluster:
    """The Ray the run is connected to; ``local`` is set when it is this run's own."""

    address: str
    local: LocalRay | None

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.local is not None:
            self.local.stop()


def connect(world_size: int, use_gpu: bool) -> Cluster:
    """``ray.init`` on ``RAY_ADDRESS``, or on a private local Ray of ``world_size`` CPUs (and
    GPUs) started for this run."""
    import ray

    address = os.environ.get("RAY_ADDRESS", "")
    local = None
    if not address:
        gpus = world_size if use_gpu else 0
        local = LocalRay.start(num_cpus=world_size, num_gpus=gpus)
        address = local.address
    env = ray_environment(local=local is not None)
    os.environ.update({k: v for k, v in env.items() if k != "PYTHONPATH"})
    try:
        kwargs: dict[str, Any] = {"address": address, "log_to_driver": False,
                                  "runtime_env": {"env_vars": env}}
        if local is not None:
            kwargs["_node_ip_address"] = LOCAL_IP
        ray.init(**kwargs)
    except Exception:
        if local is not None:
            local.stop()
        raise
    return Cluster(address=address, local=local)


def placement_group(roles: Sequence[str], use_gpu: bool, timeout: float = PLACEMENT_TIMEOUT_S
                    ) -> Any:
    """A placement group of one bundle per rank (``roles``, in rank order; each
    ``bundle_resources``), packed onto as few nodes as fit. Without a waiter it fails with what
    the cluster has when it cannot be placed in ``timeout`` seconds; with one (``waiting_with``)
    it waits until placed, or raises ``StopRequested`` when the waiter gives up."""
    import ray
    from ray.util.placement_group import placement_group as make
    from ray.util.placement_group import remove_placement_group

    from trainer.types import StopRequested

    world_size = len(roles)
    cluster = ray.cluster_resources()
    bundles = [bundle_resources(role, use_gpu, cluster) for role in roles]
    need: dict[str, int] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            need[k] = need.get(k, 0) + int(v)
    shown = " + ".join(f"{bundles.count(b)} x {b}" for b in
                       [b for i, b in enumerate(bundles) if b not in bundles[:i]])
    pg = make([dict(b) for b in bundles], strategy="PACK")
    ready = pg.ready()
    deadline = time.monotonic() + timeout
    waited = False
    try:
        while not ray.wait([ready], timeout=PLACEMENT_POLL_S)[0]:
            if _waiter is not None:
                waited = True
                if not _waiter(need):
                    raise StopRequested("the placement of the ranks", clean=True)
            elif time.monotonic() > deadline:
                raise RuntimeError(
                    f"world_size = {world_size}: the Ray cluster at "
                    f"{ray.get_runtime_context().gcs_address} cannot place {world_size} bundles "
                    f"({shown}) within {timeout:.0f} s; it has {ray.cluster_resources()}")
        ray.get(ready)
    except BaseException:
        remove_placement_group(pg)
        raise
    if waited and _waiter is not None:
        _waiter(None)
    return pg

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "reap":
        reap(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("usage: python -m trainer.distributed.placement reap DRIVER_PID HEAD_PID")
