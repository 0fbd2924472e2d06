"""Two simulated Ray nodes on this machine (``ray.cluster_utils.Cluster``), one CPU each: a
``world_size = 2`` run places one rank on each and completes, its records whole. Its own module:
the Ray it connects to is not test_distributed.py's. Slow: about 3 minutes here."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.vllm import requires_vllm
from tests.trainer.test_vllm_backend import vllm_config
from trainer.recorders import ListRecorder
from trainer.types import STEP_METRICS

pytestmark = [requires_vllm(), pytest.mark.slow]


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    from trainer.distributed.placement import RAY_TEMP_ROOT, ray_environment

    os.environ.update({k: v for k, v in ray_environment(local=True).items()
                       if k != "PYTHONPATH"})
    RAY_TEMP_ROOT.mkdir(parents=True, exist_ok=True)
    # Where Cluster writes its address file (else /tmp/ray).
    os.environ["RAY_TMPDIR"] = str(RAY_TEMP_ROOT.parent)  # Ray appends "ray"
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "temp_dir": str(RAY_TEMP_ROOT)})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", cluster.address)
        yield cluster
    cluster.shutdown()
    os.environ.pop("RAY_TMPDIR", None)


def test_one_rank_on_each_of_two_nodes_completes_a_run(two_nodes: Any, tiny_model_dir: Path,
                                                       tmp_path: Path) -> None:
    from trainer.data import resolve_prompts
    from trainer.distributed.backend import DistributedBackend
    from trainer.loop import train

    # The device and dtype at their defaults ("auto": cpu and float32 here), as a user leaves them.
    config = vllm_config(tiny_model_dir, world_size=2, rollout_dtype="auto", total_steps=1,
                         save_every=0)
    prompts, _ = resolve_prompts(config)
    backend = DistributedBackend(config)
    try:
        nodes = [w["node"] for w in backend.group.where()]
        assert len(set(nodes)) == 2, nodes
        rec = ListRecorder()
        result = train(config, prompts, backend, rec, out_dir=tmp_path)
    finally:
        backend.close()
    assert result.status == "completed"
    (step,) = rec.steps
    assert set(STEP_METRICS) <= set(step.metrics)
    assert all(math.isfinite(v) for v in step.metrics.values())
    assert len(step.samples) == step.metrics["samples"] and len(step.ranks) == 2
