"""The batch-selection seam (``Algorithm.select_batch``), proven by a toy defined in this file
alone: it chooses each step's prompts from the whole set by a persistent score (the prompts
whose pass rate it is least sure of first, a curriculum's shape), instead of the seeded
permutation. It trains through ``trainer.train``, resumes exactly (its score is checkpointed),
the simulator and the visit counts follow its choice, an asynchronous producer can ask it one
prompt at a time, and the launch form offers it."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from trainer import seeds, train
from trainer.algorithms import (
    Algorithm,
    BatchContext,
    SampledStep,
    StepContext,
    register_algorithm,
    sample_batch,
    unregister_algorithm,
)
from trainer.backends.simulated import SimulatedBackend
from trainer.checkpoint import latest_checkpoint
from trainer.cli import simulate
from trainer.config import TrainConfig
from trainer.recorders import ListRecorder
from trainer.types import Prompt, StepRecord


class Scores:
    """Per prompt of the set (by index): positives and samples seen so far. Run state: made once,
    passed to every step, saved in every checkpoint."""

    def __init__(self, config: TrainConfig) -> None:
        self.positives: dict[int, int] = {}
        self.samples: dict[int, int] = {}

    def uncertainty(self, i: int) -> float:
        """p (1 - p) of the Laplace estimate (pos + 1) / (n + 2): 0.25 for a prompt never seen."""
        p = (self.positives.get(i, 0) + 1) / (self.samples.get(i, 0) + 2)
        return p * (1 - p)

    def state_dict(self) -> dict[str, Any]:
        return {"positives": sorted(self.positives.items()),
                "samples": sorted(self.samples.items())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.positives = {int(i): int(v) for i, v in state["positives"]}
        self.samples = {int(i): int(v) for i, v in state["samples"]}


def most_uncertain(ctx: BatchContext, count: int, taken: Collection[int]) -> list[int]:
    """The ``count`` prompts of the set the toy is least sure of (ties: the lower index)."""
    scores: Scores = ctx.state
    order = sorted(range(len(ctx.prompt_set)), key=lambda i: (-scores.uncertainty(i), i))
    return [i for i in order if i not in taken][:count]


def sample_and_score(ctx: StepContext) -> SampledStep:
    """GRPO's step on the chosen batch; then the score takes what it saw."""
    sampled = sample_batch(ctx)
    res, scores = sampled.result, ctx.state
    if res is not None and ctx.batch_indices is not None:
        for k, i in enumerate(ctx.batch_indices):
            scores.positives[i] = scores.positives.get(i, 0) + int(res.positives[k])
            scores.samples[i] = scores.samples.get(i, 0) + int(res.samples[k])
    return sampled


TOY = Algorithm(
    name="toy-uncertain", label="Toy: least sure first",
    help="one round of n on the prompts whose pass rate is least certain", sampling="group",
    sample_step=sample_and_score, select_batch=most_uncertain, advantage="group",
    std_normalize=True, make_state=Scores, state_key="toy_scores",
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: c.batch_size * c.group_size,
    step_shape="batch_size x group_size", summary_fields=("group_size",))

RATES = [0.0, 1.0, 0.5, 0.0, 1.0, 0.5, 0.0, 1.0, 0.5, 0.5]


@pytest.fixture
def toy() -> Iterator[Algorithm]:
    register_algorithm(TOY)
    yield TOY
    unregister_algorithm(TOY.name)


def prompts() -> list[Prompt]:
    return [Prompt(id=f"p{i}", text=f"{i}+1=", answer="x", metadata={"pass_rate": r})
            for i, r in enumerate(RATES)]


def run(tmp: Path, steps: int, resume: Path | None = None) -> list[StepRecord]:
    cfg = TrainConfig(algorithm=TOY.name, backend="simulated", verifier="exact", batch_size=4,
                      total_steps=steps, save_every=1, eval_every=0, seed=2).validate()
    rec = ListRecorder()
    train(cfg, prompts(), SimulatedBackend(cfg), rec, out_dir=tmp, resume_from=resume)
    return rec.steps


