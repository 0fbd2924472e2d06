"""One rank of a distributed run: an FSDP2 shard of the policy and an in-process vLLM engine
with the full weights (the colocated "hybrid engine" layout of verl and TRL's colocate mode).

A plain class that imports no Ray: ``trainer.distributed.actor`` wraps it in a Ray actor, and a
GPU check can run it under ``torchrun`` as is (it reads ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` from the environment when not given them). The rendezvous is
``env://``: under torchrun a ``tcp://`` init hangs (every rank is a store client there).

What a rank does, asked by the driver (``trainer.distributed.learner``):

- ``generate`` / the ``engine_*`` calls: its share of a step's requests, on its own engine;
- ``update``: its token-balanced part of every mini-batch of the kept responses
  (``trainer.update.update_policy`` with a ``ProcessGroupShard``); FSDP2 reduce-scatters the
  gradients as sums, so the ranks together take the single-process step;
- ``sync_weights``: every parameter gathered (``DTensor.full_tensor()``, a bucket at a time,
  every rank in the same order) into its own engine, then the prefix cache dropped;
- ``save`` / ``load``: the sharded model and optimiser with ``torch.distributed.checkpoint``.

**Split ranks** (``rollout_ranks`` = R > 0; ``role``): a "train" rank holds a shard and the
optimiser over the process group of the T train ranks only, and no engine; a "rollout" rank
holds an engine with the full weights (its own process group of the R rollout ranks, which
vLLM's external launcher needs) and no shard. ``sync_weights`` then runs on both sides at once:
the train ranks gather bucket by bucket as above and train rank 0 broadcasts each bucket to the
rollout ranks over a group of its own ({train rank 0} + the rollout ranks: gloo on CPU, NCCL on
GPU; ``send_weights`` / ``receive_weights``), which load it into their engines as it arrives.
A staged push (``weight_push`` = staged, while the rollout ranks still generate): the train
ranks' side is the same ``sync_weights``; a rollout rank runs ``receive_staged`` on its actor's
transfer thread into a host copy, then ``swap_staged`` once its requests finished.
The split needs the launcher's three rendezvous: under torchrun, ``rollout_ranks`` stays 0.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.config import TrainConfig
from trainer.distributed.placement import COLOCATED, ROLLOUT, TRAIN, rank_roles
from trainer.types import Generation, Prompt
from trainer.update import UpdateBatch, UpdateShard, _chunks

# Files of a sharded checkpoint inside the checkpoint directory.
SHARDED_DIR = "sharded"


class ProcessGroupShard(UpdateShard):
    """This rank's part of an update and the sums over the process group.

    ``take`` splits a mini-batch's responses over the ranks balanced by tokens (longest first,
    each to the rank with the fewest tokens so far; the same answer on every rank, so no
    message is needed), and returns this rank's part in sample order."""

    def __init__(self, rank: int, world_size: int, device: torch.device) -> None:
        self.rank, self.world_size, self.device = rank, world_size, device

    def take(self, idx: list[int], lengths: Sequence[int]) -> list[int]:
        return token_balanced(idx, lengths, self.world_size)[self.rank]

    def total(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def most(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def chunks(self, idx: list[int], size: int | None) -> list[list[int]]:
        parts = _chunks(idx, size) if idx else []
        return parts + [[] for _ in range(int(self.most(len(parts))) - len(parts))]


def token_balanced(idx: Sequence[int], lengths: Sequence[int], parts: int) -> list[list[int]]:
    """``idx`` split into ``parts`` lists with sums of ``lengths`` as equal as a greedy
    longest-first assignment makes them (ties: the lower part); each list in ``idx`` order."""
    load = [0] * parts
    out: list[list[int]] = [[] for _ in range(parts)]
    for i in sorted(idx, key=lambda i: (-lengths[i], i)):
        k = min(range(parts), key=lambda r: (load[r], r))
        out[k].append(i)
        load[k] += lengths[i]
    order = {i: n for n, i in enumerate(idx)}
    return [sorted(part, key=order.__getitem__) for part in out]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks (the classes transformers names in ``_no_split_modules``:
    Qwen2DecoderLayer, LlamaDecoderLayer, ...): each is one FSDP unit."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def shard_policy(model: torch.nn.Module, mesh: Any, *, cuda: bool) -> None:
    """``fully_shard`` every decoder layer, then the root (embeddings, final norm, the tied
    head). On CUDA the forward and backward run in bf16 while the master weights, the
    optimiser and the gradient reduction stay fp32; on CPU everything is fp32."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if cuda else MixedPrecisionPolicy())
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    # Each rank's loss is its token sum over the global token count: the gradient is the sum
    # of the ranks' gradients, not their mean (FSDP's default divides by the world size). A
    # plain SUM: gloo has no pre-multiplied sum.
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def _packable(value: Any) -> bool:
    """A DTensor sharded on dim 0 over a 1-D mesh (FSDP2's layout: rank r holds rows
    [r*c, (r+1)*c) with c = ceil(rows / world), torch.chunk's split), which the packed gather
    can rebuild; anything else goes through ``full_tensor()``."""
    from torch.distributed.tensor import DTensor, Shard

    return (isinstance(value, DTensor) and value.device_mesh.ndim == 1
            and tuple(value.placements) == (Shard(0),) and value.dim() > 0)


def _gather_packed(values: list[Any]) -> list[torch.Tensor]:
    """The full tensors of ``values`` (dim-0 sharded DTensors of one dtype on one mesh) by ONE
    all-gather: each rank lays its local shards end to end, each padded to the chunk size c
    rows, so rank r's block of every tensor is rows [r*c, (r+1)*c) of the padded whole and the
    first ``rows`` rows of the ranks' blocks laid end to end are the tensor itself. A tiny
    model's ~50 tensors were ~50 gloo round trips each sync; a bucket is now one."""
    mesh = values[0].device_mesh
    world = mesh.size()
    group = mesh.get_group()
    local = [v.to_local().detach() for v in values]
    chunk_rows = [-(-v.shape[0] // world) for v in values]
    row_numel = [int(torch.Size(v.shape[1:]).numel()) for v in values]
    sizes = [c * n for c, n in zip(chunk_rows, row_numel, strict=True)]
    flat = torch.zeros(sum(sizes), dtype=local[0].dtype, device=local[0].device)
    offset = 0
    for piece, size in zip(local, sizes, strict=True):
        flat[offset:offset + piece.numel()] = piece.reshape(-1)
        offset += size
    gathered = torch.empty(world * flat.numel(), dtype=flat.dtype, device=flat.device)
    dist.all_gather_into_tensor(gathered, flat, group=group)
    blocks = gathered.view(world, flat.numel())
    out = []
    offset = 0
    for value, c, size in zip(values, chunk_rows, sizes, strict=True):
        whole = blocks[:, offset:offset + size].reshape(world * c, *value.shape[1:])
        out.append(whole[:value.shape[0]].clone())
        offset += size
    return out


def full_weights(model: torch.nn.Module, bucket_bytes: int,
                 seconds: dict[str, float] | None = None
                 ) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every entry of the sharded model's state dict, gathered a bucket
    of about ``bucket_bytes`` at a time, the bucket's shards packed into one collective (every
    rank must run this to the end, in step: each gather is a collective). A bucket is dropped
    once the consumer moved past it, so at most one bucket of full tensors is alive beyond
    what the engine keeps. ``seconds`` ["gather"] accumulates the time spent gathering (the
    rest of a load is the engine's)."""
    items = list(model.state_dict().items())
    start = 0
    while start < len(items):
        bucket: list[tuple[str, Any]] = []
        size = 0
        t0 = time.perf_counter()
        while start < len(items) and (not bucket or size < bucket_bytes):
            name, value = items[start]
            bucket.append((name, value))
            size += value.numel() * value.element_size()
            start += 1
        full: dict[int, torch.Tensor] = {}
        # One collective per (mesh, dtype) among the bucket's packable tensors (every rank
        # sees the same state dict, so the same groups in the same order).
        groups: dict[tuple[int, torch.dtype], list[int]] = {}
        for i, (_, value) in enumerate(bucket):
            if _packable(value):
                groups.setdefault((id(value.device_mesh), value.dtype), []).append(i)
            elif hasattr(value, "full_tensor"):
                full[i] = value.full_tensor().detach()
            else:
                full[i] = value.detach()
        for idx in groups.values():
            for i, tensor in zip(idx, _gather_packed([bucket[i][1] for i in idx]),
                                 strict=True):
                full[i] = tensor
        if seconds is not None:
            seconds["gather"] = seconds.get("gather", 0.0) + time.perf_counter() - t0
        out = [(name, full[i]) for i, (name, _) in enumerate(bucket)]
        del bucket, full
        yield from out
        del out


# How long the weight transfer's members wait for each other (its rendezvous, each broadcast).
TRANSFER_TIMEOUT = timedelta(minutes=30)
# Each tensor of a bucket starts at a multiple of this many bytes of the bucket's buffer, so
# that a received tensor is a view of the buffer (a view as float32 needs 4-byte alignment).
TRANSFER_ALIGN = 64


def weight_transfer_group(addr: str, port: int, rank: int, size: int, cuda: bool) -> Any:
    """The group that carries the weights: train rank 0 (member 0, which hosts its store at
    ``addr:port``) and the rollout ranks (members 1..R). A process group of its own, outside
    either side's default group (each side's default group is its own ranks'), built from the
    store directly: gloo on CPU, NCCL on GPU."""
    store = dist.TCPStore(addr, port, size, rank == 0, timeout=TRANSFER_TIMEOUT)
    prefixed = dist.PrefixStore("weights", store)
    if cuda:
        return dist.ProcessGroupNCCL(prefixed, rank, size)
    return dist.ProcessGroupGloo(prefixed, rank, size, TRANSFER_TIMEOUT)


def _broadcast(group: Any, tensor: torch.Tensor) -> None:
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = 0, 0
    group.broadcast([tensor], opts).wait()


def _digest(h: Any, name: str, tensor: torch.Tensor) -> None:
    h.update(name.encode())
    h.update(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())


def _send_bucket(group: Any, bucket: list[tuple[str, torch.Tensor]], device: torch.device
                 ) -> None:
    """One bucket: its layout (name, dtype, shape, byte offset per tensor, pickled), then its
    tensors' bytes end to end in one buffer; an empty layout ends the transfer."""
    layout, offset = [], 0
    for name, tensor in bucket:
        layout.append((name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                       offset))
        offset += -(-tensor.numel() * tensor.element_size() // TRANSFER_ALIGN) * TRANSFER_ALIGN
    head = torch.frombuffer(bytearray(pickle.dumps(layout)), dtype=torch.uint8).to(device)
    _broadcast(group, torch.tensor([head.numel(), offset], dtype=torch.int64, device=device))
    _broadcast(group, head)
    if not bucket:
        return
    flat = torch.empty(offset, dtype=torch.uint8, device=device)
    for (_, tensor), (_, _, _, at) in zip(bucket, layout, strict=True):
        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        flat[at:at + raw.numel()].copy_(raw)
    _broadcast(group, flat)


def send_weights(group: Any, weights: Iterator[tuple[str, torch.Tensor]], bucket_bytes: int,
                 device: torch.device, digest: Any = None) -> None:
    """Train rank 0's side: ``weights`` (the gathered stream) broadcast a bucket of about
    ``bucket_bytes`` at a time, then the end. ``digest`` (a hashlib object) takes every tensor
    sent."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in weights:
        if digest is not None:
            _digest(digest, name, tensor)
        bucket.append((name, tensor))
        size += tensor.numel() * tensor.element_size()
        if size >= bucket_bytes:
            _send_bucket(group, bucket, device)
            bucket, size = [], 0
    if bucket:
        _send_bucket(group, bucket, device)
    _send_bucket(group, [], device)


def receive_weights(group: Any, device: torch.device, digest: Any = None
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """A rollout rank's side: (name, tensor) as the buckets arrive, each tensor a view of its
    bucket's buffer, until the end. ``digest`` takes every tensor received."""
    while True:
        sizes = torch.zeros(2, dtype=torch.int64, device=device)
        _broadcast(group, sizes)
        head_len, total = (int(v) for v in sizes.tolist())
        head = torch.empty(head_len, dtype=torch.uint8, device=device)
        _broadcast(group, head)
        layout = pickle.loads(head.cpu().numpy().tobytes())
        if not layout:
            return
        flat = torch.empty(total, dtype=torch.uint8, device=device)
        _broadcast(group, flat)
        for name, dtype, shape, at in layout:
            dt = getattr(torch, dtype)
            count = int(torch.Size(shape).numel())
            tensor = flat[at:at + count * dt.itemsize].view(dt).reshape(shape)
            if digest is not None:
                _digest(digest, name, tensor)
            yield name, tensor
        del flat


def stage_weights(group: Any, device: torch.device, digest: Any = None
                  ) -> list[tuple[str, torch.Tensor]]:
    """A rollout rank's side of a staged push: the whole transfer (``receive_weights``) kept
    in host memory until the swap (``swap_weights``), so that the engine keeps generating on
    its own weights meanwhile and the device holds one bucket more at most, as an
    after-the-requests push does. On CPU the buckets' buffers are the staging copy; on a GPU
    each tensor is copied to the host as its bucket arrives. Returns (name, host tensor) in
    the order sent."""
    staged: list[tuple[str, torch.Tensor]] = []
    for name, tensor in receive_weights(group, device, digest):
        staged.append((name, tensor if tensor.device.type == "cpu" else tensor.to("cpu")))
    return staged


def swap_weights(load: Callable[[Iterator[tuple[str, torch.Tensor]]], None],
                 staged: list[tuple[str, torch.Tensor]]) -> None:
    """The staged weights into the engine (``load``: its weight loader, fed the staged
    tensors in the order they were sent), each staged tensor dropped once loaded: a local
    copy, no communication."""
    def drain() -> Iterator[tuple[str, torch.Tensor]]:
        while staged:
            yield staged.pop(0)

    load(drain())


class Rank:
    """One rank: process group, policy shard, optimiser, engine. ``engine=False`` leaves the
    engine out (an update-only check needs no vLLM). ``should_stop`` (the driver's cancel, read
    by this rank) is agreed on by all ranks before every mini-batch: a rank that stopped alone
    would leave the others waiting in a collective. ``on_phase`` is told each phase of the
    start ("loading the model", "building the vLLM engine"...), for the run's page.

    ``role`` (``placement.rank_roles``): "train+rollout" (all of the above), "train" (no
    engine) or "rollout" (an engine only). ``master_addr`` / ``master_port`` are the rank's own
    side's rendezvous, ``transfer`` the weight transfer's (split ranks: train rank 0 and the
    rollout ranks join it)."""

    def __init__(self, config: dict[str, Any], *, rank: int | None = None,
                 world_size: int | None = None, master_addr: str | None = None,
                 master_port: int | None = None, engine: bool = True,
                 should_stop: Callable[[], bool] | None = None,
                 on_phase: Callable[[str], None] | None = None,
                 transfer: tuple[str, int] | None = None) -> None:
        from trainer.model import load_model_dir, resolve_model_path
        from trainer.update import make_optimizer

        say = on_phase or (lambda text: None)  # the start's phases, for the run's page

        self.config = TrainConfig.from_stored(config)
        env = os.environ
        self.rank = int(env["RANK"]) if rank is None else rank
        self.world_size = int(env["WORLD_SIZE"]) if world_size is None else world_size
        self.role = rank_roles(self.world_size, self.config.rollout_ranks)[self.rank]
        if self.role != COLOCATED and (master_addr is None or transfer is None):
            raise ValueError("rollout_ranks > 0 needs the launcher's rendezvous for each side "
                             "and the weight transfer (under torchrun, keep rollout_ranks = 0)")
        if self.role == ROLLOUT and not engine:
            raise ValueError("a rollout rank is its engine: engine=False needs rollout_ranks = 0")
        # This rank's own process group: every rank (colocated), or its side's ranks only.
        trainers = self.world_size - self.config.rollout_ranks
        self.group_rank, self.group_size = (
            (self.rank - trainers, self.config.rollout_ranks) if self.role == ROLLOUT
            else (self.rank, trainers) if self.role == TRAIN
            else (self.rank, self.world_size))
        # vLLM's external launcher and env:// read these (the rank's own group).
        env["RANK"], env["WORLD_SIZE"] = str(self.group_rank), str(self.group_size)
        env.setdefault("LOCAL_RANK", "0")
        if master_addr is not None:
            env["MASTER_ADDR"] = master_addr
        if master_port is not None:
            env["MASTER_PORT"] = str(master_port)
        self.cuda = self.config.device != "cpu" and torch.cuda.is_available()
        if self.cuda:
            # One visible GPU per rank under Ray; LOCAL_RANK's under torchrun.
            local = int(env["LOCAL_RANK"]) % torch.cuda.device_count()
            self.device = torch.device("cuda", local)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if not dist.is_initialized():
            say("joining the process group")
            dist.init_process_group("nccl" if self.cuda else "gloo", init_method="env://",
                                    rank=self.group_rank, world_size=self.group_size)
        self.should_stop = should_stop
        # Sleep mode frees a colocated rank's engine while its shard trains; split ranks hold
        # one or the other.
        self.sleep_mode = self.role == COLOCATED and self.config.sleep_mode_on(
            self.device.type)
        if self.sleep_mode and not self.cuda:
            raise ValueError("vllm_sleep_mode: vLLM's CPU build has no sleep mode; leave it "
                             "empty or off on CPU")
        self.model_dir = resolve_model_path(self.config.model)
        say("loading the model")
        model, tokenizer = load_model_dir(self.model_dir, self.device.type)
        self.tokenizer = tokenizer
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.engine: Any = None
        self.seconds: dict[str, float] = {}
        self.step_seconds: dict[str, float] = {}
        self.transfer: Any = None
        # A staged push's weights, received while the engine generates, until the swap.
        self.staged: list[tuple[str, torch.Tensor]] | None = None
        # (what, start, end) perf_counter seconds of this rank's generate calls and a staged
        # push's receive and swap, the latest first dropped: the order they ran in, for checks.
        self.events: deque[tuple[str, float, float]] = deque(maxlen=4096)
        self._requests: Any = None
        self.ref_model: Any = None
        if engine and self.role != TRAIN:
            say("building the vLLM engine")
            t0 = time.perf_counter()
            self.engine = self._build_engine(model, tokenizer)
            self.seconds["engine_build"] = time.perf_counter() - t0
        if self.role == ROLLOUT:
            # The engine holds the weights: no policy, reference, optimiser or shard here.
            if self.engine is not None:
                self.engine.model = None
            del model
            self.model = self.ref_model = self.optimizer = self.scheduler = None
            self.mesh = self.shard = None
            self._join_transfer(transfer, member=1 + self.group_rank)
            return
        if self.config.lora_rank > 0:
            # The adapter goes in before fully_shard, so each rank holds its shard of A and B
            # beside its shard of the frozen W (the engine was built from W: step 0's merged
            # weights, B being zero).
            from trainer.lora import apply_lora

            model = apply_lora(model, self.config)
        say("sharding the policy")
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(self.device.type, (self.group_size,))
        if self.config.activation_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        shard_policy(model, self.mesh, cuda=self.cuda)
        self.model = model
        self._ensure_reference()
        self.optimizer, self.scheduler = make_optimizer(model, self.config)
        self.shard = ProcessGroupShard(self.group_rank, self.group_size, self.device)
        if self.role == TRAIN and self.rank == 0:
            self._join_transfer(transfer, member=0)

    def _join_transfer(self, transfer: tuple[str, int] | None, member: int) -> None:
        """Join the weight transfer (train rank 0 as member 0, the rollout ranks after it);
        last in the start, so that no side waits in it while the other still loads."""
        assert transfer is not None
        self.transfer = weight_transfer_group(*transfer, member, 1 + self.config.rollout_ranks,
                                              self.cuda)

    def _ensure_reference(self) -> None:
        """With a KL in the loss or the reward: the frozen reference, the model directory's
        weights (the run's initial policy, on every start and resume alike), sharded as the
        policy is, so that each rank holds 1/world of it and its forward passes are collectives
        every rank joins (``ProcessGroupShard.chunks``). Built once, on the first run that
        needs it."""
        if self.ref_model is not None or not self.config.uses_reference \
                or self.role == ROLLOUT:
            return
        from trainer.lora import AdapterOff, is_lora

        if is_lora(self.model):  # the adapter switched off: W alone, already sharded here
            self.ref_model = AdapterOff(self.model)
            return
        from trainer.model import load_model_dir

        ref, _ = load_model_dir(self.model_dir, self.device.type)
        ref.requires_grad_(False)
        shard_policy(ref, self.mesh, cuda=self.cuda)
        self.ref_model = ref.eval()

    def _build_engine(self, model: Any, tokenizer: Any) -> Any:
        from trainer.backends.vllm import VLLMBackend

        cfg = self.config
        # The engine joins this process group as one data-parallel replica of its own
        # ("external launcher": one engine per process, no engine-side workers).
        options: dict[str, Any] = {"distributed_executor_backend": "external_launcher"}
        if self.sleep_mode:
            options["enable_sleep_mode"] = True
        return VLLMBackend(model, tokenizer, temperature=cfg.temperature, top_p=cfg.top_p,
                           max_new_tokens=cfg.max_new_tokens, dtype=cfg.rollout_dtype,
                           seed=cfg.seed % 2**31, kv_cache_gib=cfg.vllm_kv_cache_gib,
                           gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                           engine_options=options, model_dir=str(self.model_dir))

    # --- generation ----------------------------------------------------------------------------
    def _spent(self, part: str, t0: float) -> None:
        self.step_seconds[part] = self.step_seconds.get(part, 0.0) + time.perf_counter() - t0

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        t0 = time.perf_counter()
        try:
            return self.engine.generate(prompts, counts, seed=seed, greedy=greedy)
        finally:
            self._spent("generation", t0)
            self.events.append(("generate", t0, time.perf_counter()))

    def engine_logprobs(self, prompt_ids: Sequence[Sequence[int]],
                        response_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        return self.engine.engine_logprobs(prompt_ids, response_ids)

    def engine_open(self, count_partial: bool) -> int | None:
        """Start feeding single requests (the per-prompt and streaming schedulers). Returns
        the most requests this rank's engine runs at once (``capacity()``; None if it does
        not say), which speculative early rounds measure spare capacity against."""
        self._requests = self.engine.request_engine(count_partial=count_partial)
        capacity = getattr(self._requests, "capacity", None)
        return None if capacity is None else int(capacity())

    def engine_step(self, submits: Sequence[tuple[Any, Prompt, int, int]],
                    aborts: Sequence[Any]) -> tuple[list[tuple[Any, Generation]], int, int]:
        """Queue ``submits`` (key, prompt, sample, seed), abort ``aborts``, then run one
        engine step when requests are pending. Returns the finished requests, the tokens the
        aborted ones had generated and the requests still pending."""
        t0 = time.perf_counter()
        engine = self._requests
        for key, prompt, sample, seed in submits:
            engine.submit(key, prompt, sample, seed)
        discarded = engine.abort(list(aborts)) if aborts else 0
        finished = engine.step() if engine.pending() else []
        self._spent("generation", t0)
        return finished, discarded, engine.pending()

    def engine_step_abort(self, keys: Sequence[Any]) -> int:
        """Abort requests in this rank's engine; the response tokens they had generated."""
        return self._requests.abort(list(keys))

    # --- the update ----------------------------------------------------------------------------
    def _agreed_stop(self) -> bool:
        local = self.should_stop is not None and bool(self.should_stop())
        return self.shard.most(1.0 if local else 0.0) > 0

    def update(self, batch: UpdateBatch, *, seed: int) -> dict[str, float]:
        """This rank's part of one training step's update (``update_policy`` over the whole
        kept batch, sharded); the metrics are the global ones, equal on every rank."""
        from trainer.update import update_policy

        if self.sleep_mode and self.engine is not None:
            # The KV cache freed and the engine's weights offloaded while the shard trains.
            self.engine.llm.sleep(level=1)
        t0 = time.perf_counter()
        metrics = update_policy(self.model, self.optimizer, self.scheduler, batch, self.config,
                                pad_token_id=self.pad_id, ref_model=self.ref_model, seed=seed,
                                micro_batch_size=self.config.ppo_micro_batch_size or None,
                                should_stop=self._agreed_stop, shard=self.shard)
        self.seconds["update"] = time.perf_counter() - t0
        self._spent("update", t0)
        return metrics

    def sequence_kl(self, batch: UpdateBatch) -> tuple[Any, Any]:
        """This rank's part of every response's KL to the reference (``use_kl_in_reward``;
        ``trainer.update.sequence_kl``), summed over the ranks: the same on every rank."""
        from trainer.update import sequence_kl

        t0 = time.perf_counter()
        try:
            return sequence_kl(self.model, self.ref_model, batch, self.config.kl_penalty,
                               pad_token_id=self.pad_id,
                               temperature=float(self.config.temperature),
                               micro_batch_size=self.config.ppo_micro_batch_size or None,
                               shard=self.shard)
        finally:
            self._spent("update", t0)

    def sync_weights(self, digest: bool = False) -> dict[str, Any]:
        """Gather the updated policy into this rank's engine: ``reload_weights`` fed by the
        bucketed gather, then ``reset_prefix_cache`` (cached prefixes hold the old weights'
        key/values). Split ranks: the train ranks gather and train rank 0 sends
        (``_push_weights``), the rollout ranks receive and load (``_load_pushed``), all in
        the same call. Returns the seconds it took and, with ``digest``, a SHA-256 of every
        tensor this rank gathered or loaded (name and bytes, in order: equal on both sides when
        the engine got what the train ranks hold)."""
        if self.role == TRAIN:
            return self._push_weights(digest)
        if self.role == ROLLOUT:
            return self._load_pushed(digest)
        t0 = time.perf_counter()
        if self.engine is None:
            for _ in self.engine_weights(self.config.fsdp_bucket_mb * 2**20):
                pass
            return {"sync": time.perf_counter() - t0}
        llm = self.engine.llm
        if self.sleep_mode:
            llm.wake_up()
        parts: dict[str, float] = {}
        weights = self.engine_weights(self.config.fsdp_bucket_mb * 2**20, parts)
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        llm.reset_prefix_cache()
        self.seconds["sync"] = time.perf_counter() - t0
        gather = parts.get("gather", 0.0)
        self.step_seconds["gather"] = self.step_seconds.get("gather", 0.0) + gather
        self.step_seconds["load"] = (self.step_seconds.get("load", 0.0)
                                     + self.seconds["sync"] - gather)
        return {"sync": self.seconds["sync"]}

    def _push_weights(self, digest: bool) -> dict[str, Any]:
        """A train rank's side of the push: every train rank gathers (a collective among
        them); train rank 0 broadcasts each bucket to the rollout ranks as it is gathered.
        Its seconds are the rank's weight gather (the send included)."""
        t0 = time.perf_counter()
        h = hashlib.sha256() if digest else None
        bucket_bytes = self.config.fsdp_bucket_mb * 2**20
        weights = self.engine_weights(bucket_bytes)
        if self.transfer is not None:
            send_weights(self.transfer, weights, bucket_bytes, self.device, h)
        else:
            for name, tensor in weights:
                if h is not None:
                    _digest(h, name, tensor)
        spent = time.perf_counter() - t0
        self.seconds["sync"] = spent
        self.step_seconds["gather"] = self.step_seconds.get("gather", 0.0) + spent
        return {"sync": spent, **({"digest": h.hexdigest()} if h is not None else {})}

    def _load_pushed(self, digest: bool) -> dict[str, Any]:
        """A rollout rank's side: the buckets train rank 0 sends, loaded into the engine as
        they arrive, then the prefix cache dropped. Its seconds (waiting for the train ranks'
        gather included) are the rank's engine load."""
        t0 = time.perf_counter()
        h = hashlib.sha256() if digest else None
        weights = receive_weights(self.transfer, self.device, h)
        llm = self.engine.llm
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        for _ in weights:  # whatever the load left unread: the transfer must reach its end
            pass
        llm.reset_prefix_cache()
        spent = time.perf_counter() - t0
        self.seconds["sync"] = spent
        self.step_seconds["load"] = self.step_seconds.get("load", 0.0) + spent
        return {"sync": spent, **({"digest": h.hexdigest()} if h is not None else {})}

    def receive_staged(self, digest: bool = False) -> dict[str, Any]:
        """A rollout rank's side of a staged push (``weight_push`` = staged): the buckets
        train rank 0 sends (its ``sync_weights``), kept in host memory (``stage_weights``)
        while the engine goes on generating on its own weights. Runs on the actor's transfer
        thread (``trainer.distributed.actor``), beside a generate call on the main one. Its
        seconds, off the critical path while requests run, are the rank's weight gather."""
        if self.role != ROLLOUT:
            raise ValueError(f"receive_staged: a {self.role} rank receives no push")
        if self.staged is not None:
            raise RuntimeError("receive_staged: the previous push was never swapped in")
        t0 = time.perf_counter()
        h = hashlib.sha256() if digest else None
        if self.cuda:
            # Its own stream and this thread's device: the engine's kernels run on the main
            # thread's stream meanwhile.
            torch.cuda.set_device(self.device)
            with torch.cuda.stream(torch.cuda.Stream(self.device)):
                staged = stage_weights(self.transfer, self.device, h)
        else:
            staged = stage_weights(self.transfer, self.device, h)
        self.staged = staged
        t1 = time.perf_counter()
        self.events.append(("receive", t0, t1))
        self.step_seconds["gather"] = self.step_seconds.get("gather", 0.0) + t1 - t0
        return {"receive": t1 - t0, **({"digest": h.hexdigest()} if h is not None else {})}

    def swap_staged(self) -> dict[str, float]:
        """The staged weights into the engine once its requests finished (``swap_weights``:
        a copy on this rank, no communication), then the prefix cache dropped (cached
        prefixes hold the old weights' key/values). Its seconds, on the critical path, are
        the rank's engine load."""
        if self.staged is None:
            raise RuntimeError("swap_staged: no push was received")
        t0 = time.perf_counter()
        llm = self.engine.llm
        staged, self.staged = self.staged, None
        swap_weights(lambda weights: llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": weights}), staged)
        llm.reset_prefix_cache()
        t1 = time.perf_counter()
        self.events.append(("swap", t0, t1))
        self.seconds["sync"] = t1 - t0
        self.step_seconds["load"] = self.step_seconds.get("load", 0.0) + t1 - t0
        return {"swap": t1 - t0}

    def timeline(self) -> list[tuple[str, float, float]]:
        """``events``, oldest first: (what, start, end) in this process's perf_counter."""
        return list(self.events)

    def step_report(self) -> dict[str, Any]:
        """Where this rank runs and its seconds since the last report (generation, update,
        weight gather, engine load); the counters restart."""
        device = (f"{torch.cuda.get_device_name(self.device)} ({self.device})" if self.cuda
                  else "cpu")
        out = {"rank": self.rank, "device": device, "role": self.role, **self.step_seconds}
        self.step_seconds = {}
        return out

    def engine_weights(self, bucket_bytes: int, seconds: dict[str, float] | None = None
                       ) -> Iterator[tuple[str, torch.Tensor]]:
        """What the engine loads, a bucket at a time (``full_weights``); a LoRA policy's
        gathered W, A and B merged on the way (``trainer.lora.merge_stream``), under the base
        model's names."""
        from trainer.lora import is_lora, merge_stream, scalings

        weights = full_weights(self.model, bucket_bytes, seconds)
        return merge_stream(weights, scalings(self.model)) if is_lora(self.model) else weights

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy's weights on every rank (for checks and the HF export)."""
        return {k: v.cpu() for k, v in full_weights(self.model, 2**62)}

    # --- a new run on these ranks -------------------------------------------------------------
    # What the shard and the engine were built with: a later run on the same ranks must share
    # them (the update's fields, lr, the clip ranges, the loss, may change).
    BUILT_WITH = ("model", "world_size", "rollout_ranks", "device", "rollout_dtype",
                  "temperature", "top_p",
                  "max_new_tokens", "vllm_kv_cache_gib", "activation_checkpointing",
                  "vllm_sleep_mode", "lora_rank", "lora_alpha", "lora_target_modules")

    def built_with(self, config: TrainConfig) -> dict[str, Any]:
        """``config``'s ``BUILT_WITH`` values as they resolve on this rank: "auto" as the
        device the rank runs on (the launcher builds ranks with the device their bundle gave
        them, the run's config keeps "auto"), the engine's dtype and sleep mode for that
        device, and the model as its directory (``builtin:tiny`` and its path are one model)."""
        from trainer.model import resolve_model_path

        resolved = config.resolved(device=self.device.type)
        out = {name: resolved[name] for name in self.BUILT_WITH}
        out["model"] = str(resolve_model_path(config.model).resolve())
        return out

    def begin_run(self, config: dict[str, Any], *, initial_weights: bool) -> None:
        """Take a new run's config for the update; with ``initial_weights`` the policy goes
        back to the model directory's weights (a new run on ranks an earlier run trained) with
        a fresh optimiser and schedule. The engine is refreshed by the next ``sync_weights``.
        The run must ask for what these ranks were built with, compared as both resolve here
        (``built_with``), never as spelled."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        from trainer.model import load_model_dir
        from trainer.update import make_optimizer

        new = TrainConfig.from_stored(config)
        built, asked = self.built_with(self.config), self.built_with(new)
        for name in self.BUILT_WITH:
            if asked[name] != built[name]:
                spelled = getattr(new, name)
                how = f" ({spelled!r} here)" if spelled != asked[name] else ""
                raise ValueError(f"{name}: these ranks were built with {built[name]!r}, the "
                                 f"run asks for {asked[name]!r}{how}; start new ranks for it")
        # Kept as the ranks run it: the device they were built on.
        self.config = dataclasses.replace(new, device=self.device.type)
        if self.role == ROLLOUT:  # the weights come with the next push
            return
        self._ensure_reference()
        if initial_weights:
            initial, _ = load_model_dir(self.model_dir, "cpu")
            if self.config.lora_rank > 0:  # W and a fresh adapter (A from the run's seed)
                from trainer.lora import apply_lora

                initial = apply_lora(initial, self.config)
            set_model_state_dict(self.model, initial.state_dict(),
                                 options=StateDictOptions(full_state_dict=True))
            del initial
        self.optimizer, self.scheduler = make_optimizer(self.model, self.config)

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """The sharded model and optimiser under ``path/sharded`` (each rank writes its own
        shards), the schedule's state beside it (rank 0)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(Path(path) /
                                                                          SHARDED_DIR))
        if self.rank == 0:
            torch.save(self.scheduler.state_dict(), Path(path) / "scheduler.pt")
        dist.barrier()

    def load(self, path: str | Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(Path(path) / SHARDED_DIR))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(torch.load(Path(path) / "scheduler.pt",
                                                  weights_only=True))

    def export_hf(self, path: str | Path) -> None:
        """A Hugging Face model directory of the current weights in ``path`` (rank 0 writes;
        every rank takes part in the gather). A tied head is left out, as ``save_pretrained``
        does."""
        from safetensors.torch import save_file

        from trainer.lora import is_lora

        if is_lora(self.model):
            self._export_lora(Path(path))
            return
        weights = self.full_state_dict()
        if self.rank == 0:
            if getattr(self.model.config, "tie_word_embeddings", False):
                weights.pop("lm_head.weight", None)
            path = Path(path)
            path.mkdir(parents=True, exist_ok=True)
            save_file({k: v.contiguous() for k, v in weights.items()},
                      str(path / "model.safetensors"), metadata={"format": "pt"})
            self.model.config.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
        dist.barrier()

    def _export_lora(self, path: Path) -> None:
        """As a one-process LoRA checkpoint (``trainer.checkpoint.save_checkpoint``): the
        adapter in peft's layout at ``path``, the merged model with the tokenizer under
        ``merged/``."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        from trainer.lora import ADAPTER_FILE, ADAPTER_NAME, MERGED_DIR, merge_stream, scalings

        full = self.full_state_dict()
        if self.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            adapter = get_peft_model_state_dict(self.model, state_dict=full,
                                                save_embedding_layers=False)
            save_file({k: v.contiguous() for k, v in adapter.items()}, str(path / ADAPTER_FILE),
                      metadata={"format": "pt"})
            self.model.peft_config[ADAPTER_NAME].save_pretrained(str(path))
            merged = dict(merge_stream(full.items(), scalings(self.model)))
            base = self.model.get_base_model()
            if getattr(base.config, "tie_word_embeddings", False):
                merged.pop("lm_head.weight", None)
            out = path / MERGED_DIR
            out.mkdir(parents=True, exist_ok=True)
            save_file({k: v.contiguous() for k, v in merged.items()},
                      str(out / "model.safetensors"), metadata={"format": "pt"})
            base.config.save_pretrained(out)
            self.tokenizer.save_pretrained(out)
            self.tokenizer.save_pretrained(path)
        dist.barrier()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self.transfer is not None:
            shutdown = getattr(self.transfer, "shutdown", None)
            if shutdown is not None:
                shutdown()
            self.transfer = None
        if dist.is_initialized():
            dist.destroy_process_group()
