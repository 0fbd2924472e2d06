"""A run on several GPUs and machines, on paper: what each rank holds in memory and how long the
sharded update's collectives and the weight sync into the engines take. Pure arithmetic over a
model's shape and a cluster's bandwidths; ``trainer.steptime`` adds it to the simulated
generation of ``G`` data-parallel engines (``SimulatedBackend(engines=G)``).

The layout is the one ``world_size > 1`` runs (docs/architecture.md): ``G`` ranks, each with an
FSDP2 shard of the policy (fp32 master weights, fp32 gradients, AdamW's two fp32 moments: 16
bytes per parameter over ``G``; bf16 compute) and an in-process vLLM engine with the full bf16
weights and its own KV cache. Per training step:

- **update** (``update_comm_bytes``): one forward for the old log-probs, then per optimiser step
  (mini-batch) and micro-batch a forward and a backward. FSDP2 all-gathers every layer's bf16
  weights before its forward and again before its backward (``reshard_after_forward``), and
  reduce-scatters the fp32 gradients after each backward. A ring collective moves
  ``(G - 1) / G`` of the gathered bytes through each rank's link.
- **weight sync** (``weight_gather_seconds``, ``engine_load_seconds``): every rank gathers each
  parameter in full (``full_tensor()``, fp32) and loads the bf16 copy into its engine
  (``reload_weights`` + ``reset_prefix_cache``).

docs/schedulers.md ("On several GPUs") derives the constants and cites them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from trainer.enginetime import EngineTimeModel

GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape (the Qwen2 family's ``config.json`` fields)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """One decoder layer: q, k, v (with biases, as Qwen2), o, the gated MLP, two norms."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        attention = h * h + h + 2 * (h * kv + kv) + h * h
        return attention + 3 * h * self.intermediate + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params + self.hidden

    def lora_params(self, rank: int) -> int:
        """LoRA adapters of rank ``rank`` on every linear layer but the output head
        (``all-linear``): r x (d_in + d_out) each, over q (h -> h), k and v (h -> kv), o
        (h -> h), gate and up (h -> i) and down (i -> h)."""
        kv = self.kv_heads * self.head_dim
        return rank * (9 * self.hidden + 2 * kv + 3 * self.intermediate) * self.layers

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer in bf16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


# The paper's two sizes: Qwen2.5-Math-1.5B and Qwen2.5-Math-7B (their config.json on the Hub).
MODELS = {
    "1.5b": ModelShape("Qwen2.5-Math-1.5B", hidden=1536, layers=28, heads=12, kv_heads=2,
                       intermediate=8960, vocab=151936, tied=True),
    "7b": ModelShape("Qwen2.5-Math-7B", hidden=3584, layers=28, heads=28, kv_heads=4,
                     intermediate=18944, vocab=152064, tied=False),
}
REFERENCE_MODEL = MODELS["1.5b"]  # the one EngineTimeModel's and UpdateTimeModel's defaults are for


@dataclass(frozen=True)
class ClusterModel:
    """``gpus`` H100-class GPUs on ``nodes`` machines (the same number on each). Bandwidths in
    GB/s (10^9 bytes) per GPU, as NCCL's bus bandwidth: a ring collective over ``G`` ranks takes
    ``(G - 1) / G x bytes / bandwidth``; across machines the ring runs at the inter-node
    bandwidth (one NIC per GPU)."""

    gpus: int = 1
    nodes: int = 1
    hbm_gib: float = 79.6            # H100 SXM 80 GB (81,559 MiB)
    nvlink_gb_s: float = 360.0       # NCCL all-gather bus bandwidth, 8 x H100 SXM (NVLink 4)
    internode_gb_s: float = 40.0     # 400 Gb/s NDR InfiniBand per GPU at ~80%
    collective_latency_s: float = 3e-5  # per collective call (NCCL ring latency within a node)
    internode_latency_s: float = 1e-4
    engine_load_gb_s: float = 20.0   # reload_weights: per-tensor copies and vLLM's own loader

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.nodes < 1:
            raise ValueError("gpus and nodes must be >= 1")
        if self.gpus % self.nodes:
            raise ValueError(f"{self.gpus} GPUs do not split evenly over {self.nodes} nodes")

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def bus_gb_s(self) -> float:
        return self.internode_gb_s if self.nodes > 1 else self.nvlink_gb_s

    @property
    def latency_s(self) -> float:
        return self.internode_latency_s if self.nodes > 1 else self.collective_latency_s

    def collective_seconds(self, total_bytes: float, calls: int = 1) -> float:
        """A ring all-gather or reduce-scatter of ``total_bytes`` (the full, unsharded size)
        split into ``calls`` collectives; 0 on one GPU."""
        if self.gpus == 1:
            return 0.0
        g = self.gpus
        return (g - 1) / g * total_bytes / (self.bus_gb_s * 1e9) + calls * self.latency_s


