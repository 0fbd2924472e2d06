"""What verl's driver adds to a step around the engines and the update, for ``simulate-time
--preset paper``: the pipeline the paper's step times (Reinforce-Ada, Table 2) were measured on.
Pure arithmetic over counts that ``trainer.steptime`` takes from the simulated step.

The authors' fork of verl (RLHFlow/Reinforce-Ada, ``verl/trainer/ppo/ray_trainer.py``) runs the
multi-round loop ``_generate_multi_round_adaptive_downsampling`` on the driver. Per round it:

- calls ``generate_sequences`` on the colocated workers, and every such call switches the hybrid
  engine to rollout mode and back (``fsdp_workers.py``: ``rollout_mode`` wakes vLLM, loads the
  FSDP weights into it, wakes its KV cache; ``trainer_mode`` puts it to sleep again): a weight
  sync and a wake/sleep per round, not per step (``round_s`` plus the weight sync);
- moves the round's output to the driver through Ray: every sample padded to the rollout's
  fixed widths (prompt 1,024 and response 2,048 tokens: ``responses``, ``prompts``,
  ``input_ids``, ``attention_mask``, ``position_ids``, int64; ``sample_bytes``);
- scores every response (``compute_seq_rewards_for_round`` -> ``compute_reward`` -> the reward
  manager). verl's ``naive`` reward manager decodes and scores one response after another in the
  driver process (``score_processes = 1``); the fork as released swaps in a pool of 16 processes
  created per call (``score_processes = 16`` with ``pool_start_s``).

After the loop the kept batch (B x n) goes through ``fit``'s ``reward`` block once more: the loop
leaves ``token_level_scores`` but not ``rm_scores``, so ``compute_reward`` scores it again
(``rescore_kept``, the multi-round algorithms only). GRPO takes one ``generate_sequences`` call
and one scoring pass.

``score_s`` is the one constant with a published measurement: verl PR #1206 (rawsh, April 2025)
reports the ``naive`` manager with Math-Verify taking "200+ seconds" for 256 x 64 = 16,384
responses, 12.2 ms a response or more. ``round_s`` and ``step_s`` have none: they are fitted
(docs/schedulers.md, "Against the paper: the calibrated preset").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.clustertime import GIB, ClusterModel, ModelShape, rank_memory
from trainer.enginetime import EngineTimeModel

# The authors' scripts (RLHFlow/Reinforce-Ada, scripts/run_reinforce_ada.sh): prompts up to
# 1,024 tokens, responses up to 2,048; vLLM at gpu_memory_utilization 0.8 with chunked prefill
# and max_num_batched_tokens = max_prompt_length + max_response_length = 3,072.
PAPER_MAX_PROMPT_TOKENS = 1024
PAPER_MAX_NUM_BATCHED_TOKENS = 3072
PAPER_GPU_MEMORY_UTILIZATION = 0.8
PAPER_SOLVED_FILTER = 16   # prompts kept only if one of 16 samples was right (the paper, sec. 3)


@dataclass(frozen=True)
class PipelineModel:
    """Seconds verl's driver adds to a step; see the module docstring for each term."""

    score_s: float = 0.0122          # per response, one process (verl PR #1206)
    score_processes: int = 1         # 1: verl's naive manager; 16: the fork's pool
    pool_start_s: float = 0.0        # per scoring call, when score_processes > 1
    round_s: float = 0.0             # per generate call: mode switch, Ray dispatch (fitted)
    sample_bytes: int = 8 * (PAPER_MAX_PROMPT_TOKENS + 2048 + 3 * (PAPER_MAX_PROMPT_TOKENS + 2048))
    data_gb_s: float = 2.0           # Ray's object store with pickling, driver <-> workers
    rescore_kept: bool = True        # the multi-round loop's kept batch is scored again
    step_s: float = 0.0              # per step: the driver's fixed work (fitted)
    host_gb_s: float = 25.0          # vLLM sleep/wake: the weights to host memory and back

    def scoring_seconds(self, responses: int) -> float:
        """One scoring call over ``responses``."""
        if not responses:
            return 0.0
        if self.score_processes <= 1:
            return responses * self.score_s
        return self.pool_start_s + responses * self.score_s / self.score_processes

    def call_seconds(self, samples: int, model: ModelShape) -> float:
        """One ``generate_sequences`` call's driver-side cost: the mode switch (the bf16 weights
        to host memory and back for vLLM's sleep mode, plus ``round_s``), the round's output to
        the driver and its scoring. The weight sync itself is the caller's (clustertime)."""
        switch = self.round_s + 2 * (2 * model.params) / (self.host_gb_s * 1e9)
        return switch + samples * self.sample_bytes / (self.data_gb_s * 1e9) \
            + self.scoring_seconds(samples)