def batches(records: list[StepRecord]) -> list[list[int]]:
    return [[int(p.prompt_id[1:]) for p in r.prompts] for r in records]


def test_the_toy_chooses_its_batches_by_its_persistent_score(toy: Algorithm,
                                                             tmp_path: Path) -> None:
    records = run(tmp_path / "a", 6)
    chosen = batches(records)
    # Replay the score from the records: each step's batch is the 4 least certain prompts.
    scores = Scores(TrainConfig())
    for step, record in enumerate(records, 1):
        ctx = BatchContext(config=TrainConfig(batch_size=4), step=step,
                           prompt_set=prompts(), state=scores)
        assert chosen[step - 1] == most_uncertain(ctx, 4, ()), step
        for p in record.prompts:
            i = int(p.prompt_id[1:])
            scores.positives[i] = scores.positives.get(i, 0) + p.positives
            scores.samples[i] = scores.samples.get(i, 0) + p.samples
    assert chosen[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # never seen first, in index order
    assert chosen != [seeds.batch_indices(10, 4, 2, s) for s in range(1, 7)]
    # Once every prompt was seen, the prompts of pass rate 0.5 are chosen beyond their share.
    later = [RATES[i] for b in chosen[3:] for i in b]
    assert later.count(0.5) / len(later) > RATES.count(0.5) / len(RATES)
    # The visit counts follow the choice: prompts_revisited counts what earlier steps chose.
    for step, record in enumerate(records):
        earlier = {i for b in chosen[:step] for i in b}
        assert record.metrics["prompts_revisited"] == len(set(chosen[step]) & earlier)
    # The score is run state: a run resumed from step 3's checkpoint chooses the same batches
    # and draws the same samples.
    first = run(tmp_path / "b", 3)
    resumed = run(tmp_path / "b", 6, resume=latest_checkpoint(tmp_path / "b"))
    assert [strip(r) for r in first + resumed] == [strip(r) for r in records]


def strip(record: StepRecord) -> dict[str, Any]:
    out = dataclasses.asdict(record)
    out["metrics"] = {k: v for k, v in out["metrics"].items() if not k.startswith("time_")}
    return out


def test_a_producer_may_ask_one_prompt_at_a_time(toy: Algorithm) -> None:
    """An asynchronous producer admits prompts one by one: asking for one at a time, with what
    it took so far, gives the batch that asking for B at once gives."""
    scores = Scores(TrainConfig())
    scores.positives, scores.samples = {0: 4, 3: 2, 5: 1}, {0: 4, 3: 4, 5: 4}
    ctx = BatchContext(config=TrainConfig(batch_size=4), step=3, prompt_set=prompts(),
                       state=scores)
    taken: list[int] = []
    while len(taken) < 4:
        taken += most_uncertain(ctx, 1, taken)
    assert taken == most_uncertain(ctx, 4, ())


def test_the_simulator_follows_the_toys_choice(toy: Algorithm) -> None:
    out = simulate(TOY.name, RATES, group_size=4, steps=4, overrides={"batch_size": 4})
    chosen = [[p["index"] for p in s["prompts"]] for s in out["steps"]]
    # Listed in the pass rates' order; never seen first, then the least certain.
    assert chosen[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert {8, 9} <= set(chosen[2])
    scores = Scores(TrainConfig())
    for s in out["steps"][:3]:
        for p in s["prompts"]:
            scores.positives[p["index"]] = scores.positives.get(p["index"], 0) + p["positives"]
            scores.samples[p["index"]] = scores.samples.get(p["index"], 0) + p["samples"]
    ctx = BatchContext(config=TrainConfig(batch_size=4), step=4, prompt_set=prompts(),
                       state=scores)
    assert chosen[3] == sorted(most_uncertain(ctx, 4, ()))


@pytest.mark.django_db
def test_the_launch_form_offers_the_toy(toy: Algorithm, owner_client: Client) -> None:
    page = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert f'<option value="{toy.name}">{toy.label}</option>' in page
    assert toy.help in page  # the algorithm field's help lists it too
