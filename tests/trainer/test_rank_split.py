"""The rollout/train split of a distributed run's ranks (``rollout_ranks``) without Ray: each
rank's role, its bundle's resources on a cluster that labels its nodes or not, the config's
refusals naming their field, and the weight transfer's wire format between two real gloo
processes (train rank 0's ``send_weights`` against a rollout rank's ``receive_weights``).
The runs on Ray are in tests/trainer/test_distributed.py."""

from __future__ import annotations

import hashlib
import multiprocessing
import socket
from typing import Any

import pytest

from trainer.config import TrainConfig
from trainer.distributed.placement import bundle_resources, rank_roles


def test_ranks_split_into_train_ranks_first_then_rollout_ranks() -> None:
    assert rank_roles(2, 0) == ["train+rollout"] * 2
    assert rank_roles(2, 1) == ["train", "rollout"]
    assert rank_roles(5, 2) == ["train", "train", "train", "rollout", "rollout"]
    with pytest.raises(ValueError, match="leaves no rank of 2 to train"):
        rank_roles(2, 2)


def test_bundles_ask_for_their_roles_resource_where_the_cluster_advertises_it() -> None:
    plain = {"CPU": 8.0, "GPU": 4.0, "memory": 1e10}
    labelled = {**plain, "rada_rollout": 2.0, "rada_train": 2.0}
    # No labels: CPU (and GPU) only, whatever the role (today's bundles).
    for role in ("train", "rollout", "train+rollout"):
        assert bundle_resources(role, False, plain) == {"CPU": 1}
        assert bundle_resources(role, True, plain) == {"CPU": 1, "GPU": 1}
    # Labelled nodes: each role asks for its own label besides its CPU/GPU.
    assert bundle_resources("rollout", True, labelled) == {"CPU": 1, "GPU": 1,
                                                           "rada_rollout": 1}
    assert bundle_resources("train", True, labelled) == {"CPU": 1, "GPU": 1, "rada_train": 1}
    assert bundle_resources("train", False, labelled) == {"CPU": 1, "rada_train": 1}
    # Colocated ranks do both: they ask for neither label.
    assert bundle_resources("train+rollout", True, labelled) == {"CPU": 1, "GPU": 1}
    # Each label on its own: only rollout nodes labelled keeps them for the rollout ranks and
    # lets the train ranks go anywhere (a label nobody advertises would never place).
    half = {**plain, "rada_rollout": 1.0}
    assert bundle_resources("rollout", False, half) == {"CPU": 1, "rada_rollout": 1}
    assert bundle_resources("train", False, half) == {"CPU": 1}
    assert bundle_resources("rollout", False, {**plain, "rada_rollout": 0.0}) == {"CPU": 1}


def _errors(**kw: Any) -> list[tuple[str, str]]:
    return [(e.field, e.reason) for e in TrainConfig(**kw).errors()]


def test_the_split_is_refused_where_it_cannot_work_naming_the_field() -> None:
    ranks = {"backend": "vllm", "world_size": 2}
    assert _errors(**ranks, rollout_ranks=1) == []
    # Every rank a rollout rank leaves nobody to train.
    ((field, reason),) = _errors(**ranks, rollout_ranks=2)
    assert field == "rollout_ranks" and "at most 1 for world_size 2, got 2" in reason
    assert [f for f, _ in _errors(backend="vllm", rollout_ranks=1)] == ["rollout_ranks"]
    # Sleep mode asked for: no rank holds both an engine and a shard.
    ((field, reason),) = _errors(**ranks, rollout_ranks=1, vllm_sleep_mode=True)
    assert field == "rollout_ranks" and "vllm_sleep_mode" in reason
    assert _errors(**ranks, rollout_ranks=1, vllm_sleep_mode=False) == []
    # Asynchronous training across ranks: the split ranks generate while the others train;
    # colocated ranks cannot, and are told what to set.
    asynchronous = {**ranks, "max_policy_lag": 1, "tis_cap": 2.0}
    assert _errors(**asynchronous, rollout_ranks=1) == []
    ((field, reason),) = _errors(**asynchronous)
    assert field == "max_policy_lag" and "colocated ranks (rollout_ranks = 0" in reason
    assert "set rollout_ranks >= 1" in reason