@dataclass(frozen=True)
class PipelineTime:
    """The pipeline's share of one step, seconds."""

    calls: int
    scoring_s: float
    calls_s: float          # mode switches, data movement and scoring of every call
    rescoring_s: float
    extra_weight_sync_s: float   # the weight sync of every call after the first
    step_s: float

    @property
    def total_s(self) -> float:
        return self.calls_s + self.rescoring_s + self.extra_weight_sync_s + self.step_s


def pipeline_time(pipeline: PipelineModel, calls: Sequence[int], kept: int, *, rescore: bool,
                  model: ModelShape, weight_sync_s: float) -> PipelineTime:
    """The pipeline's seconds for a step of ``calls`` (samples of each generate call) that keeps
    ``kept`` responses; ``rescore``: the algorithm runs verl's multi-round loop."""
    calls_s = sum(pipeline.call_seconds(s, model) for s in calls)
    scoring = sum(pipeline.scoring_seconds(s) for s in calls)
    rescoring = pipeline.scoring_seconds(kept) if rescore and pipeline.rescore_kept else 0.0
    return PipelineTime(calls=len(calls), scoring_s=scoring + rescoring, calls_s=calls_s,
                        rescoring_s=rescoring,
                        extra_weight_sync_s=max(0, len(calls) - 1) * weight_sync_s,
                        step_s=pipeline.step_s)


def kv_capacity_tokens(model: ModelShape, cluster: ClusterModel, *,
                       utilization: float = PAPER_GPU_MEMORY_UTILIZATION,
                       reserve_gib: float = 2.0) -> int:
    """Tokens of KV cache one colocated engine holds: ``utilization`` of the GPU less the FSDP
    shard (parameters, gradients and AdamW state stay on the GPU: the authors offload neither),
    the engine's bf16 weights and ``reserve_gib`` for vLLM's activations and CUDA graphs."""
    memory = rank_memory(model, cluster.gpus)
    room = cluster.hbm_gib * utilization - memory.shard - memory.engine_weights - reserve_gib
    return max(0, int(room * GIB / model.kv_bytes_per_token))


def paper_engine(engine: EngineTimeModel, model: ModelShape,
                 cluster: ClusterModel) -> EngineTimeModel:
    """``engine`` with the authors' vLLM limits where it leaves them out (0): the KV cache
    that fits at ``gpu_memory_utilization`` 0.8 beside the FSDP shard, and chunked prefill at
    ``max_num_batched_tokens`` 3,072."""
    return dataclasses.replace(
        engine,
        kv_capacity_tokens=engine.kv_capacity_tokens or kv_capacity_tokens(model, cluster),
        max_num_batched_tokens=engine.max_num_batched_tokens or PAPER_MAX_NUM_BATCHED_TOKENS)


def update_token_seconds(model: ModelShape, mfu: float, peak_flops: float = 989e12) -> float:
    """The update's seconds per kept token at ``mfu`` of an H100's dense bf16 peak: 10 N FLOPs
    a token with activation checkpointing (the old log-probs' forward 2 N, the forward 2 N, its
    recomputation 2 N, the backward 4 N)."""
    return 10 * model.params / (mfu * peak_flops)


@dataclass(frozen=True)
class Anchor:
    """A published step time the preset is compared with."""

    model: str          # a key of trainer.clustertime.MODELS
    algorithm: str
    step_s: float | None    # seconds, where published
    ratio: float | None     # step / GRPO's, where published
    source: str
    calibrated: bool        # used to fit the preset's constants (else held out)


# The paper's Table 2 (arXiv 2510.04996; the PDF in RLHFlow/Reinforce-Ada, paper/Reinforce_ada.pdf):
# average step time, 8 x H100, verl, B = 512, n = 4 (M = 8, N = 4 for the Seq variants).
TABLE2 = "Reinforce-Ada, Table 2 (8 x H100)"
PAPER_ANCHORS = (
    Anchor("1.5b", "grpo", 102.0, 1.0, TABLE2, True),
    Anchor("1.5b", "ada-pos", 228.0, 2.2, TABLE2, True),
    Anchor("1.5b", "ada-balance", 290.0, 2.8, TABLE2, True),
    Anchor("7b", "grpo", 236.0, 1.0, TABLE2, True),
    Anchor("7b", "ada-pos", 333.0, 1.41, TABLE2, False),
    Anchor("7b", "ada-balance", 375.0, 1.59, TABLE2, False),
    # v3's Est ratio as docs/benchmarks.md records it (v3's text was not reachable here).
    Anchor("1.5b", "ada-est", None, 1.3, "Reinforce-Ada v3, Table 3 (as recorded)", False),
)

# Fitted by benchmarks/calibrate_steptime.py to the calibrated anchors above (least squares on
# the relative step-time errors; the Seq variants' pass rates Beta(0.5, 0.5) with the paper's
# one-of-16 filter, 2 simulated steps): docs/schedulers.md gives the fit and every error.
PAPER_MFU = 0.2
PAPER_PIPELINE = PipelineModel(round_s=11.4, step_s=29.1)