def micro_batches(tokens: float, ranks: int, mini_batches: int, micro_batch_tokens: int) -> int:
    """Micro-batches each rank runs in one training step: its share of each mini-batch's
    tokens in packs of at most ``micro_batch_tokens`` (verl's dynamic batch size)."""
    per_rank = tokens / max(1, mini_batches) / ranks
    return max(1, mini_batches) * max(1, math.ceil(per_rank / micro_batch_tokens))


def update_comm_bytes(model: ModelShape, micro: int) -> float:
    """Bytes FSDP2 gathers and reduces in one step: the old log-probs' forward (bf16
    all-gather), then per micro-batch a forward and a backward all-gather (bf16) and the fp32
    gradients' reduce-scatter."""
    p = model.params
    return 2 * p + micro * (2 * p + 2 * p + 4 * p)


def weight_gather_seconds(model: ModelShape, cluster: ClusterModel, bucket_mb: int = 64) -> float:
    """Every rank gathers each fp32 parameter in full, in buckets of ``bucket_mb`` MiB."""
    total = 4 * model.params
    return cluster.collective_seconds(total, calls=math.ceil(total / (bucket_mb * 2**20)))


def engine_load_seconds(model: ModelShape, cluster: ClusterModel) -> float:
    """The bf16 weights into the rank's own engine (every rank at once, in parallel)."""
    return 2 * model.params / (cluster.engine_load_gb_s * 1e9)


# What a rank does (``rollout_ranks``; trainer.distributed.placement's names, spelled here so
# that this arithmetic imports nothing of Ray): both, only the update, only generation.
COLOCATED, ROLE_TRAIN, ROLE_ROLLOUT = "train+rollout", "train", "rollout"


@dataclass(frozen=True)
class RankMemory:
    """GiB one rank holds. ``training`` is the update's peak, ``generation`` the rollout's;
    ``peak`` is their maximum with vLLM's sleep mode (the engine's KV cache freed and its
    weights dropped during the update: they are reloaded after it anyway), their sum
    without."""

    model: str
    world_size: int
    shard_weights: float      # fp32 master weights / G
    shard_grads: float        # fp32 gradients / G
    shard_adam: float         # AdamW's two fp32 moments / G
    gathered: float           # bf16 layers gathered at once (two, with prefetch) and the root
    activations: float        # one micro-batch's saved activations
    logits: float             # one micro-batch's fp32 logits and their gradient
    engine_weights: float     # the engine's full bf16 copy
    kv_cache: float           # KV cache for the engine's concurrent sequences
    sleep_mode: bool
    kv_per_sequence: float    # one full-length sequence's KV cache
    lora_rank: int = 0        # > 0: LoRA adapters train, the base weights are frozen
    role: str = COLOCATED     # what the rank does (``rollout_ranks``): ROLE_TRAIN, ROLE_ROLLOUT

    @property
    def shard(self) -> float:
        return self.shard_weights + self.shard_grads + self.shard_adam

    @property
    def training(self) -> float:
        return self.shard + self.gathered + self.activations + self.logits

    @property
    def generation(self) -> float:
        return self.shard + self.engine_weights + self.kv_cache

    @property
    def peak(self) -> float:
        if self.sleep_mode:
            return max(self.training, self.generation)
        return self.training + self.engine_weights + self.kv_cache

    def sequences_fit(self, hbm_gib: float, utilization: float = 0.8) -> int:
        """Full-length sequences whose KV cache fits beside the shard and the engine's weights in
        ``utilization`` of the GPU (vLLM's ``gpu_memory_utilization``: the authors' 0.8); fewer
        than the concurrent ones means vLLM runs fewer at once (it queues and preempts the rest)."""
        if self.role == ROLE_TRAIN:  # no engine: it generates nothing
            return 0
        room = hbm_gib * utilization - self.shard - self.engine_weights
        return max(0, int(room / self.kv_per_sequence))