def test_free_ports_are_free_on_every_address_of_the_machine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A port chosen on one address may be another process's on another address (a listener
    on 127.0.0.1 leaves the port bindable on the node's address), and the stores the ranks
    start listen on every address: such a port failed a start with EADDRINUSE. The ports are
    chosen on the wildcard address, so the kernel hands out only ports no address holds; each
    then takes a store's listener."""
    from trainer.distributed import placement

    bound: list[tuple[str, int]] = []

    class Recording(socket.socket):
        def bind(self, address: Any) -> None:
            bound.append(address)
            super().bind(address)

    with monkeypatch.context() as mp:
        mp.setattr(placement.socket, "socket", Recording)
        ports = placement.free_ports("127.0.0.1", 3)
    assert bound == [("", 0)] * 3 and len(set(ports)) == 3
    # The kernel's rule it relies on: a listener on one address blocks the wildcard only.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with socket.socket() as store, pytest.raises(OSError):
            store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            store.bind(("", held.getsockname()[1]))
    for port in ports:
        with socket.socket() as store:
            store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            store.bind(("", port))
            store.listen()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _member(member: int, port: int, queue: Any) -> None:
    import torch

    from trainer.distributed.rank import receive_weights, send_weights, weight_transfer_group

    group = weight_transfer_group("127.0.0.1", port, member, 3, cuda=False)
    device = torch.device("cpu")
    h = hashlib.sha256()
    if member == 0:
        g = torch.Generator().manual_seed(0)
        weights = [("a.weight", torch.randn(3, 5, generator=g)),
                   ("b.bias", torch.randn(7, generator=g).to(torch.bfloat16)),
                   ("c.scale", torch.tensor(2.5, dtype=torch.float64)),
                   ("d.ids", torch.arange(11, dtype=torch.int64).reshape(1, 11)),
                   ("e.weight", torch.randn(4, 4, generator=g)[:, 1:])]  # not contiguous
        # A 64-byte bucket: several buckets, some of one tensor only.
        send_weights(group, iter(weights), 64, device, h)
        got = [(n, t.clone()) for n, t in weights]
    else:
        got = [(n, t.clone()) for n, t in receive_weights(group, device, h)]
    queue.put((member, [(n, str(t.dtype), tuple(t.shape), t.float().flatten().tolist())
                        for n, t in got], h.hexdigest()))


def three_members(target: Any) -> list[tuple[Any, ...]]:
    """Train rank 0 and two rollout ranks, each ``target(member, port, queue)`` in a spawned
    process of its own over one gloo rendezvous; what each put on the queue (killed if hung)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(m, port, queue)) for m in range(3)]
    for p in procs:
        p.start()
    try:
        return [queue.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def test_the_weight_transfer_carries_every_tensor_exactly_to_every_rollout_rank() -> None:
    """Train rank 0 and two rollout ranks as three real gloo processes: what each rollout rank
    receives is what train rank 0 sent, name, dtype, shape and bytes (the digests agree), over
    several buckets and an end marker."""
    results = {m: (w, d) for m, w, d in three_members(_member)}
    sent, digest = results[0]
    assert [n for n, *_ in sent] == ["a.weight", "b.bias", "c.scale", "d.ids", "e.weight"]
    for member in (1, 2):
        assert results[member] == (sent, digest)


def _staging_member(member: int, port: int, queue: Any) -> None:
    """Train rank 0 sends one push; a rollout rank stages it on a second thread while its main
    thread "generates" on the engine's weights (reading them until the receive is over), then
    swaps it in."""
    import threading

    import torch

    from trainer.distributed.rank import (
        send_weights,
        stage_weights,
        swap_weights,
        weight_transfer_group,
    )

    group = weight_transfer_group("127.0.0.1", port, member, 3, cuda=False)
    device = torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    new = [("a.weight", torch.randn(6, 5, generator=g)),
           ("b.bias", torch.randn(9, generator=g).to(torch.bfloat16)),
           ("c.weight", torch.randn(3, 3, generator=g))]
    h = hashlib.sha256()
    if member == 0:
        send_weights(group, iter(new), 64, device, h)
        queue.put((member, h.hexdigest(), None))
        return
    engine = {name: torch.zeros_like(t) for name, t in new}  # the old weights: zeros
    staged: list[Any] = []
    receiving = threading.Thread(target=lambda: staged.extend(stage_weights(group, device, h)))
    receiving.start()
    # "Generation" on the main thread while the push arrives: the engine's weights stay the
    # old ones throughout (the staging copy is not the engine's).
    reads = 0
    while receiving.is_alive() or reads == 0:
        assert all(not t.any() for t in engine.values())
        reads += 1
    receiving.join()
    received = [n for n, _ in staged]

    def load(weights: Any) -> None:
        for name, tensor in weights:
            engine[name].copy_(tensor)

    swap_weights(load, staged)
    queue.put((member, h.hexdigest(), (received, len(staged), reads > 0,
                                       [(n, engine[n].float().flatten().tolist(),
                                         t.float().flatten().tolist()) for n, t in new])))


def test_a_staged_push_is_received_beside_generation_and_swapped_in_afterwards() -> None:
    """``weight_push`` = staged without Ray: two rollout ranks receive train rank 0's push into
    a staging copy on a thread of their own while their main thread reads the engine's weights
    (still the old ones: the receive never touches them); the swap then loads every tensor, in
    the order sent, into the engine and empties the staging copy; the digests agree."""
    results = {m: (d, r) for m, d, r in three_members(_staging_member)}
    sent_digest, _ = results[0]
    for member in (1, 2):
        digest, (received, left, read, weights) = results[member]
        assert digest == sent_digest
        assert received == ["a.weight", "b.bias", "c.weight"] and left == 0 and read
        for name, engine, sent in weights:
            assert engine == sent and any(v != 0 for v in sent), name
