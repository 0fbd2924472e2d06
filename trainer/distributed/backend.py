"""The driver's side of a distributed run (``world_size > 1``): a generation backend that
spreads requests over the ranks' engines and a learner that trains the sharded policy, so that
``trainer.train`` runs unchanged. The driver holds no model.

- **Requests.** A prompt's requests all go to one engine (its prefix stays cached there); the
  prompts are spread so that the engines get about as many requests each. Every request
  carries its own seed (``request_seed``), so which engine draws a sample does not change it.
- **The update.** Every rank gets the whole kept batch and computes its token-balanced part of
  each mini-batch (``trainer.distributed.rank``); all ranks return the same global metrics.
- **Split ranks** (``rollout_ranks`` > 0): requests go to the rollout ranks' engines only,
  the update, the KL and the checkpoints to the train ranks only (token-balanced over them),
  and the weight sync to both at once (the train ranks send, the rollout ranks load;
  ``trainer.distributed.rank``). Asynchronously (``max_policy_lag`` >= 1) with
  ``weight_push`` = staged, the push starts as soon as the update returns, while the rollout
  ranks still generate the update's tick: they receive it into a host copy on a second
  thread, and ``sync_weights`` (once the tick returned) only swaps it into their engines.
  The rollout ranks hold nothing to save: a resumed run loads the train ranks' shards and
  pushes the weights to them.
- **Checkpoints.** The driver's run state (RNG streams, step, the algorithm's state) in
  ``trainer_state.json`` as in one process; the ranks' shards with
  ``torch.distributed.checkpoint`` under ``sharded/`` and a Hugging Face export of the whole
  policy beside them, all inside the checkpoint's temporary directory before it is renamed
  into place. Multi-node: the output directory must be on a file system every node shares.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainer.config import TrainConfig
from trainer.distributed.launcher import RankGroup
from trainer.learner import update_batch
from trainer.result import SamplerResult
from trainer.types import Generation, Prompt, RankRecord, RoundsOutcome


def spread(counts: Sequence[int], engines: int) -> list[list[int]]:
    """Prompt indices per engine: each prompt whole on one engine, the largest first onto the
    engine with the fewest requests so far (ties: the lower engine); in prompt order."""
    load = [0] * engines
    out: list[list[int]] = [[] for _ in range(engines)]
    for i in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        k = min(range(engines), key=lambda e: (load[e], e))
        out[k].append(i)
        load[k] += counts[i]
    return [sorted(part) for part in out]


class DistributedBackend:
    """``GenerationBackend`` over a ``RankGroup``; ``learner`` trains the ranks' policy."""

    model: Any = None       # the policy lives in the ranks
    tokenizer: Any = None   # the engines return token ids: the driver never tokenizes

    def __init__(self, config: TrainConfig, *, group: RankGroup | None = None) -> None:
        self.config = config
        self.group = group if group is not None else RankGroup(config)
        self.learner = DistributedLearner(self)
        self.sync_seconds: list[float] = []

    @property
    def world_size(self) -> int:
        return len(self.group.actors)

    def generate(self, prompts: Sequence[Prompt], counts: Sequence[int], *, seed: int,
                 greedy: bool = False) -> list[list[Generation]]:
        if len(prompts) != len(counts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        parts = spread(counts, len(self.group.rollout))
        answers = self.group.call_each("generate", [
            (([prompts[i] for i in part], [counts[i] for i in part]),
             {"seed": seed, "greedy": greedy}) for part in parts], on=self.group.rollout)
        out: list[list[Generation]] = [[] for _ in prompts]
        for part, answer in zip(parts, answers, strict=True):
            for i, gens in zip(part, answer, strict=True):
                out[i] = gens
        return out

    def request_engine(self, count_partial: bool = True) -> DistributedRequestEngine:
        return DistributedRequestEngine(self.group, count_partial)

    def engine_logprobs(self, prompt_ids: Sequence[Sequence[int]],
                        response_ids: Sequence[Sequence[int]]) -> list[list[list[float]]]:
        """Every engine's log-probs of the same responses (one list per engine's rank)."""
        return self.group.call_all("engine_logprobs", prompt_ids, response_ids,
                                   on=self.group.rollout)

    def sync_weights(self) -> None:
        self.learner.sync_weights()

    def close(self) -> None:
        self.group.stop()


class DistributedRequestEngine:
    """``RequestEngine`` over the ranks' engines (the rollout ranks', when split): submits and
    aborts are routed to the engine that holds the prompt; ``step`` steps every engine once
    (those with work) and returns what finished anywhere. Engines are numbered in the order of
    their ranks."""

    def __init__(self, group: RankGroup, count_partial: bool) -> None:
        self.group = group
        self.ranks = list(group.rollout)
        self.engines = len(self.ranks)
        self.capacities = group.call_all("engine_open", count_partial, on=self.ranks)
        self.home: dict[str, int] = {}
        self.load = [0] * self.engines
        self.queued: list[list[tuple[Hashable, Prompt, int, int]]] = [
            [] for _ in range(self.engines)]
        self.live: dict[Hashable, int] = {}   # key -> engine, submitted and not finished

    def submit(self, key: Hashable, prompt: Prompt, sample: int, seed: int) -> None:
        engine = self.home.get(prompt.id)
        if engine is None:
            engine = self.home[prompt.id] = min(range(self.engines),
                                                key=lambda e: (self.load[e], e))
        self.load[engine] += 1
        self.queued[engine].append((key, prompt, sample, seed))
        self.live[key] = engine

    def step(self) -> list[tuple[Hashable, Generation]]:
        answers = self.group.call_each("engine_step", [
            ((self.queued[e], []), {}) for e in range(self.engines)], on=self.ranks)
        self.queued = [[] for _ in range(self.engines)]
        finished = [item for done, _, _ in answers for item in done]
        for key, _ in finished:
            self.live.pop(key, None)
        return finished

    def abort(self, keys: Sequence[Hashable]) -> int:
        per_engine: list[list[Hashable]] = [[] for _ in range(self.engines)]
        for key in keys:
            engine = self.live.pop(key, None)
            if engine is None:
                continue
            queued = self.queued[engine]
            kept = [q for q in queued if q[0] != key]
            if len(kept) == len(queued):  # already in the engine
                per_engine[engine].append(key)
            self.queued[engine] = kept
        if not any(per_engine):
            return 0
        answers = self.group.call_each("engine_step_abort", [
            ((per_engine[e],), {}) for e in range(self.engines)], on=self.ranks)
        return int(sum(answers))

    def pending(self) -> int:
        return len(self.live)

    def capacity(self) -> int:
        """The most requests one rank's engine runs at once (the smallest, should they
        differ): speculative early rounds check each engine against it."""
        if any(c is None for c in self.capacities):
            raise ValueError("a rank's engine does not report its batch limit (capacity()), "
                             "which early_rounds 'speculative' needs")
        return min(self.capacities)

    def engine_of(self, prompt: Prompt) -> int:
        """The engine that serves ``prompt`` (or would, were it submitted now)."""
        engine = self.home.get(prompt.id)
        if engine is None:
            return min(range(self.engines), key=lambda e: (self.load[e], e))
        return engine

    def pending_per_engine(self) -> list[int]:
        """Unfinished requests on each engine."""
        counts = [0] * self.engines
        for engine in self.live.values():
            counts[engine] += 1
        return counts


class DistributedLearner:
    """``trainer.learner.Learner`` over the ranks of a ``DistributedBackend``."""

    def __init__(self, backend: DistributedBackend) -> None:
        self.backend, self.group, self.config = backend, backend.group, backend.config
        self.sync_seconds: list[float] = []
        self._nodes: list[str] | None = None
        # A staged push under way: the train ranks' sends and the rollout ranks' receives.
        self.pushing: tuple[list[Any], list[Any]] | None = None

    def stages(self) -> bool:
        """Whether the push after an update is staged (``weight_push``): only where requests
        run during the update (split ranks, ``max_policy_lag`` >= 1); otherwise nothing
        generates while the push could run, and the engines load it as it arrives."""
        c = self.config
        return c.weight_push == "staged" and c.rollout_ranks > 0 and c.max_policy_lag >= 1

    def prepare(self, resume_from: str | Path | None) -> dict[str, Any] | None:
        from trainer import checkpoint as ckpt

        # The ranks take this run's config (a group may outlive a run: tests reuse one); ranks
        # an earlier run trained go back to the model's initial weights.
        fresh = resume_from is None and self.group.trained
        self.group.call_all("begin_run", self.config.to_dict(), initial_weights=fresh)
        if fresh:
            self.sync_weights()
        if resume_from is None:
            return None
        if not (Path(resume_from) / "sharded").is_dir():
            raise ValueError(f"checkpoint {resume_from} has no sharded/ directory: it was not "
                             "written by a world_size > 1 run")
        state = ckpt.load_checkpoint(resume_from)  # the driver's RNG streams and run state
        self.group.call_all("load", str(resume_from), on=self.group.train)
        self.sync_weights()  # the engines (the rollout ranks' when split) get the loaded weights
        return state

    def update(self, res: SamplerResult, outcome: RoundsOutcome, batch: Sequence[Prompt],
               kept: np.ndarray, *, step: int, seed: int,
               should_stop: Callable[[], bool] | None = None,
               prompt_stats: bool = False) -> dict[str, Any]:
        # The per-prompt statistics are summed over the ranks inside the update, so rank 0's
        # result holds them whole.
        ub = update_batch(res, outcome, batch, kept, None, prompt_stats=prompt_stats)
        self.group.trained = True
        metrics = self.group.call_all("update", ub, seed=seed, should_stop=should_stop,
                                      on=self.group.train)[0]
        if not math.isfinite(metrics["policy_loss"]):
            raise FloatingPointError(f"non-finite policy loss {metrics['policy_loss']}")
        if self.stages():
            # The push starts now, while the update's tick still runs on the rollout ranks:
            # the train ranks gather and send, the rollout ranks stage it on their transfer
            # thread; ``sync_weights`` waits for it and swaps it in.
            g = self.group
            self.pushing = (g.submit("sync_weights", on=g.train),
                            g.submit("receive_staged", on=g.rollout, transfer=True))
        return metrics

    def sequence_kl(self, res: SamplerResult, outcome: RoundsOutcome,
                    batch: Sequence[Prompt]) -> tuple[np.ndarray, np.ndarray]:
        """Every sample's KL to the reference (``LocalLearner.sequence_kl``), each rank
        computing its part against its shard of the frozen reference; the sums are every
        rank's, so rank 0's answer is whole."""
        every = np.ones(len(res.rewards), dtype=bool)
        ub = update_batch(res, outcome, batch, every, None)
        return self.group.call_all("sequence_kl", ub, on=self.group.train)[0]

    def sync_weights(self) -> None:
        """The updated weights into every engine: each rank gathers into its own (colocated),
        or the train ranks push to the rollout ranks (split), both sides in this one call;
        after a staged push (``update`` started it; the engines' requests have finished), the
        rest of it waited for and the staged weights swapped into the rollout engines."""
        t0 = time.perf_counter()
        if self.pushing is not None:
            self.finish_push()
            self.group.call_all("swap_staged", on=self.group.rollout)
        else:
            self.group.call_all("sync_weights")
        self.sync_seconds.append(time.perf_counter() - t0)

    def finish_push(self) -> None:
        """Wait for the staged push under way, if any (both sides reach its end)."""
        if self.pushing is None:
            return
        (sent, received), self.pushing = self.pushing, None
        self.group.wait(sent + received, what="the weight push",
                        on=[*self.group.train, *self.group.rollout])

    def rank_records(self) -> list[RankRecord]:
        """Each rank's node, device, role and seconds since the last step's report: generating
        its share of the requests, its part of the update, the weight gather (split: a train
        rank's whole push, the send included; a rollout rank's receive of a staged push, which
        overlaps its generation) and the engine load (split: a rollout rank's whole receive and
        load, or a staged push's swap alone)."""
        if self._nodes is None:
            self._nodes = [w["ip"] for w in self.group.where()]
        return [RankRecord(rank=r["rank"], node=node, device=r["device"],
                           generation_s=r.get("generation", 0.0), update_s=r.get("update", 0.0),
                           weight_gather_s=r.get("gather", 0.0),
                           engine_load_s=r.get("load", 0.0), role=r["role"])
                for r, node in zip(self.group.call_all("step_report"), self._nodes, strict=True)]

    def save(self, path: Path, *, step: int, config: dict[str, Any],
             extra: dict[str, Any]) -> Path:
        from trainer import checkpoint as ckpt

        if self.pushing is not None:  # a stop between an update and its sync: finish it
            self.sync_weights()

        def shards(tmp: Path) -> None:  # the train ranks': the rollout ranks hold no shard
            self.group.call_all("save", str(tmp), on=self.group.train)
            self.group.call_all("export_hf", str(tmp), on=self.group.train)

        return ckpt.save_checkpoint(path, step=step, config=config, extra=extra, write=shards)