def rank_memory(model: ModelShape, world_size: int, *, micro_batch_tokens: int = 6144,
                concurrent_sequences: int = 512, sequence_tokens: int = 256 + 2048,
                activation_checkpointing: bool = True, sleep_mode: bool = True,
                lora_rank: int = 0, role: str = COLOCATED) -> RankMemory:
    """What one of ``world_size`` ranks holds (GiB). Activations per token and layer in bf16:
    the layer's input, q/k/v, the attention output and o-proj input (``6h``), the MLP's gate, up,
    activation and down-proj input (``4i``); with activation checkpointing only each layer's
    input (``h``) is kept, plus one layer in full while it is recomputed. ``concurrent_sequences``
    x ``sequence_tokens`` is the KV cache the engine needs to run its share of a round at once
    (the paper: B x M / G = 512 on 8 GPUs; a 256-token prompt, as ``EngineTimeModel``, and a
    response at the 2048-token limit: a ceiling, most responses are shorter).

    ``lora_rank`` > 0 (``trainer.lora``): the base weights stay in the shard (fp32, frozen:
    no gradients, no AdamW moments) and the adapters' ``lora_params`` carry all 16 bytes;
    everything else is as full fine-tuning's (the activations still flow through every
    layer, the engine still holds the full merged weights).

    ``role``: every rank does both (``COLOCATED``, the default), or the run splits them
    (``rollout_ranks``, ``trainer.distributed.placement``). A train rank (``ROLE_TRAIN``;
    ``world_size`` is then the train ranks, which the shard is split over) holds its shard and
    the update's memory and no engine, no KV cache; a rollout rank (``ROLE_ROLLOUT``;
    ``concurrent_sequences`` its share of a round) holds the engine's full weights and its KV
    cache, nothing of the update."""
    if role not in (COLOCATED, ROLE_TRAIN, ROLE_ROLLOUT):
        raise ValueError(f"role {role!r}: one of {COLOCATED}, {ROLE_TRAIN}, {ROLE_ROLLOUT}")
    p, g = model.params, world_size
    trained = model.lora_params(lora_rank) if lora_rank > 0 else p
    held = p + trained if lora_rank > 0 else p
    h, i = model.hidden, model.intermediate
    full_layer = micro_batch_tokens * 2 * (6 * h + 4 * i)
    if activation_checkpointing:
        activations = micro_batch_tokens * 2 * h * model.layers + full_layer
    else:
        activations = full_layer * model.layers
    trains, generates = role != ROLE_ROLLOUT, role != ROLE_TRAIN
    return RankMemory(
        model=model.name, world_size=g,
        shard_weights=4 * held / g / GIB * trains, shard_grads=4 * trained / g / GIB * trains,
        shard_adam=8 * trained / g / GIB * trains,
        gathered=(2 * 2 * model.layer_params + 2 * model.embedding_params) / GIB * trains,
        activations=activations / GIB * trains,
        logits=2 * micro_batch_tokens * model.vocab * 4 / GIB * trains,
        engine_weights=2 * p / GIB * generates,
        kv_cache=concurrent_sequences * sequence_tokens * model.kv_bytes_per_token / GIB
        * generates,
        sleep_mode=sleep_mode, kv_per_sequence=sequence_tokens * model.kv_bytes_per_token / GIB,
        lora_rank=lora_rank, role=role)


def memory_table(rows: list[RankMemory], hbm_gib: float = 79.6) -> str:
    """A Markdown table of per-rank memory, GiB, and the full-length sequences the KV cache fits
    on a GPU of ``hbm_gib``."""
    lines = ["| model | ranks | weights + grads + AdamW (shard) | gathered layers | activations "
             "| logits | engine weights | KV cache | update peak | rollout peak | rank peak "
             "(sleep mode) | rank peak (no sleep mode) | full-length sequences the KV fits "
             f"({hbm_gib:g} GiB, 80%) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: |"]
    for m in rows:
        awake = m.training + m.engine_weights + m.kv_cache
        name = f"{m.model} (LoRA r={m.lora_rank})" if m.lora_rank else m.model
        lines.append(f"| {name} | {m.world_size} | {m.shard:.1f} | {m.gathered:.1f} | "
                     f"{m.activations:.1f} | {m.logits:.1f} | {m.engine_weights:.1f} | "
                     f"{m.kv_cache:.1f} | {m.training:.1f} | {m.generation:.1f} | "
                     f"{max(m.training, m.generation):.1f} | {awake:.1f} | "
                     f"{m.sequences_fit(hbm_gib):,} |")
    return "\n".join(lines)


# The fixed part of a decode step that is not reading the weights (scheduler, sampler, launch):
# EngineTimeModel's 4 ms for the 1.5B less 3.1 GB read at the H100's 3.35 TB/s.
HBM_BYTES_S = 3.35e12
_REF_WEIGHT_READ_S = 2 * REFERENCE_MODEL.params / HBM_BYTES_S


def engine_time_for(model: ModelShape, engine: EngineTimeModel | None = None) -> EngineTimeModel:
    """``engine`` (the 1.5B defaults) scaled to ``model``: the weight read of a decode step with
    the bf16 weights' size, the per-sequence and prefill FLOPs with the parameters, the
    attention reads with the KV cache's bytes per token."""
    base = engine or EngineTimeModel()
    r = model.params / REFERENCE_MODEL.params
    kv = model.kv_bytes_per_token / REFERENCE_MODEL.kv_bytes_per_token
    overhead = base.step_s - _REF_WEIGHT_READ_S
    return dataclasses.replace(base, step_s=overhead + 2 * model.params / HBM_BYTES_S,
                               seq_s=base.seq_s * r, kv_token_s=base.kv_token_s * kv,
                               prefill_token_s=base.prefill_token_s * r)


def update_token_seconds_for(model: ModelShape, token_s: float) -> float:
    """The update's seconds per token (``token_s`` for the 1.5B) scaled with the parameters."""
    return token_s * model.params / REFERENCE_MODEL.params
